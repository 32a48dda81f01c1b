"""One MCP client on the Python SDK in a process of its own, as an agent is: for bench/transport_latency.py.

    python bench/mcp_py_client.py http http://127.0.0.1:3721      # a streamable-HTTP session on /mcp
    python bench/mcp_py_client.py 2026 http://127.0.0.1:3721      # the SDK's Client as it comes: 2026-07-28
    python bench/mcp_py_client.py stdio /path/to/config.json       # starts `bhgbrain … --stdio` as Claude Desktop does

Eight agents are eight processes. Run as coroutines of the bench's own process, eight Python SDK
clients (2.2 ms of client CPU per call each) queued behind that one process's GIL, a wait no agent
setup has. This script speaks the protocol of bench/ts_mcp.py's Node client: ``{"ready": true}``
once initialized, then for each line ``{"tool": …, "arguments": …}`` on stdin one line
``{"ms": …}`` (``time.perf_counter`` around ``call_tool``: the pipe to the bench is not counted) or
``{"error": …}`` on stdout.
"""
from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parent)]

from load import CallFailed, mcp_session_calls, mcp_transport  # noqa: E402
from mcp_initialize import stdio_parameters  # noqa: E402


async def _session_call(stack: AsyncExitStack, kind: str, target: str) -> Callable[[str, dict[str, Any]], Awaitable[Any]]:
    """An initialized SDK session's tool call (load.py's: an error result raises CallFailed)."""
    if kind == "http":
        return (await mcp_transport(stack, target))[0]
    if kind == "2026":
        return await _client_call(stack, target)
    from mcp.client.stdio import stdio_client

    streams = await stack.enter_async_context(stdio_client(stdio_parameters(Path(target)), errlog=sys.stderr))
    return (await mcp_session_calls(stack, streams))[0]


async def _client_call(stack: AsyncExitStack, url: str) -> Callable[[str, dict[str, Any]], Awaitable[Any]]:
    """The SDK's ``Client`` in its default mode, which speaks 2026-07-28 to this server (checked)."""
    from mcp.client.client import Client

    client = await stack.enter_async_context(Client(url + "/mcp"))
    if client.protocol_version != "2026-07-28":
        raise RuntimeError(f"the Client negotiated {client.protocol_version}, not 2026-07-28")

    async def call(tool: str, arguments: dict[str, Any]) -> Any:
        result = await client.call_tool(tool, arguments)
        if result.is_error:
            raise CallFailed(f"mcp {(result.structured_content or {}).get('error', {}).get('code', '?')}")
        return result.structured_content

    return call


async def _serve(call: Callable[[str, dict[str, Any]], Awaitable[Any]]) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := await reader.readline():
        request = json.loads(line)
        started = time.perf_counter()
        try:
            await call(request["tool"], request["arguments"])
        except CallFailed as exc:
            answer: dict[str, Any] = {"error": exc.code}
        except Exception as exc:  # noqa: BLE001 - reported to the bench, which counts it as an error
            answer = {"error": f"{type(exc).__name__}: {exc}"[:200]}
        else:
            answer = {"ms": (time.perf_counter() - started) * 1e3}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


async def main(kind: str, target: str) -> None:
    async with AsyncExitStack() as stack:
        started = time.perf_counter()
        call = await _session_call(stack, kind, target)
        initialized = (time.perf_counter() - started) * 1e3  # for stdio: the server process started and answered
        sys.stdout.write(json.dumps({"ready": True, "initialize_ms": initialized}) + "\n")
        sys.stdout.flush()
        await _serve(call)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("http", "2026", "stdio"):
        sys.exit(__doc__)
    asyncio.run(main(sys.argv[1], sys.argv[2]))
