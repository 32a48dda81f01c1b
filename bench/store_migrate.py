"""Time of ``bhgbrain store migrate``: an embedded store (SQLite) moved into a fresh PostgreSQL database.

For each size the SQLite store is bulk-loaded like bench/search_latency.py (real e5 sentence
vectors, cached; a tenth of the memories are messages of threads, over two namespaces), then
migrated through the product's own entry point (``bhgbrain_site.cli.store_migrate.store_migrate``:
the child process, the copy through the write funnel, the verification and the search sample)
into a new PostgreSQL database; with ``--qdrant`` a second run goes to PostgreSQL + Qdrant's
local mode. It prints the seconds, memories/s, whether the verification passed and the load average.

Usage (from the repository root)::

    .venv/bin/python bench/store_migrate.py --sizes 10000 [--qdrant]

No assertions about timings.
"""
from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO_ROOT), str(REPO_ROOT / "bench")]

import search_latency as lat  # noqa: E402 - bulk loading, Django set-up and machine facts are shared
from machine import load_average  # noqa: E402

SERVER = "postgresql://postgres@127.0.0.1:5432"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=lat._sizes, default=[10000], help="store sizes, e.g. 10000,100000")  # noqa: SLF001
    parser.add_argument("--qdrant", action="store_true", help="also migrate to PostgreSQL + Qdrant (local mode)")
    parser.add_argument("--batch-size", type=int, default=500)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--sentences", type=int, default=3000)
    return parser.parse_args()


def _database(action: str, name: str) -> None:
    import psycopg

    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as admin:
        admin.execute("SET statement_timeout = '60s'")  # a DROP waits for every backend (a stuck one: forever)
        try:
            admin.execute(f'{action} DATABASE "{name}"')
        except psycopg.errors.QueryCanceled:
            print(f"  ({action} DATABASE {name} timed out: left behind)", file=sys.stderr)


def migrate_once(size: int, args: argparse.Namespace, home: Path, qdrant: bool) -> None:
    from bhgbrain_site.cli.store_migrate import store_migrate

    name = f"bench_migrate_{uuid.uuid4().hex[:10]}"
    _database("CREATE", name)
    try:
        started = time.perf_counter()
        report = store_migrate(target_url=f"{SERVER}/{name}", batch_size=args.batch_size,
                               vector_index="qdrant" if qdrant else None,
                               qdrant_path=str(home / f"qdrant-{name}") if qdrant else None)
        seconds = time.perf_counter() - started
        target = "PostgreSQL + Qdrant local mode" if qdrant else "PostgreSQL, embedded index"
        searches = report.get("searches", {})
        print(f"  -> {target:<32} {seconds:>7.1f} s {size / seconds:>7.0f} memories/s  ok={report.get('ok')} "
              f"verified={report.get('verification', {}).get('ok')} phases={report.get('seconds')} searches={searches.get('modes')} "
              f"load {load_average()}", flush=True)
    finally:
        _database("DROP", name)


def main() -> int:
    args = parse_args()
    with lat.bench_store("bhgbrain-migrate-", None, args.sentences, args.seed) as store:
        for i, size in enumerate(args.sizes):
            if i:
                lat.wipe_store()
            lat.bulk_load(size, ["global", "team"], store.sentences, store.vectors, store.embedder, args.seed,
                          threaded_share=0.1)
            print(f"Store of {size} memories ({lat.database_description()}), batches of {args.batch_size}")
            migrate_once(size, args, store.home, qdrant=False)
            if args.qdrant:
                migrate_once(size, args, store.home, qdrant=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
