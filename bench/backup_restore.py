"""Time of ``backup create`` and ``backup restore`` on large stores (the whole store, vectors included).

For each store size the store is bulk-loaded like bench/search_latency.py (real e5 sentence
vectors, cached), then ``--runs`` backups are created and restored through the product's
services (``retention.backups.create`` and ``retention.backups.restore``). It prints p50/max seconds, throughput (memories/s), the file
size, and the first search after a restore (the indexes reload from the change feed's reset).

Usage (from the repository root)::

    .venv/bin/python bench/backup_restore.py --sizes 10000,100000
    .venv/bin/python bench/backup_restore.py --database-url postgres://postgres@127.0.0.1:5432/postgres

No assertions about timings.
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO_ROOT), str(REPO_ROOT / "bench")]

import search_latency as lat  # noqa: E402 - bulk loading, Django set-up and machine facts are shared
from machine import load_average, memory_snapshot  # noqa: E402


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=lat._sizes, default=[10000], help="store sizes, e.g. 10000,100000")  # noqa: SLF001
    parser.add_argument("--runs", type=int, default=3, help="backups and restores per size; default 3")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--sentences", type=int, default=3000)
    parser.add_argument("--database-url", default=None, help="postgres://… (default: SQLite in a temp dir)")
    return parser.parse_args()


def _timed(call) -> tuple[float, object]:  # noqa: ANN001
    started = time.perf_counter()
    result = call()
    return time.perf_counter() - started, result


def run_size(size: int, args: argparse.Namespace, sentences: list[str], vectors, embedder) -> None:  # noqa: ANN001
    from retention.backups import create, restore

    lat.bulk_load(size, ["global"], sentences, vectors, embedder, args.seed)
    creates, restores, firsts, sizes = [], [], [], []
    question = lat.make_questions(1, random.Random(args.seed))[0]
    for _ in range(args.runs):
        seconds, info = _timed(lambda: create.backup_create(actor="bench"))
        creates.append(seconds)
        sizes.append(info.size_bytes)
        seconds, _ = _timed(lambda path=info.path: restore.backup_restore(path=path, actor="bench"))
        restores.append(seconds)
        seconds, _ = _timed(lambda: lat.search_call(question, "global", "hybrid"))
        firsts.append(seconds)
    print(f"Store of {size} memories ({lat.database_description()}), {args.runs} runs, load {load_average()}")
    print(f"  {'operation':<34}{'p50 s':>8}{'max s':>8}{'memories/s':>12}")
    # a restore first saves the current store (pre-restore backup): its time includes one create
    for name, values in (("backup create", creates), ("backup restore (incl. pre-restore)", restores),
                         ("first hybrid search after restore", firsts)):
        p50 = statistics.median(values)
        print(f"  {name:<34}{p50:>8.2f}{max(values):>8.2f}{size / p50 if 'search' not in name else 0:>12.0f}")
    print(f"  file size {statistics.median(sizes) / 2**20:.1f} MiB; {memory_snapshot()}")
    print()


def main() -> int:
    args = parse_args()
    with lat.bench_store("bhgbrain-backup-", args.database_url, args.sentences, args.seed) as store:
        for i, size in enumerate(args.sizes):
            if i:
                lat.wipe_store()
            run_size(size, args, store.sentences, store.vectors, store.embedder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
