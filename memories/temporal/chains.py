"""Chains of versions: a fact superseded by a newer one keeps its row, its validity ends where
its successor's begins (``valid_until``) and it points at that successor (``superseded_by``).

Locks: a writer that may change a chain takes its namespace's lock (memories.quotas.admission:
an advisory lock on PostgreSQL; SQLite serialises writers) before it locks any memory row, so two
chain writers never wait on each other crosswise.

Three ways lead here, all through the write funnel (a feed row for the indexes, an audit row
SUPERSEDE with ``{"successor", "reason"}``): an explicit :func:`supersede` (reason "explicit"),
a fact key shared by the versions (reason "key": :func:`place_by_key`), and a dedup update that
keeps the old text (reason "dedup", memories/remember.py). Superseding never crosses namespaces.
"""
from __future__ import annotations

import uuid
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from bhgbrain_site.core.errors import Conflict, InvalidInput, NotFound
from memories import funnel
from memories.models import Memory
from memories.quotas.admission import lock_namespace
from memories.selectors import iso

REASONS = ("explicit", "key", "dedup")
CHAIN_MAX = 1000  # versions one chain read returns at most (a guard against a runaway walk)
CLOSED_FIELDS = ("superseded_by", "valid_until")


def valid_start(memory: Memory) -> datetime:
    """When a memory's fact starts to hold: ``valid_from``, else (rows never written with it) its creation."""
    return memory.valid_from or memory.created_at


def _order(memory: Memory) -> tuple[datetime, datetime, str]:
    return valid_start(memory), memory.created_at, str(memory.id)


def close(older: Memory, newer: Memory, *, actor: str, reason: str, at: datetime, **details: Any) -> None:
    """Make ``newer`` the successor of the loaded (locked) ``older``: its validity ends where the
    newer one's starts (never before its own start, and an earlier end it already had stays)."""
    end = max(valid_start(newer), valid_start(older))
    older.superseded_by = newer.id
    if older.valid_until is None or older.valid_until > end:
        older.valid_until = end
    audit = funnel.Audit("SUPERSEDE", actor, {"successor": str(newer.id), "reason": reason,
                                              "valid_until": iso(older.valid_until), **details})
    funnel.save_memory(older, audit=audit, at=at, fields=CLOSED_FIELDS)


def _parse_ids(ids: Iterable[uuid.UUID | str]) -> list[uuid.UUID]:
    parsed = []
    for value in ids:
        try:
            parsed.append(value if isinstance(value, uuid.UUID) else uuid.UUID(str(value)))
        except ValueError:
            raise InvalidInput("supersedes: each id must be a UUID", field="supersedes") from None
    return list(dict.fromkeys(parsed))


def _successors(start: Memory) -> set[uuid.UUID]:
    """Every memory ``start`` leads to by ``superseded_by`` (itself included)."""
    seen, current = {start.id}, start.superseded_by
    while current is not None and current not in seen and len(seen) < CHAIN_MAX:
        seen.add(current)
        current = Memory.objects.filter(pk=current).values_list("superseded_by", flat=True).first()
    return seen


def _locked(ids: Sequence[uuid.UUID], namespace: str) -> list[Memory]:
    """The live memories of ``namespace`` with these ids, locked; NOT_FOUND for any other id (an
    id of another namespace is not found, as everywhere a token is scoped)."""
    rows = {m.id: m for m in Memory.objects.select_for_update().defer("embedding").order_by("pk")
            .filter(pk__in=ids, namespace=namespace, archived=False)}
    missing = [str(i) for i in ids if i not in rows]
    if missing:
        raise NotFound(f"supersedes: memory {missing[0]} not found in namespace {namespace!r}", field="supersedes")
    return [rows[i] for i in ids]


