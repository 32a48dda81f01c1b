"""Load + audit: many agents at once over HTTP and MCP, then a check that nothing was lost.

A real server (``bhgbrain server start``, the default embedded setup: SQLite, embedded index,
bundled model, scheduler on) is started on a store preloaded with ``--size`` memories. Then
``--clients`` clients (``--mcp-clients`` of them real ``mcp`` SDK sessions over streamable HTTP
``/mcp``, the rest ``POST /tool/<name>`` on kept-alive HTTP connections) send a realistic mix for
``--duration`` seconds: remember new / duplicate / near-duplicate content, thread appends,
search in all three modes, recall, the inject block, tag, forget. Printed: throughput,
p50/p95/p99 per operation and transport, errors by code, the server's RSS over the run, and the
embedding model's own throughput measured in the same run (passages/s, the same threads as the
server) with the ratio of the server's operations/s to it.

Then the store is audited: every acknowledged write is there exactly once (its id live, unless
an acknowledged forget removed it), every acknowledged forget is gone, every acknowledged tag is
on its memory, no (namespace, checksum) is live twice, every live memory has its full-text row
and (after catch-up) its vector, and the server's in-process indexes agree with the database: a
sample of acknowledged memories is found by full-text and by semantic search, forgotten ones
never. The exit status is 1 when the audit fails or any request failed.

Usage (from the repository root)::

    .venv/bin/python bench/load.py                       # 16 clients, 60 s
    .venv/bin/python bench/load.py --clients 8 --duration 15 --size 500   # the short run
    .venv/bin/python bench/load.py --database-url postgres://postgres@127.0.0.1:5432/postgres

No assertions about timings.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO_ROOT), str(REPO_ROOT / "bench")]

import httpx  # noqa: E402
import search_latency as lat  # noqa: E402 - store set-up, sentences and machine facts are shared
from machine import load_average  # noqa: E402
from workers_load import preload_store, rss_mib, start_server, stop_server, warm_up  # noqa: E402

MIXES = {  # operation -> weight (per 100)
    # every operation an agent uses, writes and reads about half and half
    "realistic": {"remember_new": 30, "remember_duplicate": 6, "remember_near": 6, "thread_append": 6,
                  "search": 24, "recall": 14, "inject": 4, "tag": 5, "forget": 5},
    # the outside measurement: 50 % remember, 40 % search, 10 % recall
    "issue": {"remember_new": 50, "search_hybrid": 40, "recall": 10},  # search's default mode is hybrid
    # no writes: the server's RSS must level off (growth under writes is the store growing)
    "reads": {"search": 60, "recall": 30, "inject": 10},
    # writes that keep the store's size about constant (as many forgets as new memories): a leak
    # shows as RSS growth here, where the indexes do not grow
    "steady": {"remember_new": 15, "forget": 15, "remember_duplicate": 5, "tag": 5, "search": 35, "recall": 20,
               "inject": 5},
}
SEARCH_MODES = ("hybrid", "fulltext", "semantic")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients; default 16")
    parser.add_argument("--mcp-clients", type=int, default=None, help="of which MCP sessions; default a quarter")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of load; default 60")
    parser.add_argument("--size", type=int, default=2000, help="memories preloaded; default 2000")
    parser.add_argument("--mix", choices=sorted(MIXES), default="realistic",
                        help="realistic: every operation; issue: 50%% remember, 40%% search, 10%% recall; reads: no writes; "
                             "steady: as many forgets as new memories")
    parser.add_argument("--namespaces", type=int, default=4)
    parser.add_argument("--seed", type=int, default=4321)
    parser.add_argument("--sentences", type=int, default=3000,
                        help="sentences the preloaded memories are made of (embedded once, cached in bench/results)")
    parser.add_argument("--database-url", default=None, help="postgres://… (default: SQLite in a temp dir)")
    parser.add_argument("--no-scheduler", action="store_true", help="start the server without its scheduler")
    parser.add_argument("--workers", type=int, default=1, help="server worker processes; default 1")
    parser.add_argument("--embedding-batch", type=int, default=None,
                        help="the server's embedding.batch_max (default: the config's own default)")
    parser.add_argument("--embedding-threads", type=int, default=None,
                        help="the server's embedding.threads (default: the config's own default)")
    parser.add_argument("--embedding-engine", choices=("auto", "bundled"), default=None,
                        help="the server's embedding.engine, and the model alone's (default: the config's own)")
    parser.add_argument("--audit-sample", type=int, default=40,
                        help="acknowledged and forgotten memories searched for after the run; default 40 of each")
    parser.add_argument("--embed-seconds", type=float, default=10.0, help="how long to time the model alone")
    parser.add_argument("--json", type=Path, default=None, help="also write the result here")
    parser.add_argument("--keep", action="store_true", help="keep the temporary store (its path is printed)")
    return parser.parse_args(argv)


# --------------------------------------------------------------------------- bookkeeping


@dataclass
class Ledger:
    """What the server acknowledged, for the audit."""

    remembered: dict[str, str] = field(default_factory=dict)  # id -> namespace (ADD/UPDATE/NOOP results)
    added_content: dict[str, str] = field(default_factory=dict)  # id -> content sent (ADD only)
    merged_into: set[str] = field(default_factory=set)  # ids that an UPDATE merged other content into
    forgotten: dict[str, str] = field(default_factory=dict)  # id -> namespace
    tagged: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    latencies: dict[tuple[str, str], list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: Counter[str] = field(default_factory=Counter)
    operations: int = 0
    begun: float = field(default_factory=time.perf_counter)  # reset when the clients start
    slowest_reads: list[tuple[float, float, str, str, int]] = field(default_factory=list)  # ms, s into the run, …


@dataclass
class Client:
    """One agent: its transport, its namespace and the memories it may touch."""

    index: int
    transport: str
    namespace: str
    rng: random.Random
    call: Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]
    read: Callable[[str], Awaitable[dict[str, Any]]]
    mine: list[tuple[str, str]] = field(default_factory=list)  # (id, content) of its own ADDs
    thread_turn: int = 0


class CallFailed(Exception):
    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


async def http_transport(client: httpx.AsyncClient) -> tuple[Callable, Callable]:
    async def call(tool: str, body: dict[str, Any]) -> dict[str, Any]:
        response = await client.post(f"/tool/{tool}", json=body)
        if response.status_code != 200:
            raise CallFailed(f"{response.status_code} {response.json().get('error', {}).get('code', '?')}")
        return response.json()

    async def read(uri: str) -> dict[str, Any]:
        response = await client.get("/resource", params={"uri": uri})
        if response.status_code != 200:
            raise CallFailed(f"{response.status_code} {response.json().get('error', {}).get('code', '?')}")
        return response.json()

    return call, read


async def mcp_transport(stack: AsyncExitStack, url: str) -> tuple[Callable, Callable]:
    """A real ``mcp`` SDK session over streamable HTTP (``/mcp``): its tool call and resource read."""
    from mcp.client.streamable_http import streamable_http_client

    streams = await stack.enter_async_context(streamable_http_client(url + "/mcp"))
    return await mcp_session_calls(stack, streams)


async def mcp_session_calls(stack: AsyncExitStack, streams: tuple[Any, ...]) -> tuple[Callable, Callable]:
    """An initialized ``mcp`` SDK session over ``streams`` (any transport): its tool call (the
    structured result; an error result raises :class:`CallFailed`) and resource read."""
    from mcp import ClientSession

    session = await stack.enter_async_context(ClientSession(streams[0], streams[1]))
    await session.initialize()
    await session.list_tools()  # as agents do on connecting; else the SDK lists them inside the first call

    async def call(tool: str, body: dict[str, Any]) -> dict[str, Any]:
        result = await session.call_tool(tool, body)
        if result.is_error:
            text = result.content[0].text if result.content else "{}"
            try:
                code = json.loads(text).get("error", {}).get("code", "?")
            except ValueError:
                code = text[:40]
            raise CallFailed(f"mcp {code}")
        return result.structured_content or {}

    async def read(uri: str) -> dict[str, Any]:
        result = await session.read_resource(uri)
        return json.loads(result.contents[0].text)

    return call, read


# --------------------------------------------------------------------------- the mix


class Workload:
    def __init__(self, sentences: list[str], questions: list[str], ledger: Ledger, seed: int, mix: dict[str, int]) -> None:
        self.mix = mix
        self.sentences = sentences
        self.questions = questions
        self.ledger = ledger
        self.fresh = iter(random.Random(seed).sample(range(len(sentences) * len(sentences)), 200_000))
        self.serial = 0

    def new_content(self, rng: random.Random) -> str:
        pair = next(self.fresh)
        first, second = divmod(pair, len(self.sentences))
        return f"{self.sentences[first]} {self.sentences[second]}"

    async def step(self, client: Client) -> None:
        kind = client.rng.choices(list(self.mix), weights=list(self.mix.values()))[0]
        if kind in ("remember_duplicate", "remember_near", "tag", "forget") and not client.mine:
            kind = "remember_new"
        handler = getattr(self, "_search" if kind.startswith("search") else f"_{kind}")
        label = kind if kind != "search" else f"search_{SEARCH_MODES[self.serial % 3]}"  # "search": every mode in turn
        self.serial += 1
        started = time.perf_counter()
        try:
            await handler(client, label)
        except CallFailed as failure:
            self.ledger.errors[f"{label}: {failure.code}"] += 1
            return
        except (httpx.HTTPError, OSError, RuntimeError) as exc:
            self.ledger.errors[f"{label}: {type(exc).__name__}"] += 1
            return
        elapsed_ms = (time.perf_counter() - started) * 1e3
        self.ledger.latencies[(client.transport, label)].append(elapsed_ms)
        self.ledger.operations += 1
        if READS.match(label):
            slowest = self.ledger.slowest_reads
            slowest.append((elapsed_ms, started - self.ledger.begun, client.transport, label, client.index))
            slowest.sort(reverse=True)
            del slowest[SLOWEST_KEPT:]

    def _acknowledge(self, client: Client, result: dict[str, Any], content: str) -> None:
        self.ledger.remembered[result["id"]] = client.namespace
        if result["operation"] == "UPDATE":
            self.ledger.merged_into.add(result["id"])
        if result["operation"] == "ADD":
            self.ledger.added_content[result["id"]] = content
            client.mine.append((result["id"], content))

    async def _remember_new(self, client: Client, _label: str) -> None:
        content = self.new_content(client.rng)
        result = await client.call("remember", {"content": content, "namespace": client.namespace,
                                                "tags": ["load"], "source": "agent"})
        self._acknowledge(client, result, content)

    async def _remember_duplicate(self, client: Client, _label: str) -> None:
        _, content = client.rng.choice(client.mine)
        result = await client.call("remember", {"content": content, "namespace": client.namespace})
        self._acknowledge(client, result, content)  # a thread message's words sent alone may merge elsewhere

    async def _remember_near(self, client: Client, _label: str) -> None:
        _, content = client.rng.choice(client.mine)
        near = content[0].lower() + content[1:].rstrip(".") + "!"
        result = await client.call("remember", {"content": near, "namespace": client.namespace})
        self._acknowledge(client, result, near)

    async def _thread_append(self, client: Client, _label: str) -> None:
        thread = f"load-thread-{client.index}"
        messages = []
        for _ in range(3):
            client.thread_turn += 1
            messages.append({"content": self.new_content(client.rng), "speaker": "user" if client.thread_turn % 2 else "assistant",
                             "message_id": f"c{client.index}-m{client.thread_turn}"})
        result = await client.call("thread_append", {"thread": thread, "namespace": client.namespace, "messages": messages})
        for message, outcome in zip(messages, result["results"], strict=True):
            self._acknowledge(client, outcome, message["content"])

    async def _search(self, client: Client, label: str) -> None:
        await client.call("search", {"query": client.rng.choice(self.questions), "namespace": client.namespace,
                                     "mode": label.removeprefix("search_"), "limit": 10})

    async def _recall(self, client: Client, _label: str) -> None:
        await client.call("recall", {"query": client.rng.choice(self.questions), "namespace": client.namespace})

    async def _inject(self, client: Client, _label: str) -> None:
        await client.read(f"memory://inject?namespace={client.namespace}")

    async def _tag(self, client: Client, _label: str) -> None:
        memory_id, _ = client.rng.choice(client.mine)
        tag = f"t{client.rng.randrange(5)}"
        await client.call("tag", {"id": memory_id, "add": [tag], "namespace": client.namespace})
        self.ledger.tagged[memory_id].add(tag)

    async def _forget(self, client: Client, _label: str) -> None:
        memory_id, _ = client.mine.pop(client.rng.randrange(len(client.mine)))
        await client.call("forget", {"id": memory_id, "namespace": client.namespace})
        self.ledger.forgotten[memory_id] = client.namespace


# --------------------------------------------------------------------------- server and run


def server_rss(proc: subprocess.Popen[bytes]) -> float:
    """RSS of the process that serves HTTP (the scheduler's processes are its children, not counted)."""
    return rss_mib(proc.pid)


def embedding_ceiling(sentences: list[str], seconds: float) -> dict[str, float]:
    """The model alone, in this process, driven as the server drives it under load: passages/s
    with ``2 × embedding.threads`` callers at once (the model's passage lanes all busy), and
    queries/s from one caller. The process's one embedder, as in the server: a second model
    instance (its own lanes and OpenMP teams) slows the first by a quarter on 2 cores (measured:
    20.8 → 15.2 passages/s)."""
    import threading

    from memories.embeddings import get_embedder

    embedder = get_embedder()
    embedder.embed_query("warm up")
    threads = int(getattr(embedder, "threads", 1) or 1)
    out: dict[str, float] = {"threads": threads, "callers": 2 * threads}
    started = time.perf_counter()
    counts: list[int] = []

    def caller(seed: int) -> None:
        rng, done = random.Random(seed), 0
        while time.perf_counter() - started < seconds / 2:
            embedder.embed_passage(f"{rng.choice(sentences)} {rng.choice(sentences)}")
            done += 1
        counts.append(done)

    callers = [threading.Thread(target=caller, args=(7 + index,)) for index in range(2 * threads)]
    for thread in callers:
        thread.start()
    for thread in callers:
        thread.join()
    out["passages_per_s"] = sum(counts) / (time.perf_counter() - started)
    rng, done, started = random.Random(7), 0, time.perf_counter()
    while time.perf_counter() - started < seconds / 2:
        embedder.embed_query(rng.choice(sentences))
        done += 1
    out["queries_per_s"] = done / (time.perf_counter() - started)
    return out


async def run_load(url: str, args: argparse.Namespace, workload: Workload, namespaces: list[str],
                   proc: subprocess.Popen[bytes]) -> dict[str, Any]:
    mcp_clients = args.clients // 4 if args.mcp_clients is None else args.mcp_clients
    rss: list[float] = [server_rss(proc)]
    async with AsyncExitStack() as stack:
        clients: list[Client] = []
        for index in range(args.clients):
            if index < mcp_clients:
                transport, (call, read) = "mcp", await mcp_transport(stack, url)
            else:
                http = await stack.enter_async_context(httpx.AsyncClient(base_url=url, timeout=120,
                                                                         limits=httpx.Limits(max_connections=1)))
                transport, (call, read) = "http", await http_transport(http)
            clients.append(Client(index, transport, namespaces[index % len(namespaces)],
                                  random.Random(args.seed + index), call, read))
        stop_at = time.monotonic() + args.duration
        workload.ledger.begun = time.perf_counter()

        async def loop(client: Client) -> None:
            while time.monotonic() < stop_at:
                await workload.step(client)

        async def sample_rss() -> None:
            while time.monotonic() < stop_at:
                await asyncio.sleep(min(5.0, max(0.5, args.duration / 12)))
                rss.append(server_rss(proc))

        started = time.perf_counter()
        await asyncio.gather(sample_rss(), *(loop(c) for c in clients))
        elapsed = time.perf_counter() - started
    return {"elapsed_s": elapsed, "rss_mib": rss, "mcp_clients": mcp_clients}


def model_seconds(url: str) -> dict[str, float]:
    """The server's local-model time so far, by kind (bhgbrain_embedding_model_seconds_total), and
    its calls so far as ``<kind>_calls`` (bhgbrain_embedding_wait_seconds_count)."""
    text = httpx.get(url + "/metrics", timeout=30).text
    found = {kind: float(value) for kind, value in
             re.findall(r'^bhgbrain_embedding_model_seconds_total\{kind="(\w+)"\} (\S+)$', text, re.MULTILINE)}
    found.update({f"{kind}_calls": float(value) for kind, value in
                  re.findall(r'^bhgbrain_embedding_wait_seconds_count\{kind="(\w+)"\} (\S+)$', text, re.MULTILINE)})
    return found


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)

    def pct(p: float) -> float:
        return ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))]

    return {"n": len(ordered), "p50": pct(0.5), "p95": pct(0.95), "p99": pct(0.99), "mean": statistics.fmean(ordered)}


