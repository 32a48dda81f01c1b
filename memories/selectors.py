"""Memory reads and their JSON shapes, and the state of the store's parts (for /health)."""
from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection
from django.db.models import Count, Max, Min, Q
from django.utils import timezone as django_timezone

from bhgbrain_site.core.contracts import TIERS
from bhgbrain_site.core.errors import InvalidInput, NotFound
from memories.conversations import thread_turns
from memories.embeddings import embedder_status
from memories.indexes.embedded import get_vector_index
from memories.models import AuditLog, Collection, Memory


def iso(value: datetime | None) -> str | None:
    """ISO 8601 in UTC with a Z suffix (the seed's timestamp format)."""
    if value is None:
        return None
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def expiring_soon(memory: Memory, now: datetime) -> bool:
    """Whether a memory expires within retention.pre_expiry_warning_days (the seed's
    ``expiring_soon`` flag of recall, search and memory://inject)."""
    warning = timedelta(days=settings.BHGBRAIN.retention.pre_expiry_warning_days)
    return bool(memory.decay_eligible and memory.expires_at and memory.expires_at - now <= warning)


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
        "thread": memory.thread,
        "speaker": memory.speaker,
        "occurred_at": iso(memory.occurred_at),
        "message_id": memory.message_id,
        "event_at": iso(memory.event_at),
        "valid_until": iso(memory.valid_until),
        "status": memory.status,
        **validity_fields(memory),
    }


def validity_fields(memory: Memory) -> dict[str, Any]:
    """A memory's place in time, as every memory shape carries it (get, list, search, recall,
    history): from when it holds (``valid_from``; null in the row reads as its creation), until
    when, what superseded it, its fact ``key``, and whether it is ``current`` (memories/temporal)."""
    return {
        "valid_from": iso(memory.valid_from or memory.created_at),
        "valid_until": iso(memory.valid_until),
        "superseded_by": str(memory.superseded_by) if memory.superseded_by else None,
        "key": memory.fact_key,
        "current": memory.superseded_by is None,
    }


def parse_memory_id(value: str, field: str = "id") -> str:
    """The canonical text of a memory id, or INVALID_INPUT naming the field."""
    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        raise InvalidInput(f"{field}: must be a UUID", field=field) from None


def tier_view(memory: Memory) -> dict[str, Any]:
    """What `bhgbrain tier show` prints: the lifecycle fields of one memory."""
    return {"id": str(memory.id), "namespace": memory.namespace, "summary": memory.summary,
            "retention_tier": memory.retention_tier, "expires_at": iso(memory.expires_at),
            "decay_eligible": memory.decay_eligible, "review_due": iso(memory.review_due),
            "access_count": memory.access_count, "last_accessed": iso(memory.last_accessed)}


def memory_get(*, memory_id: str, namespace: str | None = None) -> Memory | None:
    rows = Memory.objects.filter(pk=memory_id, archived=False)
    if namespace is not None:
        rows = rows.filter(namespace=namespace)
    return rows.first()


def memory_counts_by_tier() -> dict[str, int]:
    """Live memories per tier. Grouped by (namespace, tier) and summed here: that grouping is the
    order of the partial index idx_live_ns_tier, so the count is read from it alone (grouping by
    tier alone, SQLite's planner picked an index that reads every row: 300 ms at 100k)."""
    counts = dict.fromkeys(TIERS, 0)
    rows = Memory.objects.filter(archived=False).values("namespace", "retention_tier").annotate(n=Count("*"))
    for row in rows.order_by():
        counts[row["retention_tier"]] += row["n"]
    return counts


def collections_list(*, namespace: str) -> list[dict[str, Any]]:
    """Every collection of the namespace with its live memory count."""
    counts = {
        row["collection"]: row["n"]
        for row in Memory.objects.filter(namespace=namespace, archived=False).values("collection").annotate(n=Count("id"))
    }
    names = set(counts) | set(Collection.objects.filter(namespace=namespace).values_list("name", flat=True))
    return [{"name": name, "count": counts.get(name, 0)} for name in sorted(names)]


def _parse_cursor(cursor: str | None) -> tuple[datetime, str] | None:
    if not cursor:
        return None
    stamp, sep, memory_id = cursor.partition("|")
    try:
        if not sep:
            raise ValueError
        parsed = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
        return parsed, str(uuid.UUID(memory_id))
    except ValueError:
        raise InvalidInput("cursor: not a cursor returned by a previous page") from None


