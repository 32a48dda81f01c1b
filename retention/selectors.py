"""Store-wide reads: the HealthSnapshot (seed: 健康状态与指标) and ``bhgbrain stats``.

They live in the top domain app because they count both the live memories and the archive.
"""
from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from memories import selectors as memory_selectors
from memories.indexes import rebuilds
from memories.models import Memory
from memories.quotas.selectors import quota_uses, quotas_summary
from memories.selectors import iso, memory_counts_by_tier
from retention import budgets, compaction
from retention.models import ArchivedMemory

_STARTED = time.monotonic()
EXPIRING_LISTED = 100  # memories `stats --expiring` lists at most


def _component(status: str, detail: str = "") -> dict[str, str]:
    return {"status": status, "detail": detail} if detail else {"status": status}


def retention_stats() -> dict[str, Any]:
    """Counts by tier, expiring soon, archived, unsynced vectors, whether a budget is exceeded
    (``over_capacity``: a tier budget or ``max_memories``), the use of every budget
    (``budgets``: used / budget / over per tier and ``total``) and the compaction state."""
    retention = settings.BHGBRAIN.retention
    now = timezone.now()
    counts = memory_counts_by_tier()
    live = Memory.objects.filter(archived=False)
    use = budgets.budget_use(counts)
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
        "over_capacity": any(entry["over"] for entry in use.values()),
        "budgets": use,
        "compaction": compaction.compaction_status(),
    }


def _retention_component(stats: dict[str, Any], memory_count: int, db_size: int, quotas: dict[str, Any]) -> dict[str, str]:
    retention = settings.BHGBRAIN.retention
    problems = []
    if quotas["over"]:  # how many, never which: this detail is public
        problems.append(f"{quotas['over']} namespace(s) over their quota")
    over = [name for name, entry in stats["budgets"].items() if entry["over"]]
    if over:
        problems.append("over budget: " + ", ".join("max_memories" if name == "total" else name for name in over))
    if stats["unsynced_vectors"]:
        problems.append(f"{stats['unsynced_vectors']} memories not in the vector index")
    if memory_count > retention.max_memories * retention.warn_at_percent / 100:
        problems.append(f"memory count above {retention.warn_at_percent}% of max_memories")
    if db_size > retention.max_db_size_gb * 1024**3:
        problems.append("database larger than max_db_size_gb")
    return _component("degraded", "; ".join(problems)) if problems else _component("healthy")


def _overall(components: dict[str, dict[str, str]]) -> str:
    if components["vector_index"]["status"] == "unhealthy":
        return "unhealthy"
    return "degraded" if any(c["status"] != "healthy" for c in components.values()) else "healthy"


def store_health() -> dict[str, Any]:
    """The seed's HealthSnapshot; ``status`` is unhealthy/degraded/healthy. The embedder's
    status is cached 30 s and never calls a remote API. ``quotas``: the namespaces with a quota,
    each one's use (memories.quotas.selectors.visible_quotas trims it for the caller).
    ``index_rebuilds``: this process's index rebuilds from the database, under way or last done."""
    database = _component(*memory_selectors.database_status())
    components: dict[str, Any] = {"sqlite": database}
    body: dict[str, Any] = {"status": "unhealthy", "components": components}
    if database["status"] != "healthy":
        return body
    stats = retention_stats()
    memory_count = sum(stats["counts_by_tier"].values())
    db_size = memory_selectors.db_size_bytes()
    quotas = quotas_summary(quota_uses(limited_only=True))
    components["vector_index"] = _component(*memory_selectors.vector_index_status())
    components["embedding"] = _component(*memory_selectors.embedding_status())
    components["retention"] = _retention_component(stats, memory_count, db_size, quotas)
    body.update(
        status=_overall(components), memory_count=memory_count, db_size_bytes=db_size,
        uptime_seconds=int(time.monotonic() - _STARTED), device_id=settings.BHGBRAIN_DEVICE_ID,
        retention=stats, quotas=quotas, pid=os.getpid(),
    )
    if rebuilding := rebuilds.progress():  # this process's index rebuilds from the database (no snapshot)
        body["index_rebuilds"] = rebuilding
    return body


def _expiring() -> list[dict[str, Any]]:
    now = timezone.now()
    horizon = now + timedelta(days=settings.BHGBRAIN.retention.pre_expiry_warning_days)
    soon = (Memory.objects.filter(archived=False, decay_eligible=True, expires_at__gt=now, expires_at__lte=horizon)
            .order_by("expires_at").defer("embedding")[:EXPIRING_LISTED])
    return [{"id": str(m.id), "namespace": m.namespace, "summary": m.summary,
             "retention_tier": m.retention_tier, "expires_at": iso(m.expires_at)} for m in soon]


def store_stats(*, by_tier: bool = False, expiring: bool = False) -> dict[str, Any]:
    """``bhgbrain stats``: sizes, collections per namespace, optionally tier counts and what expires soon."""
    stats = retention_stats()
    namespaces = sorted(set(Memory.objects.filter(archived=False).values_list("namespace", flat=True)))
    out: dict[str, Any] = {
        "memory_count": sum(stats["counts_by_tier"].values()), "db_size_bytes": memory_selectors.db_size_bytes(),
        "namespaces": {ns: memory_selectors.collections_list(namespace=ns) for ns in namespaces},
        "archived_count": stats["archived_count"], "unsynced_vectors": stats["unsynced_vectors"],
    }
    if by_tier:
        out["counts_by_tier"] = stats["counts_by_tier"]
    if expiring:
        out["expiring"] = _expiring()
    return out
