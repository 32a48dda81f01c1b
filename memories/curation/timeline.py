"""A fact's timeline for the console (issue 42): its versions oldest first, each with its validity,
its successor, and who superseded it, when and why (the SUPERSEDE audit rows); the versions in
the archive (retention lends them: memories.curation.console) are shown in their place, marked.

Read-only; the chain comes from memories.temporal.fact_chain and never leaves the memory's
namespace. ``FACT_FILTERS`` is the memory list's "current / superseded" filter.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Q

from memories.curation.console import console
from memories.models import AuditLog, Memory
from memories.temporal import fact_chain

FACT_FILTERS: dict[str, tuple[str, Q]] = {
    "current": ("current", Q(superseded_by__isnull=True)),
    "superseded": ("superseded (history)", Q(superseded_by__isnull=False)),
}


@dataclass(frozen=True)
class Version:
    """One version of a fact as the timeline shows it."""

    id: str
    summary: str
    valid_from: datetime | None
    valid_until: datetime | None
    superseded_by: str | None
    key: str | None
    archived: bool = False  # in the archive (retention), not live
    superseded_at: datetime | None = None  # from its SUPERSEDE audit row
    superseded_actor: str | None = None
    reason: str | None = None

    @property
    def current(self) -> bool:
        return self.superseded_by is None and not self.archived


def _supersede_rows(ids: list[uuid.UUID]) -> dict[uuid.UUID, AuditLog]:
    """The latest SUPERSEDE audit row of each memory (the one that set its present successor)."""
    latest: dict[uuid.UUID, AuditLog] = {}
    for row in AuditLog.objects.filter(operation="SUPERSEDE", memory_id__in=ids).order_by("timestamp", "id"):
        if row.memory_id is not None:
            latest[row.memory_id] = row
    return latest


def _version(row: Any, audit: AuditLog | None, *, archived: bool) -> Version:
    memory_id = row.id if isinstance(row, Memory) else row.memory_id
    return Version(
        id=str(memory_id), summary=row.summary, valid_from=row.valid_from or row.occurred_at or row.created_at,
        valid_until=row.valid_until, superseded_by=str(row.superseded_by) if row.superseded_by else None,
        key=row.fact_key, archived=archived, superseded_at=audit.timestamp if audit else None,
        superseded_actor=audit.client_id if audit else None,
        reason=str(audit.details.get("reason", "")) or None if audit else None,
    )


def fact_timeline(memory: Memory) -> list[Version]:
    """Every version of ``memory``'s fact, live and archived, oldest first by validity start."""
    live = fact_chain(memory.id, namespaces=[memory.namespace])
    live_ids = [m.id for m in live]
    keys = sorted({m.fact_key for m in live if m.fact_key})
    archived = console.archived_versions(namespace=memory.namespace, successors=live_ids, keys=keys) \
        if console.archived_versions is not None else []
    audits = _supersede_rows(live_ids + [a.memory_id for a in archived])
    versions = [_version(m, audits.get(m.id), archived=False) for m in live]
    versions += [_version(a, audits.get(a.memory_id), archived=True) for a in archived]
    return sorted(versions, key=lambda v: (v.valid_from is None, v.valid_from, v.id))