def memories_page(
    *, namespace: str, limit: int, cursor: str | None, collection: str | None = None,
    memory_type: str | None = None, tier: str | None = None, tag: str | None = None,
    expiring_within: timedelta | None = None,
) -> dict[str, Any]:
    """Newest first, keyset-paginated on (created_at, id): stable under equal timestamps.
    ``expiring_within``: only live memories whose expiry falls within that window from now."""
    rows = Memory.objects.filter(namespace=namespace, archived=False).defer("embedding")
    if expiring_within is not None:
        now = django_timezone.now()
        rows = rows.filter(decay_eligible=True, expires_at__gt=now, expires_at__lte=now + expiring_within)
    if collection is not None:
        rows = rows.filter(collection=collection)
    if memory_type:
        rows = rows.filter(type=memory_type)
    if tier:
        rows = rows.filter(retention_tier=tier)
    if tag:
        # JSON containment is not portable to SQLite: match tags in Python over a bounded scan
        ids = [m.id for m in rows.only("id", "tags").order_by("-created_at", "-id")[:5000] if tag in m.tags]
        rows = rows.filter(id__in=ids)
    total = rows.count()
    position = _parse_cursor(cursor)
    if position is not None:
        stamp, memory_id = position
        rows = rows.filter(Q(created_at__lt=stamp) | Q(created_at=stamp, id__lt=memory_id))
    page = list(rows.order_by("-created_at", "-id")[: limit + 1])
    more = len(page) > limit
    page = page[:limit]
    next_cursor = f"{iso(page[-1].created_at)}|{page[-1].id}" if more and page else None
    return {"items": [memory_to_dict(m) for m in page], "cursor": next_cursor, "total_results": total, "truncated": more}


def audit_entries(*, namespace: str, limit: int, operation: str | None = None, memory_id: str | None = None) -> list[dict[str, Any]]:
    rows = AuditLog.objects.filter(namespace=namespace)
    if operation:
        rows = rows.filter(operation=operation.upper())
    if memory_id:
        rows = rows.filter(memory_id=parse_memory_id(memory_id, "memory_id"))
    return [
        {"id": row.id, "timestamp": iso(row.timestamp), "operation": row.operation, "namespace": row.namespace,
         "memory_id": str(row.memory_id) if row.memory_id else None, "client_id": row.client_id, "details": row.details}
        for row in rows.order_by("-timestamp", "-id")[:limit]
    ]


def memory_count() -> int:
    return Memory.objects.filter(archived=False).count()


def database_status() -> tuple[str, str]:
    """(status, detail) of the relational store: one round trip."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except DatabaseError as exc:
        return "unhealthy", type(exc).__name__
    return "healthy", connection.vendor


def db_size_bytes() -> int:
    if connection.vendor == "sqlite":
        name = Path(str(settings.DATABASES["default"]["NAME"]))
        return sum(p.stat().st_size for p in (name, Path(f"{name}-wal")) if p.exists())
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_database_size(current_database())")
        return int(cursor.fetchone()[0])


def vector_index_status() -> tuple[str, str]:
    index = get_vector_index()
    if index is None:
        return "degraded", "no embedder: vector search unavailable"
    return index.health()


def embedding_status() -> tuple[str, str]:
    return embedder_status()


def event_view(memory: Memory) -> dict[str, Any]:
    return {"id": str(memory.id), "namespace": memory.namespace, "summary": memory.summary, "status": memory.status,
            "event_at": iso(memory.event_at), "valid_until": iso(memory.valid_until),
            "inactive": inactive_reason(memory, django_timezone.now())}


def inactive_reason(memory: Memory, now: datetime) -> str | None:
    """Why an event is no longer current: "cancelled", or "expired" for a plan whose time
    (valid_until, else event_at) has passed; None for anything current (and for non-events)."""
    if memory.status == "cancelled":
        return "cancelled"
    if memory.status == "planned":
        until = memory.valid_until or memory.event_at
        if until is not None and until < now:
            return "expired"
    return None


def turn_to_dict(memory: Memory) -> dict[str, Any]:
    """A message as a transcript shows it."""
    return {"id": str(memory.id), "speaker": memory.speaker, "occurred_at": iso(memory.occurred_at),
            "content": memory.content, "message_id": memory.message_id}


def threads_list(*, namespace: str, limit: int) -> list[dict[str, Any]]:
    """Threads of the namespace, most recently active first."""
    rows = (Memory.objects.filter(namespace=namespace, archived=False, thread__isnull=False).values("thread")
            .annotate(messages=Count("id"), first=Min("occurred_at"), last=Max("occurred_at"))
            .order_by("-last", "thread")[:limit])
    out = []
    for row in rows:
        speakers = (Memory.objects.filter(namespace=namespace, thread=row["thread"], archived=False)
                    .exclude(speaker__isnull=True).values_list("speaker", flat=True).distinct()[:20])
        out.append({"thread": row["thread"], "messages": row["messages"], "first_at": iso(row["first"]),
                    "last_at": iso(row["last"]), "speakers": sorted(speakers)})
    return out


def thread_transcript(*, namespace: str, thread: str, limit: int, cursor: str | None) -> dict[str, Any]:
    """A thread's messages in conversation order; ``cursor`` is the position to continue after."""
    turns = thread_turns(namespace, thread).defer("embedding")
    offset = 0
    if cursor:
        if not cursor.isdigit():
            raise InvalidInput("cursor: not a cursor returned by a previous page", field="cursor")
        offset = int(cursor)
    page = list(turns[offset:offset + limit + 1])
    if not page and offset == 0:
        raise NotFound(f'Thread "{thread}" not found in namespace "{namespace}"')
    more = len(page) > limit
    return {"thread": thread, "namespace": namespace, "messages": [turn_to_dict(t) for t in page[:limit]],
            "cursor": str(offset + limit) if more else None}