# --------------------------------------------------------------------------- audit


def wait_for_vectors(timeout: float = 300) -> int:
    """Live memories still without their vector after waiting for the server's catch-up."""
    from memories.models import Memory

    deadline = time.monotonic() + timeout
    while True:
        pending = Memory.objects.filter(archived=False, vector_synced=False).count()
        if not pending or time.monotonic() > deadline:
            return pending
        time.sleep(1)


def database_audit(ledger: Ledger) -> dict[str, Any]:
    from django.db import connection
    from django.db.models import Count

    from memories.models import Memory

    problems: list[str] = []
    live = dict(Memory.objects.filter(archived=False).values_list("id", "namespace"))
    live = {str(k): v for k, v in live.items()}
    everything = {str(k) for k in Memory.objects.values_list("id", flat=True)}
    for memory_id, namespace in ledger.remembered.items():
        if memory_id in ledger.forgotten:
            continue
        if memory_id not in live:
            problems.append(f"acknowledged write {memory_id} is not live")
        elif live[memory_id] != namespace:
            problems.append(f"acknowledged write {memory_id} is in {live[memory_id]}, not {namespace}")
    for memory_id in ledger.forgotten:
        if memory_id in everything:
            problems.append(f"acknowledged forget {memory_id} is still stored")
    contents = dict(Memory.objects.filter(id__in=list(ledger.added_content)).values_list("id", "content"))
    contents = {str(k): v for k, v in contents.items()}
    for memory_id, sent in ledger.added_content.items():
        if memory_id in ledger.merged_into or memory_id in ledger.forgotten:
            continue
        if memory_id in contents and " ".join(sent.split()) not in contents[memory_id]:
            problems.append(f"{memory_id}: stored content differs from what was acknowledged")
    tags = {str(k): set(v or []) for k, v in Memory.objects.filter(id__in=list(ledger.tagged)).values_list("id", "tags")}
    for memory_id, added in ledger.tagged.items():
        if memory_id in tags and not added <= tags[memory_id]:
            problems.append(f"{memory_id}: acknowledged tags {sorted(added - tags[memory_id])} missing")
    duplicates = (Memory.objects.filter(archived=False, thread__isnull=True).values("namespace", "checksum")
                  .annotate(n=Count("id")).filter(n__gt=1).count())
    if duplicates:
        problems.append(f"{duplicates} (namespace, checksum) pairs are live more than once outside threads")
    table = "memories_fts" if connection.vendor == "sqlite" else "memory_search"
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {table}")  # noqa: S608 - fixed table name
        text_rows = cursor.fetchone()[0]
    if text_rows != len(live):
        problems.append(f"full-text rows {text_rows} != live memories {len(live)}")
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA integrity_check")
            integrity = cursor.fetchone()[0]
        if integrity != "ok":
            problems.append(f"integrity_check: {integrity}")
    unsynced = wait_for_vectors()
    if unsynced:
        problems.append(f"{unsynced} live memories still without a vector after the catch-up wait")
    return {"live": len(live), "acknowledged_writes": len(ledger.remembered), "acknowledged_forgets": len(ledger.forgotten),
            "full_text_rows": text_rows, "problems": problems}