def supersede_loaded(older_ids: Sequence[uuid.UUID | str], newer: Memory, *, actor: str, reason: str,
                     at: datetime) -> list[uuid.UUID]:
    """:func:`supersede` inside a transaction that holds ``newer`` (saved); takes its
    namespace's lock. Returns the ids this call closed (one already superseded by ``newer`` is
    left as it is; one superseded by another memory is a CONFLICT: supersede its current version)."""
    ids = _parse_ids(older_ids)
    lock_namespace(newer.namespace)  # held already by a keyed write; the same lock again is free
    if newer.id in ids:
        raise InvalidInput(f"supersedes: memory {newer.id} cannot supersede itself", field="supersedes")
    rows = _locked(ids, newer.namespace)
    ahead = _successors(newer)
    closed = []
    for row in rows:
        if row.superseded_by == newer.id:
            continue
        if row.superseded_by is not None:
            raise Conflict(f"supersedes: memory {row.id} is already superseded by {row.superseded_by}; "
                           "supersede the current version instead", field="supersedes")
        if row.id in ahead:
            raise InvalidInput(f"supersedes: memory {row.id} comes after {newer.id} in its chain", field="supersedes")
        close(row, newer, actor=actor, reason=reason, at=at)
        closed.append(row.id)
    _inherit_key(newer, rows, actor=actor, at=at)
    return closed


def _inherit_key(newer: Memory, older: Sequence[Memory], *, actor: str, at: datetime) -> None:
    """A current memory without a key that supersedes the current version of one key fills its slot."""
    keys = {row.fact_key for row in older if row.fact_key}
    if newer.fact_key or newer.superseded_by is not None or len(keys) != 1:
        return
    key = keys.pop()
    if Memory.objects.filter(namespace=newer.namespace, fact_key=key, archived=False, superseded_by__isnull=True).exists():
        return
    newer.fact_key, newer.vector_synced = key, False  # its vector is computed with its key: vector_sync re-embeds it
    funnel.save_memory(newer, audit=funnel.Audit("KEY", actor, {"key": key}), at=at, fields=("fact_key", "vector_synced"))


def supersede(*, older: Sequence[uuid.UUID], newer: uuid.UUID, actor: str, reason: str = "explicit") -> list[uuid.UUID]:
    """Mark each of ``older`` superseded by ``newer`` (all of one namespace): its ``valid_until``
    becomes the newer one's ``valid_from``, its ``superseded_by`` the newer id, an audit row
    SUPERSEDE each. Unknown ids or ids of another namespace: NOT_FOUND; ``newer`` among ``older``
    or a cycle: INVALID_INPUT; an old one already superseded by another: CONFLICT. Returns the ids
    closed by this call (a repeated call closes nothing)."""
    if reason not in REASONS:
        raise InvalidInput(f"reason: one of {', '.join(REASONS)}", field="reason")
    with transaction.atomic():
        namespace = Memory.objects.filter(pk=newer, archived=False).values_list("namespace", flat=True).first()
        if namespace is None:
            raise NotFound(f"Memory {newer} not found")
        lock_namespace(namespace)  # before any row lock: the order every chain writer keeps (no deadlock)
        successor = Memory.objects.select_for_update().defer("embedding").filter(pk=newer, archived=False).first()
        if successor is None:
            raise NotFound(f"Memory {newer} not found")
        return supersede_loaded(older, successor, actor=actor, reason=reason, at=timezone.now())


def unlink(memory: Memory, *, actor: str, at: datetime) -> list[uuid.UUID]:
    """Close the gap ``memory`` (just deleted, in this transaction) leaves in its chain: the versions it superseded
    now lead to its successor, and their validity runs to the successor's start; when it was
    current, the latest of them is current again (one per key: an earlier one of the same key
    leads to it). Returns the ids changed."""
    predecessors = sorted(Memory.objects.select_for_update().defer("embedding").order_by("pk")
                          .filter(superseded_by=memory.id, namespace=memory.namespace, archived=False), key=_order)
    successor = (Memory.objects.defer("embedding").filter(pk=memory.superseded_by).first()
                 if memory.superseded_by else None)
    reopened: dict[str | None, Memory] = {}
    for row in reversed(predecessors):
        leader = successor if successor is not None else reopened.get(row.fact_key) if row.fact_key else None
        closed_by_it = row.valid_until == max(valid_start(memory), valid_start(row))
        if leader is None:
            row.superseded_by, row.valid_until = None, None if closed_by_it else row.valid_until
            if row.fact_key:
                reopened[row.fact_key] = row
        else:
            row.superseded_by = leader.id
            if closed_by_it:
                row.valid_until = max(valid_start(leader), valid_start(row))
        audit = funnel.Audit("RELINK", actor, {"removed": str(memory.id), "successor": str(row.superseded_by)
                                               if row.superseded_by else None})
        funnel.save_memory(row, audit=audit, at=at, fields=CLOSED_FIELDS)
    return [row.id for row in predecessors]


