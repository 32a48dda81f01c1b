"""A fact's history as the interfaces show it (``memory://{id}/history``, GET
/api/memories/{id}/history/, ``bhgbrain history ID``): every version, oldest first, with its
validity interval and who superseded it and why (read from the audit log)."""
from __future__ import annotations

import uuid
from typing import Any

from bhgbrain_site.core.errors import NotFound
from memories.models import AuditLog, Memory
from memories.selectors import iso, parse_memory_id, validity_fields
from memories.temporal.chains import fact_chain
from memories.temporal.keys import normalise_key


def _supersessions(ids: list[uuid.UUID]) -> dict[uuid.UUID, dict[str, Any]]:
    """The latest SUPERSEDE audit row of each memory: who closed it, why, when."""
    found: dict[uuid.UUID, dict[str, Any]] = {}
    rows = AuditLog.objects.filter(memory_id__in=ids, operation="SUPERSEDE").order_by("timestamp", "id")
    for row in rows:
        details = row.details or {}
        found[row.memory_id] = {"by": row.client_id, "reason": details.get("reason"), "at": iso(row.timestamp),
                                "late": bool(details.get("late", False))}
    return found


def _version(memory: Memory, supersession: dict[str, Any] | None) -> dict[str, Any]:
    return {
        "id": str(memory.id), "collection": memory.collection, "summary": memory.summary, "content": memory.content,
        "tags": list(memory.tags), "retention_tier": memory.retention_tier, "created_at": iso(memory.created_at),
        **validity_fields(memory),
        "superseded": supersession if memory.superseded_by else None,
    }


def memory_history(*, memory_id: str, namespace: str) -> dict[str, Any]:
    """The chain ``memory_id`` belongs to, in ``namespace`` only (another namespace's memory is
    NOT_FOUND, as everywhere a token is scoped)."""
    chain = fact_chain(uuid.UUID(parse_memory_id(memory_id)), namespaces=[namespace])
    audits = _supersessions([m.id for m in chain])
    current = [m for m in chain if m.superseded_by is None]
    keys = [m.fact_key for m in chain if m.fact_key]
    return {
        "id": str(uuid.UUID(memory_id)),
        "namespace": namespace,
        "key": keys[-1] if keys else None,
        "current_id": str(current[-1].id) if current else None,
        "versions": [_version(m, audits.get(m.id)) for m in chain],
    }


def key_history(*, key: str, namespace: str) -> dict[str, Any]:
    """The history of the fact ``key`` names in ``namespace`` (NOT_FOUND when no memory has it)."""
    normalised = normalise_key(key)
    versions = Memory.objects.filter(namespace=namespace, fact_key=normalised, archived=False)
    current = versions.filter(superseded_by__isnull=True).values_list("id", flat=True).first()
    latest = current or versions.order_by("-valid_from", "-created_at").values_list("id", flat=True).first()
    if latest is None:
        raise NotFound(f'No memory has key "{normalised}" in namespace {namespace!r}', field="key")
    return memory_history(memory_id=str(latest), namespace=namespace)
