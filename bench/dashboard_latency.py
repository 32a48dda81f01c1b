"""Server time of the governance console's dashboard (``GET /admin/``) on large stores.

For each store size the store is bulk-loaded like bench/search_latency.py (real e5 sentence
vectors, cached) over ``--namespaces`` namespaces, then shaped like a store in use: creation
times spread over 60 days, tiers mixed (T0 2 %, T1 15 %, T2 60 %, T3 23 %), some T1 memories
due for review, some expiring within 7 days, some stale, some not in the vector index, one
audit row a memory, archived memories, and 30 days of accesses. Then ``GET /admin/`` is timed
through Django's test client (the whole request: middleware, the dashboard's queries, the
template) for a superuser and for a curator limited to two namespaces.

Usage (from the repository root)::

    .venv/bin/python bench/dashboard_latency.py --sizes 10000,100000
    .venv/bin/python bench/dashboard_latency.py --database-url postgres://postgres@127.0.0.1:5432/postgres

No assertions about timings.
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO_ROOT), str(REPO_ROOT / "bench")]

import search_latency as lat  # noqa: E402 - bulk loading, Django set-up and machine facts are shared
from machine import load_average  # noqa: E402

TIER_SHARES = (("T0", 2), ("T1", 15), ("T2", 60), ("T3", 23))
CHUNK = 5000


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=lat._sizes, default=[10000], help="store sizes, e.g. 10000,100000")  # noqa: SLF001
    parser.add_argument("--namespaces", type=int, default=20, help="namespaces the store is spread over; default 20")
    parser.add_argument("--requests", type=int, default=30, help="timed requests per user; default 30")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--sentences", type=int, default=3000)
    parser.add_argument("--database-url", default=None, help="postgres://… (default: SQLite in a temp dir)")
    parser.add_argument("--profile", action="store_true", help="also print the SQL of one request, slowest first")
    return parser.parse_args()


def _shape_memory(memory, rng: random.Random, now) -> None:  # noqa: ANN001
    from django.conf import settings

    from memories.pipeline.tiers import tier_metadata

    memory.created_at = memory.updated_at = now - timedelta(days=rng.random() * 60)
    tier = rng.choices([t for t, _ in TIER_SHARES], [w for _, w in TIER_SHARES])[0]
    meta = tier_metadata(tier, anchor=memory.created_at, ttl=settings.BHGBRAIN.retention.tier_ttl)
    memory.retention_tier, memory.expires_at = tier, meta.expires_at
    memory.decay_eligible, memory.review_due = meta.decay_eligible, meta.review_due
    if tier == "T1" and rng.random() < 0.2:
        memory.review_due = now - timedelta(days=rng.random() * 10)
    if meta.expires_at is not None and rng.random() < 0.05:
        memory.expires_at = now + timedelta(days=rng.random() * 7)
    memory.stale = rng.random() < 0.03
    memory.vector_synced = rng.random() > 0.01
    memory.access_count = rng.randint(0, 20)


def shape_store(seed: int) -> None:
    """Spread times, tiers and queues over the bulk-loaded memories; add audit rows, archived
    memories and daily accesses."""
    from django.db import transaction
    from django.utils import timezone

    from memories.models import AccessDay, AuditLog, Memory
    from retention.models import ArchivedMemory

    rng, now = random.Random(seed), timezone.now()
    fields = ["created_at", "updated_at", "retention_tier", "expires_at", "decay_eligible", "review_due", "stale",
              "vector_synced", "access_count"]
    ids = list(Memory.objects.values_list("id", flat=True))
    for start in range(0, len(ids), CHUNK):
        rows = list(Memory.objects.filter(id__in=ids[start:start + CHUNK]).defer("embedding"))
        for memory in rows:
            _shape_memory(memory, rng, now)
        with transaction.atomic():
            Memory.objects.bulk_update(rows, fields, batch_size=250)  # CASE WHEN per row: quadratic in the batch on PostgreSQL
            AuditLog.objects.bulk_create([
                AuditLog(timestamp=m.created_at, namespace=m.namespace, operation="ADD", memory_id=m.id,
                         client_id="bench") for m in rows])
            ArchivedMemory.objects.bulk_create([
                ArchivedMemory(memory_id=m.id, namespace=m.namespace, collection=m.collection, type=m.type,
                               content=m.content, summary=m.summary, source=m.source, checksum=m.checksum, tier="T3",
                               created_at=m.created_at, expired_at=m.created_at + timedelta(days=rng.random() * 30))
                for m in rows[:len(rows) // 20]])
    namespaces = sorted(set(Memory.objects.values_list("namespace", flat=True)))
    AccessDay.objects.bulk_create([
        AccessDay(day=(now - timedelta(days=d)).date(), namespace=ns, accesses=rng.randint(0, 500))
        for d in range(30) for ns in namespaces])


def settle_statistics() -> None:
    """PostgreSQL: VACUUM ANALYZE after the bulk load, as autovacuum does on a store in use
    (without it the planner works from an empty table's estimates, and index-only scans read the
    heap because the visibility map is empty). SQLite: the upkeep thread's sampled ANALYZE has
    run, as it does in the server."""
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE")


def _curator(namespaces: list[str]):  # noqa: ANN202
    from django.contrib.auth.models import Permission, User

    from memories.models import CuratorScope

    user = User.objects.create_user("bench-curator", password="x", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label__in=["memories", "retention"]))
    CuratorScope.objects.create(user=user, namespaces=namespaces)
    return user


def time_requests(user, count: int) -> list[float]:  # noqa: ANN001
    from django.test import Client

    client = Client()
    client.force_login(user)
    for _ in range(3):  # warm-up: templates compiled, connections open
        assert client.get("/admin/").status_code == 200
    timings = []
    for _ in range(count):
        started = time.perf_counter()
        response = client.get("/admin/")
        timings.append((time.perf_counter() - started) * 1e3)
        assert response.status_code == 200 and b"bhg-dashboard" in response.content
    return timings


def profile_request(user) -> None:  # noqa: ANN001
    """One request's SQL statements with their times, slowest first (where the time goes)."""
    from django.db import connection
    from django.test import Client

    client = Client()
    client.force_login(user)
    statements: list[tuple[float, str, Any]] = []

    def timed(execute, sql, params, many, context):  # noqa: ANN001, ANN202
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            statements.append(((time.perf_counter() - started) * 1e3, sql, params))

    started = time.perf_counter()
    with connection.execute_wrapper(timed):
        client.get("/admin/")
    total = (time.perf_counter() - started) * 1e3
    sql_ms = sum(ms for ms, _, _ in statements)
    print(f"  one request: {total:.1f} ms, of which SQL {sql_ms:.1f} ms in {len(statements)} statements; slowest:")
    ranked = sorted(statements, key=lambda s: s[0], reverse=True)
    for ms, sql, _ in ranked[:8]:
        print(f"    {ms:7.1f} ms  {' '.join(sql.split())[:160]}")
    _, sql, params = ranked[0]
    explain = "EXPLAIN QUERY PLAN " if connection.vendor == "sqlite" else "EXPLAIN "
    with connection.cursor() as cursor:
        cursor.execute(explain + sql, params)
        print("  its plan:", *(" ".join(str(c) for c in row) for row in cursor.fetchall()), sep="\n    ")