# --------------------------------------------------------------------------- fact keys


@dataclass(frozen=True)
class Placement:
    """Where a new version of a key goes: after ``predecessor`` and before ``successor`` (None: it
    is the current version)."""

    predecessor: Memory | None
    successor: Memory | None


def key_placement(memory: Memory) -> Placement:
    """The neighbours of ``memory`` (unsaved or saved, with ``fact_key``) among the versions of its
    key, by validity start; on a tie the later arrival comes after. Takes the namespace's lock
    (held to the commit), so two writers of one key are placed one after the other."""
    lock_namespace(memory.namespace)
    versions = [v for v in Memory.objects.select_for_update().defer("embedding").order_by("pk")  # id order, as access tracking locks
                .filter(namespace=memory.namespace, fact_key=memory.fact_key, archived=False) if v.id != memory.id]
    start = valid_start(memory)
    earlier = [v for v in versions if valid_start(v) <= start]
    later = [v for v in versions if valid_start(v) > start]
    return Placement(max(earlier, key=_order, default=None), min(later, key=_order, default=None))


def place_by_key(memory: Memory, write: Callable[[], None], *, actor: str, at: datetime,
                 reason: str = "key") -> list[uuid.UUID]:
    """Put ``memory`` into its key's history and write it (``write()``: the insert, or the save of
    a memory taking a key). A newer start than every version: it is current and the previous
    current one is closed at its start. An older one (a late arrival): it is superseded at once by
    the next newer version, and the version before it now leads to it. Never two current versions:
    the previous one is closed before the write (constraint uniq_current_fact_key). Returns the
    id of the version it closed, if any."""
    placement = key_placement(memory)
    before, after = placement.predecessor, placement.successor
    if after is not None:
        memory.superseded_by = after.id
        end = valid_start(after)
        if memory.valid_until is None or memory.valid_until > end:
            memory.valid_until = end
    closed = []
    if before is not None and before.superseded_by == (after.id if after is not None else None):
        close(before, memory, actor=actor, reason=reason, at=at, key=memory.fact_key)
        closed.append(before.id)
    write()
    if after is not None:
        funnel.record_audit(operation="SUPERSEDE", actor=actor, namespace=memory.namespace, memory_id=memory.id,
                            details={"successor": str(after.id), "reason": "key", "late": True,
                                     "valid_until": iso(memory.valid_until), "key": memory.fact_key}, at=at)
    return closed


# --------------------------------------------------------------------------- reads


def fact_chain(memory_id: uuid.UUID, *, namespaces: Collection[str] | None) -> list[Memory]:
    """Every version of the fact ``memory_id`` belongs to (predecessors, successors, and the other
    versions of its key), oldest first by validity start. NOT_FOUND for an unknown memory or one
    outside ``namespaces`` (None: every namespace); the chain never leaves the memory's namespace."""
    start = Memory.objects.defer("embedding").filter(pk=memory_id, archived=False).first()
    if start is None or (namespaces is not None and start.namespace not in namespaces):
        raise NotFound(f"Memory {memory_id} not found")
    found = {start.id: start}
    frontier = [start]
    if start.fact_key:
        frontier += [m for m in _in_namespace(start.namespace, Q(fact_key=start.fact_key)) if m.id not in found]
        found.update((m.id, m) for m in frontier)
    while frontier and len(found) < CHAIN_MAX:
        ahead = {m.superseded_by for m in frontier if m.superseded_by and m.superseded_by not in found}
        near = _in_namespace(start.namespace, Q(pk__in=ahead) | Q(superseded_by__in=[m.id for m in frontier]))
        frontier = [m for m in near if m.id not in found]
        found.update((m.id, m) for m in frontier)
    return sorted(found.values(), key=_order)


def _in_namespace(namespace: str, condition: Q) -> list[Memory]:
    return list(Memory.objects.defer("embedding").filter(condition, namespace=namespace, archived=False)[:CHAIN_MAX])
