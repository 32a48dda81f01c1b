"""Time of the MCP completion reads (memories/completions.py, categories' names) on a large store.

The store is bulk-loaded with ``--size`` memories (no vectors: completion never reads them) over
``--namespaces`` namespaces, each memory with 1-3 tags from a vocabulary of ``--tags``, one of
10 collections, and every fifth one a message of a thread; the tag index is filled by the
product's own indexer. Then each kind is completed ``--repeat`` times for an empty prefix, one
character and three characters, as the registry calls it (100 values at most, and the total).

Usage (from the repository root)::

    .venv/bin/python bench/completion_latency.py --size 100000
    .venv/bin/python bench/completion_latency.py --database-url postgres://postgres@127.0.0.1:5432/postgres

No assertions about timings.
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO_ROOT), str(REPO_ROOT / "bench")]

import search_latency as lat  # noqa: E402 - Django set-up and the database choice are shared
from machine import load_average  # noqa: E402

CHUNK = 5000
WORDS = ("alpha", "build", "cloud", "deploy", "edge", "infra", "network", "release", "staging", "vpn")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--namespaces", type=int, default=20)
    parser.add_argument("--tags", type=int, default=500, help="distinct tags; default 500")
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--database-url", default=None, help="postgres://… (default: SQLite in a temp dir)")
    return parser.parse_args()


def _load(size: int, namespaces: list[str], tags: list[str], rng: random.Random) -> None:
    from django.db import transaction
    from django.utils import timezone

    from memories.indexes.tag_index import TagIndexer
    from memories.models import Collection, Memory

    now = timezone.now()
    Collection.objects.bulk_create([Collection(namespace=ns, name=f"{WORDS[i]}-notes", embedding_model="none",
                                               embedding_dimensions=0) for ns in namespaces for i in range(10)])
    for start in range(0, size, CHUNK):
        rows = []
        for i in range(start, min(size, start + CHUNK)):
            content = f"memory {i}"
            rows.append(Memory(
                id=uuid.UUID(int=rng.getrandbits(128)), namespace=namespaces[i % len(namespaces)],
                collection=f"{WORDS[i % 10]}-notes", content=content, summary=content, checksum=uuid.uuid4().hex,
                tags=rng.sample(tags, rng.randint(1, 3)), access_count=rng.randint(0, 20), created_at=now,
                updated_at=now, thread=f"{WORDS[i % 7]}-thread-{i % 50}" if i % 5 == 0 else None,
            ))
        with transaction.atomic():
            Memory.objects.bulk_create(rows)
            TagIndexer().written(rows, None)


def _time(work: Any, repeat: int) -> dict[str, float]:
    spent = []
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        spent.append((time.perf_counter() - started) * 1000)
    spent.sort()
    return {"p50_ms": round(statistics.median(spent), 2), "p95_ms": round(spent[int(len(spent) * 0.95) - 1], 2)}


def main() -> None:
    args = parse_args()
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory(prefix="bhgbrain-complete-") as home, lat.database_url(args.database_url) as url:
        lat.setup_django(Path(home), url)
        from categories.selectors import category_names_complete
        from memories import completions

        namespaces = [f"team-{n:02d}" for n in range(args.namespaces)]
        tags = [f"{rng.choice(WORDS)}-{n}" for n in range(args.tags)]
        started = time.perf_counter()
        _load(args.size, namespaces, tags, rng)
        print(f"loaded {args.size} memories in {time.perf_counter() - started:.1f} s; load {load_average()}")
        some_id = str(completions.memory_ids_complete(prefix="", namespace=namespaces[0], limit=1)[0][0])
        kinds = {
            "namespace": lambda p: completions.namespaces_complete(prefix=p, namespaces=None, limit=100),
            "namespace (scoped)": lambda p: completions.namespaces_complete(prefix=p, namespaces=frozenset(namespaces[:2]),
                                                                            limit=100),
            "collection": lambda p: completions.collections_complete(prefix=p, namespace=namespaces[0], limit=100),
            "tag": lambda p: completions.tags_complete(prefix=p, namespace=namespaces[0], limit=100),
            "thread": lambda p: completions.threads_complete(prefix=p, namespace=namespaces[0], limit=100),
            "category": lambda p: category_names_complete(prefix=p, namespace=namespaces[0], limit=100),
        }
        for kind, answer in kinds.items():
            for prefix in ("", "t" if kind.startswith("namespace") else "a", "tea" if kind.startswith("namespace") else "alp"):
                print(f"{kind:20} prefix {prefix!r:6} {_time(lambda: answer(prefix), args.repeat)}")  # noqa: B023
        for prefix in ("", some_id[:1], some_id[:3], some_id[:8]):
            timing = _time(lambda: completions.memory_ids_complete(prefix=prefix, namespace=namespaces[0], limit=100),  # noqa: B023
                           args.repeat)
            print(f"{'memory id':20} prefix {prefix!r:10} {timing}")


if __name__ == "__main__":
    main()
