"""HTTP security over real HTTP: rate limit, body size, scoped tokens (alice/bob), redaction."""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.live_server import LiveServer, server_env


def _code(response: httpx.Response) -> str:
    return response.json()["error"]["code"]


def test_rate_limit_sliding_window_per_peer_with_headers(tmp_path: Path) -> None:
    live = LiveServer(home=tmp_path, config={"security": {"rate_limit_rpm": 5}}).start()
    try:
        remaining = []
        for i in range(5):
            # a client-chosen id must not buy a fresh bucket
            response = live.post("search", {"query": "anything"}, headers={"x-client-id": f"client-{i}"})
            assert response.status_code == 200, response.text
            assert response.headers["x-ratelimit-limit"] == "5"
            remaining.append(int(response.headers["x-ratelimit-remaining"]))
        assert remaining == [4, 3, 2, 1, 0]
        limited = live.post("search", {"query": "anything"}, headers={"x-client-id": "fresh"})
        assert limited.status_code == 429
        assert limited.json() == {"error": {"code": "RATE_LIMITED", "message": limited.json()["error"]["message"], "retryable": True}}
        assert limited.headers["x-ratelimit-remaining"] == "0"
        assert httpx.get(live.url + "/resource", params={"uri": "health://status"}).status_code == 429
        assert httpx.get(live.url + "/health").status_code == 200  # probes are never limited
    finally:
        live.stop()


def test_bodies_over_the_limit_are_413_before_being_read(tmp_path: Path) -> None:
    live = LiveServer(home=tmp_path, config={"security": {"max_request_size_bytes": 4096}}).start()
    try:
        declared = live.post("remember", {"content": "x" * 10_000})
        assert declared.status_code == 413 and _code(declared) == "INVALID_INPUT"

        def chunks():  # noqa: ANN202 - no content-length: chunked transfer
            for _ in range(100):
                yield b"x" * 1024

        chunked = httpx.post(live.url + "/tool/remember", content=chunks(), headers={"content-type": "application/json"})
        assert chunked.status_code == 413
        mcp = httpx.post(live.url + "/mcp", content=b"{" + b" " * 10_000 + b"}", headers={"content-type": "application/json"})
        assert mcp.status_code == 413
        small = live.post("remember", {"content": "small enough"})
        assert small.status_code == 200
    finally:
        live.stop()


