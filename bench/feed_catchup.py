"""What another process's access flush costs this process's indexes and its next searches.

Every search records the memories it returned; a flush (every 2 s, memories/access.py) writes
their counts and, when a memory's sliding expiry moves by an hour or more, a feed row. Every
process's in-process indexes then catch up before their next search. This measures that on a
store bulk-loaded like bench/search_latency.py (real e5 sentence vectors, ``--namespaces``), in
``--rounds`` rounds of:

1. ``flush``: ``memories_record_access`` for ``--batch`` memories of the namespace, each access an
   hour or more after the last, so every expiry slides (as a busy server's flush writes them);
2. ``vector catch-up``: this process's vector index reads the feed (what the flush's own
   ``sync_indexes`` does; another process does it at its next semantic or hybrid search);
3. ``text catch-up``: the text index reads the feed (every process, at its next full-text or
   hybrid search);
4. a full-text and a semantic search right after, then the same two with nothing new in the feed.

Prints p50/p95 of each step and the searches' cost after a flush over the steady ones.

    .venv/bin/python bench/feed_catchup.py                      # 100k memories, 200 rounds
    .venv/bin/python bench/feed_catchup.py --size 20000 --batch 50
"""
from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO_ROOT), str(REPO_ROOT / "bench")]

import search_latency as lat  # noqa: E402 - the store set-up, loaders and machine facts are shared
from load import percentiles  # noqa: E402
from machine import load_average  # noqa: E402

STEPS = ("flush", "vector catch-up", "text catch-up", "full-text after", "full-text steady",
         "semantic after", "semantic steady")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--size", type=int, default=100_000, help="memories in the store; default 100000")
    parser.add_argument("--namespaces", type=int, default=4, help="namespaces they are spread over; default 4")
    parser.add_argument("--rounds", type=int, default=200, help="flushes timed; default 200")
    parser.add_argument("--batch", type=int, default=10, help="memories a flush writes (a 10-hit search's); default 10")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--sentences", type=int, default=3000)
    return parser.parse_args()


def _caught_up(index: object) -> Callable[[], None]:
    """Bring one in-process index up to the feed, as its next search would first."""
    def catch_up() -> None:
        index.catch_up()  # under the index's lock, as a search
    return catch_up


def run(args: argparse.Namespace, store: lat.BenchStore) -> dict[str, list[float]]:
    from django.conf import settings
    from django.utils import timezone

    from memories import access
    from memories.indexes.embedded import get_vector_index
    from memories.models import Memory
    from search.bm25 import text_index

    settings.BHGBRAIN_ACCESS_FLUSH_THREAD = False  # the searches' own accesses are dropped, not flushed meanwhile
    namespaces = lat.namespaces_for(args.size, args.namespaces)
    seconds = lat.bulk_load(args.size, namespaces, store.sentences, store.vectors, store.embedder, args.seed)
    print(f"loaded {args.size} memories in {seconds:.0f} s")
    namespace = namespaces[0]
    ids = sorted(Memory.objects.filter(namespace=namespace).values_list("id", flat=True))
    question = lat.make_questions(1, random.Random(args.seed))[0]
    for mode in ("fulltext", "semantic", "hybrid"):
        for _ in range(5):
            lat.search_call(question, namespace, mode)
    lat.settle_text_index()
    vectors, text = get_vector_index(), text_index._index  # noqa: SLF001 - this process's text index
    steps: dict[str, Callable[[], object]] = {
        "vector catch-up": _caught_up(vectors), "text catch-up": _caught_up(text),
        "full-text after": lambda: lat.search_call(question, namespace, "fulltext"),
        "semantic after": lambda: lat.search_call(question, namespace, "semantic"),
        "full-text steady": lambda: lat.search_call(question, namespace, "fulltext"),
        "semantic steady": lambda: lat.search_call(question, namespace, "semantic"),
    }
    rng, start = random.Random(args.seed), timezone.now()
    times: dict[str, list[float]] = {step: [] for step in STEPS}
    for round_ in range(args.rounds):
        at = start + timedelta(hours=2 * (round_ + 1))  # past the last slide by more than the step
        chunk = [(memory_id, 1, at) for memory_id in sorted(rng.sample(ids, args.batch))]
        steps["flush"] = lambda chunk=chunk: access.memories_record_access(chunk)
        for step in STEPS:
            started = time.perf_counter_ns()
            steps[step]()
            times[step].append((time.perf_counter_ns() - started) / 1e6)
        access.tracker.discard()
    return times


def main() -> int:
    args = parse_args()
    print(f"load average at start: {load_average()}")
    with lat.bench_store("feed-catchup-", None, args.sentences, args.seed) as store:
        times = run(args, store)
        from memories.models import ChangeFeedEntry

        ops = sorted(set(ChangeFeedEntry.objects.values_list("op", flat=True)))
    print(f"\n{args.rounds} flushes of {args.batch} memories, {args.size} memories in {args.namespaces} namespaces; "
          f"feed rows written: {', '.join(ops)}; load average at end: {load_average()}")
    found = {step: percentiles(values) for step, values in times.items()}
    print(f"{'step':18s} {'p50 ms':>8s} {'p95 ms':>8s}")
    for step in STEPS:
        print(f"{step:18s} {found[step]['p50']:8.3f} {found[step]['p95']:8.3f}")
    for kind in ("full-text", "semantic"):
        extra = found[f"{kind} after"]["p50"] - found[f"{kind} steady"]["p50"]
        print(f"{kind} search right after a flush: {extra:+.3f} ms p50 over a steady one")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
