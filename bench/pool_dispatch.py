"""Which thread serves a call: the stdlib pool against the operations' pool (bhgbrain_site/core/pools.py).

A server runs every operation in a pool of 12 threads, each with its own database connection.
Once a burst of concurrent calls has started them all, ``concurrent.futures.ThreadPoolExecutor``
hands one client's calls to every idle thread in turn; ``LifoThreadPool`` hands each to the
thread that finished last. This times the same one-client searches (``registry.call_tool``, as
every transport calls it; the 20 questions repeat, so the query embedding is a cache hit) through
both pools, each started by such a burst, in alternating blocks so a slow patch of the machine
falls on both. Prints p50/p95, the process's CPU per call and how many threads served.

    .venv/bin/python bench/pool_dispatch.py                     # 100k memories, every mode
    .venv/bin/python bench/pool_dispatch.py --size 10000 --blocks 10
"""
from __future__ import annotations

import argparse
import random
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO_ROOT), str(REPO_ROOT / "bench")]

import search_latency as lat  # noqa: E402 - the store set-up, loaders and machine facts are shared
from load import percentiles  # noqa: E402
from machine import load_average  # noqa: E402
from mcp_initialize import write_snapshots  # noqa: E402

THREADS = 12  # the server's read pool


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--size", type=int, default=100_000, help="memories in the store; default 100000")
    parser.add_argument("--modes", default="fulltext,semantic,hybrid")
    parser.add_argument("--blocks", type=int, default=6, help="alternating blocks per pool and mode; default 6")
    parser.add_argument("--calls", type=int, default=200, help="calls per block; default 200")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--sentences", type=int, default=3000)
    return parser.parse_args()


def _pools() -> dict[str, Executor]:
    from bhgbrain_site.core.pools import LifoThreadPool

    return {"ThreadPoolExecutor": ThreadPoolExecutor(THREADS, thread_name_prefix="stdlib"),
            "LifoThreadPool": LifoThreadPool(THREADS, thread_name_prefix="lifo")}


def _searcher(namespace: str, mode: str) -> Callable[[str], str]:
    from bhgbrain_site.core.calls import CallContext
    from bhgbrain_site.registry import call_tool

    context = CallContext(actor="bench")

    def search(question: str) -> str:
        call_tool("search", {"query": question, "namespace": namespace, "mode": mode, "limit": lat.LIMIT}, context)
        return threading.current_thread().name
    return search


def _block(pool: Executor, search: Callable[[str], str], questions: list[str], calls: int,
           into: dict[str, Any]) -> None:
    cpu = time.process_time()
    for i in range(calls):
        started = time.perf_counter()
        into["threads"].add(pool.submit(search, questions[i % len(questions)]).result())
        into["latencies"].append(1e3 * (time.perf_counter() - started))
    into["cpu_ms"] += 1e3 * (time.process_time() - cpu)


def run(args: argparse.Namespace, store: lat.BenchStore) -> None:
    namespace = lat.namespaces_for(args.size, 1)[0]
    seconds = lat.bulk_load(args.size, [namespace], store.sentences, store.vectors, store.embedder, args.seed)
    graphs = write_snapshots(store.home, namespace)  # the vector graphs built first, not during the blocks
    print(f"loaded {args.size} memories in {seconds:.0f} s, graphs and snapshots in {graphs:.0f} s; "
          f"load average {load_average()}")
    questions = lat.make_questions(20, random.Random(args.seed))
    pools = _pools()
    print(f"{'mode':9s} {'pool':19s} {'p50 ms':>7s} {'p95 ms':>7s} {'CPU ms/call':>11s} {'threads':>8s}")
    for mode in args.modes.split(","):
        search = _searcher(namespace, mode)
        for pool in pools.values():
            wait([pool.submit(search, question) for question in questions * 3])  # a burst: every thread started
            for question in questions * 2:
                pool.submit(search, question).result()
        found = {name: {"latencies": [], "threads": set(), "cpu_ms": 0.0} for name in pools}
        for _ in range(args.blocks):
            for name, pool in pools.items():
                _block(pool, search, questions, args.calls, found[name])
        for name, cell in found.items():
            stats = percentiles(cell["latencies"])
            print(f"{mode:9s} {name:19s} {stats['p50']:7.2f} {stats['p95']:7.2f} "
                  f"{cell['cpu_ms'] / len(cell['latencies']):11.2f} {len(cell['threads']):8d}")
    for pool in pools.values():
        pool.shutdown()


def main() -> int:
    args = parse_args()
    print(f"load average at start: {load_average()}")
    with lat.bench_store("pool-dispatch-", None, args.sentences, args.seed) as store:
        run(args, store)
    print(f"load average at end: {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
