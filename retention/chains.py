"""Fact chains in the retention lifecycle (issue 42): what goes to the archive with a memory, and
where an archived version goes when it is restored.

A chain is the versions of one fact linked by ``superseded_by`` (each version names its direct
successor; memories/temporal keeps them). The rules kept here:

- **A version in a chain is archived, never deleted**: whatever ``archive_before_delete``
  says, a memory that was superseded, or that superseded another, is copied whole into the
  archive before it leaves the live store (expiry, budget and quota trims, "archive now").
- **The older versions never outlive their successor**: superseded facts age by their own
  tier's rules and may go first; when a version leaves the live store, the live versions it
  superseded (directly or further back) go with it, archived in the same transaction and
  audited ``FORGET`` with reason ``successor_archived``. So the live part of a chain is always
  its newest part, its older part is in the archive, and no live memory is superseded by a
  memory that is gone. The ``superseded_by`` pointers are copied into the archive as they are.
- **A restored version goes back to its place** (:func:`restore_place`): without a key it keeps
  its validity and its successor pointer (a restore never makes a superseded fact current
  again); with a key it goes among the key's live versions by ``valid_from``, and one that was
  current when archived becomes current again unless a live current fact now holds its key.
"""
from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from memories.models import Memory
from memories.quotas.admission import lock_namespace
from retention.models import ArchivedMemory

CASCADE_REASON = "successor_archived"
CHAIN_MAX = 1000  # archived versions one timeline reads at most


def predecessors(memories: Sequence[Memory]) -> list[Memory]:
    """The live memories that ``memories`` superseded, directly or further back, not among them;
    locked for update (call inside the transaction that removes them, holding their namespace's
    lock: a chain never leaves its namespace), oldest first."""
    seen = {m.id for m in memories}
    frontier, found = set(seen), []
    while frontier:
        rows = list(Memory.objects.select_for_update().filter(superseded_by__in=frontier).exclude(id__in=seen)
                    .order_by("pk"))  # id order, as the chain writers lock versions
        found.extend(rows)
        frontier = {m.id for m in rows}
        seen |= frontier
    return sorted(found, key=lambda m: (m.valid_from or m.created_at, str(m.id)))


def chained(memories: Sequence[Memory]) -> set[uuid.UUID]:
    """The ids among ``memories`` that belong to a chain: superseded, or the successor of another
    of ``memories`` or of any live memory."""
    ids = {m.id for m in memories}
    successors = {m.superseded_by for m in memories if m.superseded_by is not None}
    successors |= set(Memory.objects.filter(superseded_by__in=ids).values_list("superseded_by", flat=True))
    return {m.id for m in memories if m.superseded_by is not None or m.id in successors}


@dataclass(frozen=True)
class Place:
    """Where a restored version goes: its successor (None: current) and the end of its validity;
    ``previous``: the live version before it, to be re-pointed to it (None: none)."""

    superseded_by: uuid.UUID | None
    valid_until: datetime | None
    previous: Memory | None = None


def archived_versions(*, namespace: str, successors: Sequence[uuid.UUID], keys: Sequence[str]) -> list[ArchivedMemory]:
    """The archive's unrestored versions of a fact (the console's timeline): the entries of
    ``namespace`` that lead to one of ``successors`` by ``superseded_by``, directly or through
    other archived versions, and those holding one of ``keys``. Oldest first."""
    rows = ArchivedMemory.objects.filter(namespace=namespace, restored_at__isnull=True).defer("embedding")
    found = {a.memory_id: a for a in rows.filter(fact_key__in=keys)} if keys else {}
    frontier = set(successors) | set(found)
    while frontier and len(found) < CHAIN_MAX:
        step = [a for a in rows.filter(superseded_by__in=frontier) if a.memory_id not in found]
        found.update((a.memory_id, a) for a in step)
        frontier = {a.memory_id for a in step}
    return sorted(found.values(), key=lambda a: (_start(a), str(a.memory_id)))


def _start(row: Memory | ArchivedMemory) -> datetime:
    return row.valid_from or row.created_at


def restore_place(item: ArchivedMemory) -> Place:
    """Where the archived version ``item`` goes back to (call inside the restore's transaction).

    Without a key it keeps its successor and validity, whether the successor is live or archived
    (a restore never makes a replaced fact current again). With a key it is put among the key's
    live versions by ``valid_from``: before the first one that starts after it (its validity then
    ends there at the latest), the live version before that place now leading to it. When none
    starts after it, it keeps its successor, or comes back current when it was current and no
    live current fact holds the key (``uniq_current_fact_key``); one that was current and starts
    after the key's current fact goes into history just before it, with an empty interval: the
    live current fact stays the answer."""
    if not item.fact_key:
        return Place(item.superseded_by, item.valid_until)
    lock_namespace(item.namespace)  # the lock a key's writers take (memories/temporal): placed one after the other
    versions = list(Memory.objects.select_for_update().filter(namespace=item.namespace, fact_key=item.fact_key,
                                                               archived=False))
    start = _start(item)
    later = sorted((v for v in versions if _start(v) > start), key=lambda v: (_start(v), str(v.id)))
    if later:
        following = later[0]
        until = _start(following) if item.valid_until is None else min(item.valid_until, _start(following))
        previous = next((v for v in versions if v.superseded_by == following.id and _start(v) < start), None)
        return Place(following.id, until, previous)
    current = next((v for v in versions if v.superseded_by is None), None)
    if item.superseded_by is not None or current is None:
        return Place(item.superseded_by, item.valid_until)
    return Place(current.id, start)  # newer than the current fact: history, with an empty interval
