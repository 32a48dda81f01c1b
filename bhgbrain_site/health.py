"""HealthSnapshot: components, counts and the overall status (seed: 健康状态与指标)."""
from __future__ import annotations

import os
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection
from django.utils import timezone

_STARTED = time.monotonic()
_EMBEDDING_TTL = 30.0
_embedding_cache: tuple[float, dict[str, str]] | None = None
_cache_lock = threading.Lock()


def _component(status: str, detail: str = "") -> dict[str, str]:
    return {"status": status, "detail": detail} if detail else {"status": status}


def _database_component() -> dict[str, str]:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except DatabaseError as exc:
        return _component("unhealthy", type(exc).__name__)
    return _component("healthy", connection.vendor)


def _embedding_component() -> dict[str, str]:
    """Cached for 30 s; never calls a remote API."""
    global _embedding_cache
    from memories.embeddings import get_embedder

    with _cache_lock:
        if _embedding_cache and time.monotonic() - _embedding_cache[0] < _EMBEDDING_TTL:
            return _embedding_cache[1]
        embedder = get_embedder()
        if embedder is None:
            value = _component("degraded", "no embedding provider (degraded mode: checksum-only dedup)")
        else:
            status, detail = embedder.health()
            value = _component(status, f"{embedder.model_id}: {detail}")
        _embedding_cache = (time.monotonic(), value)
        return value


def reset_embedding_cache() -> None:
    global _embedding_cache
    with _cache_lock:
        _embedding_cache = None


def _vector_component() -> dict[str, str]:
    from memories.vector_index import get_vector_index

    index = get_vector_index()
    if index is None:
        return _component("degraded", "no embedder: vector search unavailable")
    status, detail = index.health()
    return _component(status, detail)


def _db_size_bytes() -> int:
    if connection.vendor == "sqlite":
        name = Path(str(settings.DATABASES["default"]["NAME"]))
        return sum(p.stat().st_size for p in (name, Path(f"{name}-wal")) if p.exists())
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_database_size(current_database())")
        return int(cursor.fetchone()[0])


def _retention_stats() -> dict[str, Any]:
    from memories.models import Memory
    from retention.models import ArchivedMemory
    from memories.selectors import memory_counts_by_tier

    retention = settings.BHGBRAIN.retention
    now = timezone.now()
    counts = memory_counts_by_tier()
    live = Memory.objects.filter(archived=False)
    budgets = retention.tier_budgets
    over_capacity = any(
        getattr(budgets, tier) is not None and counts[tier] > getattr(budgets, tier) for tier in counts
    )
    return {
        "counts_by_tier": counts,
        "expiring_soon": live.filter(
            decay_eligible=True, expires_at__gt=now,
            expires_at__lte=now + timedelta(days=retention.pre_expiry_warning_days),
        ).count(),
        # soft-archived rows plus memories the cleanup moved to the archive (not restored since)
        "archived_count": Memory.objects.filter(archived=True).count()
        + ArchivedMemory.objects.filter(restored_at__isnull=True).count(),
        "unsynced_vectors": live.filter(vector_synced=False).count(),
        "over_capacity": over_capacity,
    }


def _retention_component(stats: dict[str, Any], memory_count: int, db_size: int) -> dict[str, str]:
    retention = settings.BHGBRAIN.retention
    problems = []
    if stats["over_capacity"]:
        problems.append("a tier budget is exceeded")
    if stats["unsynced_vectors"]:
        problems.append(f"{stats['unsynced_vectors']} memories not in the vector index")
    if memory_count > retention.max_memories * retention.warn_at_percent / 100:
        problems.append(f"memory count above {retention.warn_at_percent}% of max_memories")
    if db_size > retention.max_db_size_gb * 1024**3:
        problems.append("database larger than max_db_size_gb")
    return _component("degraded", "; ".join(problems)) if problems else _component("healthy")


def health_snapshot() -> dict[str, Any]:
    """The seed's HealthSnapshot; ``status`` is unhealthy/degraded/healthy."""
    database = _database_component()
    components: dict[str, Any] = {"sqlite": database}
    body: dict[str, Any] = {"status": "unhealthy", "components": components}
    if database["status"] != "healthy":
        return body
    stats = _retention_stats()
    memory_count = sum(stats["counts_by_tier"].values())
    db_size = _db_size_bytes()
    components["vector_index"] = _vector_component()
    components["embedding"] = _embedding_component()
    components["retention"] = _retention_component(stats, memory_count, db_size)
    if components["vector_index"]["status"] == "unhealthy":
        status = "unhealthy"
    elif any(c["status"] != "healthy" for c in components.values()):
        status = "degraded"
    else:
        status = "healthy"
    body.update(
        status=status,
        memory_count=memory_count,
        db_size_bytes=db_size,
        uptime_seconds=int(time.monotonic() - _STARTED),
        device_id=settings.BHGBRAIN_DEVICE_ID,
        retention=stats,
        pid=os.getpid(),
    )
    return body