async def _miss_details(url: str, memory_id: str, content: str, namespace: str, mode: str) -> str:
    """Why a search missed: asked again on new connections (another worker may answer), with the
    best hits' ids and scores, so a missing index row is told apart from a ranking miss."""
    seen: list[str] = []
    for _ in range(4):
        async with httpx.AsyncClient(base_url=url, timeout=120) as client:
            body = (await client.post("/tool/search", json={"query": content[:500], "namespace": namespace,
                                                            "mode": mode, "limit": 50})).json()
        results = body.get("results", [])
        ids = [r["id"] for r in results]
        seen.append(f"rank {ids.index(memory_id) + 1}" if memory_id in ids else
                    f"absent, best {[(r['id'][:8], round(r.get('score', 0), 3)) for r in results[:3]]}")
    return "; ".join(seen)


def vector_passages(memory_ids: list[str]) -> dict[str, str]:
    """The text each memory's vector was computed over (memories.conversations.passage): a thread's
    message is embedded after the end of the turn before it, so its words alone may rank it below
    the 50 best of a store made of the same sentences (a miss of the audit, not of the index)."""
    import uuid

    from memories.conversations import passage
    from memories.models import Memory

    rows = Memory.objects.filter(id__in=[uuid.UUID(i) for i in memory_ids])
    return {str(memory.id): passage(memory) for memory in rows}


