"""Memory reads and their JSON shapes."""
from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from memories.models import Memory


def iso(value: datetime | None) -> str | None:
    """ISO 8601 in UTC with a Z suffix (the seed's timestamp format)."""
    if value is None:
        return None
    return value.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def memory_to_dict(memory: Memory) -> dict[str, Any]:
    """The seed's MemoryRecord (without the embedding)."""
    return {
        "id": str(memory.id),
        "namespace": memory.namespace,
        "collection": memory.collection,
        "type": memory.type,
        "category": memory.category,
        "content": memory.content,
        "summary": memory.summary,
        "tags": list(memory.tags),
        "source": memory.source,
        "checksum": memory.checksum,
        "importance": memory.importance,
        "retention_tier": memory.retention_tier,
        "expires_at": iso(memory.expires_at),
        "decay_eligible": memory.decay_eligible,
        "review_due": iso(memory.review_due),
        "access_count": memory.access_count,
        "last_accessed": iso(memory.last_accessed),
        "last_operation": memory.last_operation,
        "merged_from": memory.merged_from,
        "stale": memory.stale,
        "archived": memory.archived,
        "vector_synced": memory.vector_synced,
        "device_id": memory.device_id,
        "created_at": iso(memory.created_at),
        "updated_at": iso(memory.updated_at),
    }


def memory_get(*, memory_id: str, namespace: str | None = None) -> Memory | None:
    rows = Memory.objects.filter(pk=memory_id, archived=False)
    if namespace is not None:
        rows = rows.filter(namespace=namespace)
    return rows.first()


def memory_counts_by_tier() -> dict[str, int]:
    from django.db.models import Count

    counts = {"T0": 0, "T1": 0, "T2": 0, "T3": 0}
    for row in Memory.objects.filter(archived=False).values("retention_tier").annotate(n=Count("id")):
        counts[row["retention_tier"]] = row["n"]
    return counts
