"""One MCP client on the Python SDK in a process of its own, as an agent is: for bench/transport_latency.py.

    python bench/mcp_py_client.py http http://127.0.0.1:3721      # a streamable-HTTP session on /mcp
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
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

sys.path[:0] = [str(Path(__file__).resolve().parent)]


async def _streams(stack: AsyncExitStack, kind: str, target: str) -> tuple[Any, ...]:
    if kind == "http":
        from mcp.client.streamable_http import streamable_http_client

        return await stack.enter_async_context(streamable_http_client(target + "/mcp"))
    from mcp.client.stdio import stdio_client
    from mcp_initialize import stdio_parameters

    return await stack.enter_async_context(stdio_client(stdio_parameters(Path(target)), errlog=sys.stderr))


def _error_code(result: Any) -> str:
    text = result.content[0].text if result.content else "{}"
    try:
        return str(json.loads(text).get("error", {}).get("code", "?"))
    except ValueError:
        return text[:40]


async def _serve(session: Any) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := await reader.readline():
        request = json.loads(line)
        started = time.perf_counter()
        try:
            result = await session.call_tool(request["tool"], request["arguments"])
        except Exception as exc:  # noqa: BLE001 - reported to the bench, which counts it as an error
            answer: dict[str, Any] = {"error": f"{type(exc).__name__}: {exc}"[:200]}
        else:
            elapsed = (time.perf_counter() - started) * 1e3
            answer = {"error": f"mcp {_error_code(result)}"} if result.is_error else {"ms": elapsed}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


async def main(kind: str, target: str) -> None:
    from mcp import ClientSession

    async with AsyncExitStack() as stack:
        started = time.perf_counter()
        streams = await _streams(stack, kind, target)
        session = await stack.enter_async_context(ClientSession(streams[0], streams[1]))
        await session.initialize()
        initialized = (time.perf_counter() - started) * 1e3  # for stdio: the server process started and answered
        await session.list_tools()  # the output schemas: each structured result is validated against its tool's
        sys.stdout.write(json.dumps({"ready": True, "initialize_ms": initialized}) + "\n")
        sys.stdout.flush()
        await _serve(session)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("http", "stdio"):
        sys.exit(__doc__)
    asyncio.run(main(sys.argv[1], sys.argv[2]))