async def index_audit(url: str, ledger: Ledger, sample: int, seed: int, passages: dict[str, str]) -> list[str]:
    """The server's in-process indexes agree with the database: a sample of acknowledged ADDs is
    found by full-text search (its words) and by semantic search (the text its vector was computed
    over, ``passages``: vector_passages), forgotten memories never come back."""
    rng = random.Random(seed)
    kept = [(i, c) for i, c in ledger.added_content.items() if i not in ledger.forgotten]
    gone = [(i, ledger.added_content[i]) for i in ledger.forgotten if i in ledger.added_content]
    problems: list[str] = []
    sampled = rng.sample(kept, min(sample, len(kept)))
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        for memory_id, content in sampled:
            namespace = ledger.remembered[memory_id]
            for mode in ("fulltext", "semantic"):
                # a query holds at most 500 characters: a passage's end (the message comes last), a text's start
                query = passages.get(memory_id, content)[-500:] if mode == "semantic" else content[:500]
                body = (await client.post("/tool/search", json={"query": query, "namespace": namespace,
                                                                "mode": mode, "limit": 50})).json()
                if memory_id not in {r["id"] for r in body.get("results", [])}:
                    problems.append(f"{mode} search does not find acknowledged memory {memory_id}"
                                    f" ({await _miss_details(url, memory_id, query, namespace, mode)})")
        for memory_id, content in rng.sample(gone, min(sample, len(gone))):
            body = (await client.post("/tool/search", json={"query": content[:500], "namespace": ledger.forgotten[memory_id],
                                                            "mode": "hybrid", "limit": 50})).json()
            if memory_id in {r["id"] for r in body.get("results", [])}:
                problems.append(f"forgotten memory {memory_id} is still found")
    return problems


