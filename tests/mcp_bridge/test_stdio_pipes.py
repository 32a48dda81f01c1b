"""MCP stdio served from the event loop's pipe I/O (mcp_bridge/stdio_pipes.py): the raw protocol
over a socket pair (as Node-based clients connect a server) and over a regular file (the SDK's own
path), long lines, and the line reader's handling of oversized lines."""
from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from mcp_bridge.stdio_pipes import TOO_LONG, PipeLines
from tests.live_server import server_env

ROOT = Path(__file__).resolve().parents[2]
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def _command(home: Path) -> list[str]:
    return [sys.executable, "-m", "bhgbrain_site.cli.main", f"--config={home / 'config.json'}", "server", "start", "--stdio"]


def _call(call_id: int, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": call_id, "method": "tools/call", "params": {"name": name, "arguments": arguments}}


def _lines(*messages: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(m).encode() + b"\n" for m in messages)


def _responses(raw: bytes) -> dict[int, dict[str, Any]]:
    messages = [json.loads(line) for line in raw.splitlines() if line.strip()]
    return {m["id"]: m for m in messages if "id" in m}


def _read_until(sock: socket.socket, count: int) -> dict[int, dict[str, Any]]:
    raw = b""
    while len(_responses(raw)) < count:
        chunk = sock.recv(1 << 16)
        assert chunk, f"the server closed the connection after {raw!r}"
        raw += chunk
    return _responses(raw)


@pytest.mark.parametrize("sockets", ["one socket both ways", "a socket pair each (Node's child_process)"])
def test_a_session_over_sockets_answers_every_call_and_a_long_line(tmp_path: Path, sockets: str) -> None:
    to_server, server_in = socket.socketpair()
    from_server, server_out = (to_server, server_in) if sockets.startswith("one") else socket.socketpair()
    proc = subprocess.Popen(_command(tmp_path), stdin=server_in, stdout=server_out, stderr=subprocess.PIPE,
                            env=server_env(), cwd=str(ROOT))
    for end in {server_in, server_out}:
        end.close()
    from_server.settimeout(120)
    try:
        long_query = "lighthouse " * 20_000  # a 220 KB line: past asyncio's default 64 KiB line limit
        to_server.sendall(_lines(
            INIT, INITIALIZED, _call(2, "remember", {"content": "The beacon is serviced every March", "namespace": "pipes"}),
            _call(3, "search", {"query": long_query, "namespace": "pipes"})))
        answers = _read_until(from_server, 3)  # calls run concurrently: search after the remember is answered
        to_server.sendall(_lines(_call(4, "search", {"query": "beacon serviced", "namespace": "pipes", "mode": "fulltext"})))
        answers.update(_read_until(from_server, 1))
    finally:
        for end in {to_server, from_server}:
            end.close()
        proc.wait(timeout=60)
    assert answers[1]["result"]["serverInfo"]["name"] == "bhgbrain"
    assert answers[2]["result"]["structuredContent"]["operation"] == "ADD"
    assert answers[3]["result"]["isError"] is True
    assert answers[3]["result"]["structuredContent"]["error"]["code"] == "INVALID_INPUT"
    hits = answers[4]["result"]["structuredContent"]["results"]
    assert [h["content"] for h in hits] == ["The beacon is serviced every March"]
    assert proc.returncode == 0, proc.stderr.read().decode() if proc.stderr else ""


def test_a_session_read_from_a_regular_file_uses_the_sdk_path(tmp_path: Path) -> None:
    requests = tmp_path / "requests.jsonl"
    requests.write_bytes(_lines(INIT))  # at the end of the file the session ends, in-flight calls with it
    with open(requests, "rb") as stdin:
        proc = subprocess.run(_command(tmp_path), stdin=stdin, capture_output=True, env=server_env(), cwd=str(ROOT),
                              timeout=120)
    answers = _responses(proc.stdout)
    assert answers[1]["result"]["serverInfo"]["name"] == "bhgbrain"
    assert proc.returncode == 0


def _read_all(data: bytes, limit: int) -> list[str]:
    async def run() -> list[str]:
        reader = asyncio.StreamReader(limit=limit)
        reader.feed_data(data)
        reader.feed_eof()
        return [line async for line in PipeLines(reader)]

    return asyncio.run(run())


def test_the_line_reader_refuses_an_oversized_line_and_goes_on_with_the_next() -> None:
    data = b'{"a": 1}\n' + b"x" * 5000 + b"\n" + '{"b": "é"}\n'.encode() + b'{"c": 3}'
    assert _read_all(data, limit=1024) == ['{"a": 1}\n', TOO_LONG, '{"b": "é"}\n', '{"c": 3}']


def test_the_line_reader_ends_on_an_oversized_last_line_without_a_newline() -> None:
    assert _read_all(b'{"a": 1}\n' + b"y" * 5000, limit=1024) == ['{"a": 1}\n', TOO_LONG]
