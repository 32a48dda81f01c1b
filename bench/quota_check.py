"""What the namespace quota check adds to a write, and what the counting triggers cost.

For namespaces holding 1k, 10k and 100k live memories (bulk-inserted, counted by the triggers, the
counts then folded as the nightly cleanup leaves them), in a warm process, each figure the median (and p95) of ``--rounds`` rounds:

* ``check, no limit``: ``admission.admit`` for a namespace without a quota (one read of
  ``namespace_quotas``, then nothing), on top of an empty write transaction;
* ``check, limited``: the same for a namespace with a quota it fits (the read, the lock, the count);
* ``COUNT instead``: what counting the namespace's live memories per tier with the partial index
  would cost (the design the counters replace);
* ``insert, triggers``: one memory row inserted with the counting triggers, minus the same without.

Usage (from the repository root)::

    .venv/bin/python bench/quota_check.py
    .venv/bin/python bench/quota_check.py --database-url postgres://postgres@127.0.0.1:5432/postgres --json out.json

The store goes in a new temporary directory (or a ``bhgbrain_bench_<pid>`` database, dropped at the
end); nothing is asserted.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from machine import cpu_model, load_average, python_speed_ms  # noqa: E402
from remember_latency import database_description, database_url, product_revision, setup_django  # noqa: E402

SIZES = (1_000, 10_000, 100_000)
BATCH = 5_000


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="The cost of the namespace quota check (see bench/README.md).")
    parser.add_argument("--rounds", type=int, default=400, help="timed rounds per figure; default 400")
    parser.add_argument("--database-url", default=None, metavar="URL",
                        help="PostgreSQL: a bhgbrain_bench_<pid> database is created on that server and dropped")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH")
    return parser.parse_args()


def _memory(namespace: str, tier: str, n: int) -> Any:
    from django.utils import timezone

    from memories.models import Memory

    now = timezone.now()
    return Memory(id=uuid.uuid4(), namespace=namespace, content=f"bench memory {n}", summary=f"bench memory {n}",
                  checksum=uuid.uuid4().hex * 2, retention_tier=tier, created_at=now, updated_at=now)


def _fill(namespace: str, upto: int) -> None:
    """Bulk-insert memories up to ``upto``, then leave the counts as the nightly cleanup does (on
    PostgreSQL each insert appended a usage row: folded, and the dead rows vacuumed)."""
    from django.db import connection

    from memories.models import Memory
    from memories.quotas import usage

    have = Memory.objects.filter(namespace=namespace).count()
    tiers = ("T1", "T2", "T2", "T3")
    while have < upto:
        count = min(BATCH, upto - have)
        Memory.objects.bulk_create([_memory(namespace, tiers[(have + i) % 4], have + i) for i in range(count)])
        have += count
    usage.fold(namespace)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE namespace_usage")


def _timed(work: Callable[[], None], rounds: int) -> list[float]:
    for _ in range(20):
        work()
    samples = []
    for _ in range(rounds):
        started = time.perf_counter()
        work()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def _summary(samples: list[float], baseline: list[float] | None = None) -> dict[str, float]:
    base = statistics.median(baseline) if baseline else 0.0
    ordered = sorted(samples)
    return {"median_ms": round(statistics.median(samples) - base, 4),
            "p95_ms": round(ordered[int(len(ordered) * 0.95)] - base, 4)}


def _in_transaction(work: Callable[[], None]) -> Callable[[], None]:
    from django.db import transaction

    def run() -> None:
        with transaction.atomic():
            work()
    return run


def _count_instead(namespace: str) -> Callable[[], None]:
    from django.db.models import Count

    from memories.models import Memory

    return lambda: list(Memory.objects.filter(namespace=namespace, archived=False)
                        .values("retention_tier").annotate(n=Count("*")).order_by())


def _insert_once(namespace: str) -> Callable[[], None]:
    def run() -> None:
        _memory(namespace, "T2", 0).save(force_insert=True)
    return _in_transaction(run)


def _trigger_cost(rounds: int, blocks: int = 8) -> dict[str, float]:
    """With and without the triggers, in alternating blocks (a shared host's speed drifts)."""
    from memories.quotas import usage

    with_triggers: list[float] = []
    without: list[float] = []
    for _ in range(blocks):
        with_triggers += _timed(_insert_once("inserts"), rounds // blocks)
        usage.remove_triggers()
        without += _timed(_insert_once("inserts"), rounds // blocks)
        usage.install_triggers()
    return _summary(with_triggers, without)


def measure(size: int, rounds: int) -> dict[str, Any]:
    from memories.models import NamespaceQuota
    from memories.quotas import admission

    _fill("free", size)
    _fill("limited", size)
    NamespaceQuota.objects.update_or_create(namespace="limited", defaults={
        "max_memories": 10 * size, "t2_budget": 10 * size, "updated_by": "bench", "updated_at": _now()})
    empty = _timed(_in_transaction(lambda: None), rounds)
    free = _timed(_in_transaction(lambda: admission.admit([_memory("free", "T2", 0)], actor="bench", at=_now())), rounds)
    limited = _timed(_in_transaction(
        lambda: admission.admit([_memory("limited", "T2", 0)], actor="bench", at=_now())), rounds)
    return {"size": size, "check_no_limit": _summary(free, empty), "check_limited": _summary(limited, empty),
            "count_instead": _summary(_timed(_count_instead("limited"), rounds))}


def _now() -> Any:
    from django.utils import timezone

    return timezone.now()


def main() -> None:
    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="bhgbrain-quota-bench-") as home, database_url(args.database_url) as url:
        setup_django(Path(home), url)
        rows = [measure(size, args.rounds) for size in SIZES]
        result = {"commit": product_revision(), "database": database_description(), "cpu": cpu_model(),
                  "python_loop_3m_ms": python_speed_ms(), "load_average": load_average(), "sizes": rows,
                  "insert_with_triggers": _trigger_cost(args.rounds)}
        from django.db import connections

        connections.close_all()
    print(f"{result['database']} | {result['cpu']} | python_loop_3m_ms {result['python_loop_3m_ms']} | "
          f"load {result['load_average']} | {result['commit']}")
    print(f"{'memories in the namespace':>26} {'check, no limit':>16} {'check, limited':>16} {'COUNT instead':>16}")
    for row in rows:
        cells = [f"{row[k]['median_ms']:.3f} ({row[k]['p95_ms']:.3f})" for k in ("check_no_limit", "check_limited",
                                                                              "count_instead")]
        print(f"{row['size']:>26,} " + " ".join(f"{cell:>16}" for cell in cells))
    trig = result["insert_with_triggers"]
    print(f"insert of one memory, the triggers' part: {trig['median_ms']:.3f} ms (p95 {trig['p95_ms']:.3f}); "
          "ms, median (p95)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