# --------------------------------------------------------------------------- report


def report(result: dict[str, Any]) -> None:
    ceiling = result["embedding"]
    print(f"\nmachine: {result['machine']}")
    print(f"load average before / after: {result['load_before']} / {result['load_after']}")
    print(f"store: {result['size']} memories preloaded in {result['namespaces']} namespaces ({result['database']}); "
          f"{result['clients']} clients ({result['mcp_clients']} MCP, {result['clients'] - result['mcp_clients']} HTTP) "
          f"for {result['elapsed_s']:.0f} s, {result['mix']} mix; scheduler {'on' if result['scheduler'] else 'off'}; "
          f"{result['workers']} worker(s); embedding.batch_max {result['embedding_batch'] or 'default'}, "
          f"embedding.threads {result.get('embedding_threads') or 'default'}, "
          f"embedding.engine {result.get('embedding_engine') or 'default'}")
    print(f"\nthroughput: {result['ops_per_s']:.1f} operations/s ({result['operations']} in {result['elapsed_s']:.1f} s); "
          f"errors: {sum(result['errors'].values())}")
    print(f"embedding model alone ({ceiling['threads']:.0f} threads, {ceiling['callers']:.0f} callers at once, "
          f"mean of before and after the run): "
          f"{ceiling['passages_per_s']:.1f} passages/s ({ceiling['before']['passages_per_s']:.1f} before, "
          f"{ceiling['after']['passages_per_s']:.1f} after), {ceiling['queries_per_s']:.1f} queries/s; "
          f"server operations/s over model passages/s: {result['ratio']:.2f}")
    busy = result["model_busy_s"]
    slow = ", ".join(f"{read['operation']} {read['transport']} {read['ms']:.0f} ms at {read['at_s']:.1f} s"
                     for read in result["slowest_reads"])
    print(f"slowest reads (started that many seconds into the run): {slow}")
    print(f"the server's model lanes were busy {(busy['passage'] + busy['query']) / result['elapsed_s']:.0%} of the run, summed "
          f"over its lanes (passages {busy['passage']:.1f} s, queries {busy['query']:.1f} s); it embedded "
          f"{busy.get('passage_calls', 0) / result['elapsed_s']:.1f} passages/s and "
          f"{busy.get('query_calls', 0) / result['elapsed_s']:.1f} queries/s")
    print(f"\n  {'operation':<22}{'transport':<10}{'n':>6}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}")
    for row in result["per_operation"]:
        print(f"  {row['operation']:<22}{row['transport']:<10}{row['n']:>6}{row['p50']:>9.1f}{row['p95']:>9.1f}{row['p99']:>9.1f}")
    for label in ("reads", "writes"):
        agg = result[label]
        if agg:
            print(f"  {'all ' + label:<22}{'both':<10}{agg['n']:>6}{agg['p50']:>9.1f}{agg['p95']:>9.1f}{agg['p99']:>9.1f}")
    for error, count in sorted(result["errors"].items()):
        print(f"  error {error}: {count}")
    rss = result["rss_mib"]
    print(f"\nserver RSS (MiB) every sample: {', '.join(f'{v:.0f}' for v in rss)}")
    audit = result["audit"]
    print(f"audit: {audit['live']} live memories, {audit['acknowledged_writes']} acknowledged writes, "
          f"{audit['acknowledged_forgets']} acknowledged forgets, {audit['full_text_rows']} full-text rows; "
          + ("OK" if not audit["problems"] else f"{len(audit['problems'])} PROBLEMS"))
    for problem in audit["problems"][:30]:
        print(f"  - {problem}")