def _token(live: LiveServer, *args: str) -> str:
    live.home.mkdir(parents=True, exist_ok=True)
    live.config_path.write_text(json.dumps(live.config))
    proc = subprocess.run(
        [sys.executable, "-m", "bhgbrain_site.cli.main", f"--config={live.config_path}", "token", "create", *args],
        capture_output=True, text=True, env=server_env(), timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@pytest.fixture(scope="module")
def actors(tmp_path_factory: pytest.TempPathFactory):  # noqa: ANN201
    live = LiveServer(home=tmp_path_factory.mktemp("scoped"), config={"security": {"rate_limit_rpm": 100_000}},
                      env={"BHGBRAIN_TOKEN": "master-token-value"})
    tokens = {
        "alice": _token(live, "--namespace", "alice", "--name", "alice"),
        "bob": _token(live, "--namespace", "bob", "--name", "bob"),
        "charlie": _token(live, "--namespace", "alice", "--read-only", "--name", "charlie"),
    }
    live.start()
    yield live, tokens
    live.stop()


def _as(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_tokens_are_stored_hashed(actors) -> None:  # noqa: ANN001
    live, tokens = actors
    raw = (live.home / "bhgbrain.sqlite3").read_bytes()
    assert tokens["alice"].encode() not in raw
    assert tokens["alice"].startswith("bhg_")


def test_scoped_tokens_never_cross_namespaces_over_http(actors) -> None:  # noqa: ANN001
    live, tokens = actors
    alice, bob = _as(tokens["alice"]), _as(tokens["bob"])
    secret = live.post("remember", {"content": "Alice's salary review is on March 3rd"}, headers=alice).json()
    assert secret["operation"] == "ADD"  # no namespace given: the token's own namespace
    bob_memory = live.post("remember", {"content": "Bob prefers tabs", "namespace": "bob"}, headers=bob).json()
    refused = live.post("remember", {"content": "x", "namespace": "alice"}, headers=bob)
    assert refused.status_code == 403 and _code(refused) == "FORBIDDEN"  # a valid token: re-authenticating won't help
    assert _code(live.post("search", {"query": "salary", "namespace": "alice"}, headers=bob)) == "FORBIDDEN"
    own = live.post("search", {"query": "salary"}, headers=bob).json()["results"]
    assert own and {r["namespace"] for r in own} == {"bob"}  # bob's default is his own namespace
    assert _code(live.post("forget", {"id": secret["id"]}, headers=bob)) == "NOT_FOUND"
    assert _code(live.post("tag", {"id": secret["id"], "add": ["x"]}, headers=bob)) == "NOT_FOUND"
    detail = httpx.get(live.url + "/resource", params={"uri": f"memory://{secret['id']}"}, headers=bob)
    assert _code(detail) == "NOT_FOUND"
    other = httpx.get(live.url + "/resource", params={"uri": f"memory://{secret['id']}?namespace=alice"}, headers=bob)
    assert _code(other) == "FORBIDDEN"
    listing = httpx.get(live.url + "/resource", params={"uri": "memory://list?namespace=alice"}, headers=bob)
    assert _code(listing) == "FORBIDDEN"
    rest = httpx.get(live.url + "/api/memories/", params={"namespace": "alice"}, headers=bob)
    assert rest.status_code == 403 and _code(rest) == "FORBIDDEN"
    rest_search = httpx.post(live.url + "/api/search/", json={"query": "salary", "namespace": "alice"}, headers=bob)
    assert rest_search.status_code == 403 and _code(rest_search) == "FORBIDDEN"
    found = live.post("search", {"query": "salary review"}, headers=alice).json()["results"]
    assert [r["id"] for r in found] == [secret["id"]]
    assert live.post("search", {"query": "tabs", "namespace": "bob"}, headers=bob).json()["results"][0]["id"] == bob_memory["id"]
    master = live.post("search", {"query": "salary", "namespace": "alice"}, headers=_as("master-token-value"))
    assert master.json()["results"][0]["id"] == secret["id"]
    assert live.post("search", {"query": "salary"}, headers=_as("bhg_not-a-real-token")).status_code == 401
    assert live.post("search", {"query": "salary"}).status_code == 401
    assert _code(live.post("search", {"query": "salary"})) == "AUTH_REQUIRED"


def test_read_only_token_reads_but_never_writes(actors) -> None:  # noqa: ANN001
    live, tokens = actors
    charlie = _as(tokens["charlie"])
    assert _code(live.post("remember", {"content": "sneaky write"}, headers=charlie)) == "FORBIDDEN"
    assert _code(live.post("category", {"action": "set", "name": "x", "content": "y"}, headers=charlie)) == "FORBIDDEN"
    assert live.post("search", {"query": "salary"}, headers=charlie).status_code == 200
    assert live.post("collections", {"action": "list"}, headers=charlie).status_code == 200


def test_backups_span_every_namespace_so_only_the_master_token_may_touch_them(actors) -> None:  # noqa: ANN001
    live, tokens = actors
    master = _as("master-token-value")
    for name in ("alice", "bob", "charlie"):
        assert _code(live.post("backup", {"action": "list"}, headers=_as(tokens[name]))) == "FORBIDDEN"
        listing = httpx.get(live.url + "/api/backups/", headers=_as(tokens[name]))
        assert listing.status_code == 403 and _code(listing) == "FORBIDDEN"
        assert httpx.post(live.url + "/api/backups/", headers=_as(tokens[name])).status_code == 403
    assert httpx.post(live.url + "/api/backups/").status_code == 401
    created = httpx.post(live.url + "/api/backups/", headers=master)
    assert created.status_code == 201 and created.json()["path"].endswith(".bhgb")
    restore = httpx.post(live.url + "/api/backups/restore/", json={"path": created.json()["path"]}, headers=_as(tokens["alice"]))
    assert restore.status_code == 403 and _code(restore) == "FORBIDDEN"
    assert created.json()["path"] in {b["path"] for b in httpx.get(live.url + "/api/backups/", headers=master).json()["backups"]}


def test_scoped_token_over_mcp_http(actors) -> None:  # noqa: ANN001
    live, tokens = actors

    async def session() -> dict[str, Any]:
        client = create_mcp_http_client(headers=_as(tokens["bob"]))
        async with client, streamable_http_client(live.url + "/mcp", http_client=client) as streams:
            async with ClientSession(streams[0], streams[1]) as mcp:
                await mcp.initialize()
                return {
                    "cross": await mcp.call_tool("search", {"query": "salary", "namespace": "alice"}),
                    "own": await mcp.call_tool("remember", {"content": "Bob's MCP note"}),
                    "resource": await mcp.read_resource("memory://list?namespace=alice"),
                }

    seen = asyncio.run(asyncio.wait_for(session(), timeout=60))
    assert seen["cross"].is_error is True and seen["cross"].structured_content["error"]["code"] == "FORBIDDEN"
    assert seen["own"].is_error is not True
    assert json.loads(seen["resource"].contents[0].text)["error"]["code"] == "FORBIDDEN"


def test_tokens_never_reach_the_logs(actors) -> None:  # noqa: ANN001
    live, tokens = actors
    live.post("remember", {"content": "x"}, headers=_as("wrong-token-abcdef123456"))
    logs = live.stderr() + (live.home / "logs" / "bhgbrain.log").read_text()
    for value in (*tokens.values(), "master-token-value", "wrong-token-abcdef123456"):
        assert value not in logs


def test_failed_authentication_is_logged_with_a_shortened_token(actors) -> None:  # noqa: ANN001
    live, tokens = actors
    # "xyz789": its first letters are no hex digits, so they cannot turn up inside a logged MCP
    # session id by chance (with "abc123", one run in a few dozen failed on a session id "…abc…").
    wrong, short, scoped = "wrong-token-for-the-log-0123456789", "xyz789", tokens["alice"][:-1] + "x"
    assert live.post("search", {"query": "x"}, headers=_as(wrong)).status_code == 401
    assert httpx.post(live.url + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                      headers=_as(short)).status_code == 401
    assert live.post("search", {"query": "x"}, headers=_as(scoped)).status_code == 401
    assert live.post("search", {"query": "x"}, headers={"Authorization": "Basic dXNlcjpwYXNz"}).status_code == 401
    assert live.post("search", {"query": "x"}).status_code == 401
    logs = live.stderr() + (live.home / "logs" / "bhgbrain.log").read_text()
    assert "authentication failed: invalid token wrong-to… from 127.0.0.1 for /tool/search" in logs
    assert "authentication failed: invalid token xy… from 127.0.0.1 for /mcp" in logs  # a third of a short one
    assert f"authentication failed: invalid token {scoped[:8]}…" in logs
    assert "authentication failed: no token from 127.0.0.1 for /tool/search" in logs
    assert "authentication failed: no token (an Authorization header of another scheme than 'bearer') from" in logs
    for value in (wrong, wrong[:9], short, short[:3], scoped, scoped[:9], "dXNlcjpwYXNz"):
        assert value not in logs


def test_allow_unauthenticated_http_starts_with_a_loud_warning(tmp_path: Path) -> None:
    live = LiveServer(home=tmp_path, config={"security": {"require_loopback_http": False, "allow_unauthenticated_http": True}})
    live.home.mkdir(parents=True, exist_ok=True)
    live.config_path.write_text(json.dumps(live.config))
    proc = subprocess.Popen(live.command("--host=0.0.0.0"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=server_env())
    try:
        import time

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{live.port}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
    finally:
        proc.terminate()
        _out, err = proc.communicate(timeout=30)
    assert "SECURITY WARNING" in err and "WITHOUT authentication" in err


def test_metrics_are_prometheus_histograms_only_when_enabled(tmp_path: Path) -> None:
    live = LiveServer(home=tmp_path, config={"observability": {"metrics_enabled": True}}).start()
    try:
        for _ in range(3):
            live.post("search", {"query": "anything"})
        live.post("remember", {"content": "x", "bogus": 1})
        text = httpx.get(live.url + "/metrics").text
        # prometheus-client writes labels in alphabetical order and values as floats
        assert 'bhgbrain_tool_calls_total{outcome="ok",tool="search"} 3.0' in text
        assert 'bhgbrain_tool_calls_total{outcome="INVALID_INPUT",tool="remember"} 1.0' in text
        assert 'bhgbrain_tool_duration_seconds_bucket{le="+Inf",tool="search"} 3.0' in text
        assert 'bhgbrain_tool_duration_seconds_count{tool="search"} 3.0' in text
        assert "# TYPE bhgbrain_tool_duration_seconds histogram" in text
        assert "bhgbrain_memory_count 0.0" in text
        assert "bhgbrain_rate_limited_total 0.0" in text
        assert "bhgbrain_rate_limit_buckets 1.0" in text  # this client's window
    finally:
        live.stop()
    disabled = LiveServer(home=tmp_path / "off").start()
    try:
        assert httpx.get(disabled.url + "/metrics").status_code == 404
    finally:
        disabled.stop()
