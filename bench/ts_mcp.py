"""MCP clients on the TypeScript SDK for bench/transport_latency.py: one Node process per client.

Node-based agents (Claude Code, Claude Desktop, Cursor, VS Code) speak MCP through
``@modelcontextprotocol/sdk``; the Python SDK's client costs several times more CPU per call (its
``jsonschema`` validation, pydantic models, anyio streams and httpx), so the Python row alone
overstates what most agents pay. Each client is ``node bench/mcp_ts_client/client.mjs <url>``: a real
streamable-HTTP session, tools listed once (the SDK then validates each structured result against
the tool's output schema, with ajv), driven by JSON lines on its pipes. The call is timed inside
Node (``performance.now`` around ``callTool``), so the pipe to this process is not counted.

The SDK is installed on first use (``npm ci`` in ``bench/mcp_ts_client``, versions pinned by its
lockfile). Without ``node`` and ``npm`` the row is left out, with a note.
"""
from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from load import CallFailed

CLIENT_DIR = Path(__file__).resolve().parent / "mcp_ts_client"


class TimedCall(float):
    """A latency in ms measured by the client process itself (the bench keeps it instead of its own)."""


def unavailable() -> str | None:
    """Why the TypeScript client cannot run here (None: it can; installs the SDK if needed)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        return "node and npm are not on PATH"
    if not (CLIENT_DIR / "node_modules" / "@modelcontextprotocol" / "sdk").is_dir():
        done = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=CLIENT_DIR, capture_output=True, text=True,
                              check=False, timeout=600)
        if done.returncode != 0:
            return f"npm ci failed: {done.stderr.strip()[-300:]}"
    return None


class ClientProcess:
    """One client process (Node here, the Python SDK's in bench/mcp_py_client.py): one MCP session,
    one request at a time, JSON lines on its pipes."""

    def __init__(self, process: asyncio.subprocess.Process, name: str) -> None:
        self.process, self.name = process, name
        self.pid = process.pid
        self.ready: dict[str, Any] = {}  # its first line

    async def _line(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = await self.process.stdout.readline()
        if not line:
            raise CallFailed(f"{self.name} the client process exited")
        return json.loads(line)

    async def call(self, tool: str, arguments: dict[str, Any]) -> TimedCall:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"tool": tool, "arguments": arguments}).encode() + b"\n")
        await self.process.stdin.drain()
        answer = await self._line()
        if answer.get("error"):
            raise CallFailed(f"{self.name} {answer['error']}")
        return TimedCall(answer["ms"])

    async def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            await asyncio.wait_for(self.process.wait(), 10)
        except TimeoutError:
            self.process.kill()
            await self.process.wait()


async def open_process_client(stack: AsyncExitStack, argv: list[str], errlog: Any, *, name: str,
                              cwd: Path | None = None, timeout: float = 60) -> ClientProcess:
    """A started client process, initialized (its first line), that ends with ``stack``."""
    process = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                                                   stderr=errlog, cwd=cwd)
    client = ClientProcess(process, name)
    stack.push_async_callback(client.close)
    client.ready = await asyncio.wait_for(client._line(), timeout)  # noqa: SLF001 - its own first line
    if not client.ready.get("ready"):
        raise CallFailed(f"{name} unexpected first line {client.ready}")
    return client


async def open_client(stack: AsyncExitStack, url: str, errlog: Any) -> ClientProcess:
    """A Node client on the TypeScript SDK, session open on ``url``."""
    return await open_process_client(stack, ["node", str(CLIENT_DIR / "client.mjs"), url], errlog, name="ts",
                                     cwd=CLIENT_DIR)