def _report(label: str, timings: list[float]) -> None:
    ordered = sorted(timings)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    print(f"  {label:<34}{statistics.median(ordered):>9.1f}{p95:>9.1f}{max(ordered):>9.1f}{len(ordered):>7}")


def run_size(size: int, args: argparse.Namespace, sentences: list[str], vectors, embedder) -> None:  # noqa: ANN001
    from django.contrib.auth.models import User

    namespaces = lat.namespaces_for(size, args.namespaces)
    lat.bulk_load(size, namespaces, sentences, vectors, embedder, args.seed)
    started = time.perf_counter()
    shape_store(args.seed)
    shaped = time.perf_counter() - started
    settle_statistics()
    admin = User.objects.create_superuser(f"bench-admin-{size}", "bench@example.com", "x")
    curator = _curator(namespaces[:2])
    load_start = load_average()
    superuser_ms = time_requests(admin, args.requests)
    curator_ms = time_requests(curator, args.requests)
    print(f"Store of {size} memories in {len(namespaces)} namespaces ({lat.database_description()}); "
          f"shaped in {shaped:.0f} s; load {load_start} at start, {load_average()} at end")
    print(f"  {'GET /admin/ (server time, ms)':<34}{'p50':>9}{'p95':>9}{'max':>9}{'calls':>7}")
    _report("superuser (every namespace)", superuser_ms)
    _report("curator of 2 namespaces", curator_ms)
    if args.profile:
        profile_request(admin)
    print()
    User.objects.filter(pk__in=[admin.pk, curator.pk]).delete()


def main() -> int:
    args = parse_args()
    with lat.bench_store("bhgbrain-dashboard-", args.database_url, args.sentences, args.seed) as store:
        for i, size in enumerate(args.sizes):
            if i:
                lat.wipe_store()
            run_size(size, args, store.sentences, store.vectors, store.embedder)
    return 0


if __name__ == "__main__":
    sys.exit(main())