READS = re.compile(r"^(search_|recall|inject)")
SLOWEST_KEPT = 8  # the slowest reads the report lists, with when they started


def summarise(ledger: Ledger) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]]:
    rows = [{"operation": op, "transport": transport, **percentiles(values)}
            for (transport, op), values in sorted(ledger.latencies.items(), key=lambda kv: (kv[0][1], kv[0][0]))]
    reads = [v for (_, op), values in ledger.latencies.items() if READS.match(op) for v in values]
    writes = [v for (_, op), values in ledger.latencies.items() if not READS.match(op) for v in values]
    return rows, percentiles(reads) if reads else {}, percentiles(writes) if writes else {}


def run(args: argparse.Namespace, home: Path, db_url: str | None) -> dict[str, Any]:
    lat.setup_django(home, db_url)
    for name in ("httpx", "httpx2", "mcp"):
        logging.getLogger(name).setLevel(logging.WARNING)  # not a line per request
    rng, sentences, namespaces = preload_store(home, args, metrics=True)  # metrics: the model's busy time
    config = json.loads((home / "config.json").read_text())
    if args.embedding_batch is not None:
        config.setdefault("embedding", {})["batch_max"] = args.embedding_batch
    if args.embedding_threads is not None:
        config.setdefault("embedding", {})["threads"] = args.embedding_threads
    if args.embedding_engine is not None:  # the model alone runs on the same build of the engine
        from bhgbrain_site.core.config import EmbeddingConfig
        from memories.embeddings import build_embedder, set_embedder

        config.setdefault("embedding", {})["engine"] = args.embedding_engine
        set_embedder(build_embedder(EmbeddingConfig(**config["embedding"])))
    (home / "config.json").write_text(json.dumps(config))
    fresh_sentences = lat.make_sentences(1500, random.Random(args.seed + 1), exclude=sentences)
    questions = lat.make_questions(5000, rng)  # mostly distinct: a query cache must not flatter the numbers
    ceiling_before = embedding_ceiling(fresh_sentences, args.embed_seconds)
    from django.db import connections

    connections.close_all()
    env = {k: v for k, v in os.environ.items() if k not in ("BHGBRAIN_WORKERS", "PROMETHEUS_MULTIPROC_DIR")}
    ledger = Ledger()
    workload = Workload(fresh_sentences, questions, ledger, args.seed, MIXES[args.mix])
    load_before = load_average()
    proc, url = start_server(home, args.workers, env, scheduler=not args.no_scheduler)
    try:
        # every worker loads both indexes before the clock starts (one connection reaches one worker)
        asyncio.run(warm_up(url, args.workers, questions, namespaces))
        model_before = model_seconds(url)
        outcome = asyncio.run(run_load(url, args, workload, namespaces, proc))
        model_after = model_seconds(url)
        model_busy = {kind: model_after.get(kind, 0.0) - model_before.get(kind, 0.0)
                      for kind in ("query", "passage", "query_calls", "passage_calls")}
        load_after = load_average()
        audit = database_audit(ledger)
        passages = vector_passages(list(ledger.added_content))
        audit["problems"] += asyncio.run(index_audit(url, ledger, args.audit_sample, args.seed, passages))
    finally:
        stop_server(proc)
    # the model alone again, after the run: the ratio uses the mean of both (a shared VM drifts)
    ceiling_after = embedding_ceiling(fresh_sentences, args.embed_seconds)
    ceiling = {key: (ceiling_before[key] + ceiling_after[key]) / 2 for key in ceiling_before}
    ceiling.update(before=ceiling_before, after=ceiling_after)
    rows, reads, writes = summarise(ledger)
    ops_per_s = ledger.operations / outcome["elapsed_s"]
    return {
        "machine": lat.machine_info(), "revision": lat.product_revision(), "database": lat.database_description(),
        "mix": args.mix, "size": args.size, "namespaces": len(namespaces), "clients": args.clients, "mcp_clients": outcome["mcp_clients"],
        "scheduler": not args.no_scheduler, "workers": args.workers, "embedding_batch": args.embedding_batch,
        "embedding_threads": args.embedding_threads, "embedding_engine": args.embedding_engine,
        "elapsed_s": outcome["elapsed_s"], "operations": ledger.operations,
        "ops_per_s": ops_per_s, "errors": dict(ledger.errors), "embedding": ceiling,
        "ratio": ops_per_s / ceiling["passages_per_s"], "model_busy_s": model_busy,
        "slowest_reads": [{"ms": ms, "at_s": at, "transport": transport, "operation": op, "client": index}
                          for ms, at, transport, op, index in ledger.slowest_reads],
        "per_operation": rows, "reads": reads, "writes": writes,
        "rss_mib": outcome["rss_mib"], "load_before": load_before, "load_after": load_after, "audit": audit,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    home = Path(tempfile.mkdtemp(prefix="bhgbrain-load-"))
    try:
        with lat.database_url(args.database_url) as db_url:
            result = run(args, home, db_url)
        report(result)
        if args.json:
            args.json.write_text(json.dumps(result, indent=2, default=str))
        return 1 if result["audit"]["problems"] or result["errors"] else 0
    finally:
        if args.keep:
            print(f"store kept in {home}")
        else:
            shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
