"""The write funnel: every change to a memory goes through one call here.

A call makes the change (insert, update, delete, the whole store replaced) and, in the same
transaction, writes its audit row, appends the change feed (``ChangeFeedEntry``) and runs every
indexer registered for the transaction; after commit it brings this process's vector index
up to date. If that last step fails the rows are only flagged ``vector_synced = false``:
the feed keeps the change for other processes, Qdrant and the scheduled ``vector_sync``.

- A new write path makes one call: :func:`save_memory`, :func:`update_memories`,
  :func:`delete_memories` or :func:`replace_store`.
- A new index registers once, from its app's ``AppConfig.ready``: :func:`register_indexer`
  (the full-text index does so from ``search/apps.py``).
- Writes that change no memory (categories, tokens, backups) record their audit row with
  :func:`record_audit`.
- A change that replaces a memory's content may keep what it replaced: :func:`save_memory`
  takes a :class:`Revision` (T0 edits, every dedup merge, an undone merge) and writes the
  ``memory_revisions`` row in the same transaction.
- Every insert (:func:`save_memory` with ``insert``, :func:`insert_memories`) first passes its
  namespace's quota (memories/quotas/admission.py: QUOTA_EXCEEDED, or room made by trimming);
  ``quota=False`` only for copies of a store that existed already (repair, ``store migrate``).

How the feed is read and pruned: memories/indexes/feed.py.
"""
from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from django.db import connection, connections, router, transaction
from django.db.models import Max
from django.utils import timezone

from memories import conversations
from memories.indexes import feed_cursor
from memories.indexes.embedded import get_vector_index
from memories.models import AuditLog, ChangeFeedEntry, Memory, MemoryRevision
from memories.quotas import admission

logger = logging.getLogger("bhgbrain.changes")

# Fields some index can see (vector payloads, full-text rows, search filters): a change to any
# of them appends the feed. Access counts, review dates and bookkeeping flags do not.
INDEXED_FIELDS = frozenset({
    "namespace", "collection", "type", "category", "content", "summary", "tags", "source", "importance",
    "retention_tier", "expires_at", "decay_eligible", "archived", "device_id", "embedding", "embedding_model",
    "created_at", "thread", "speaker", "occurred_at", "message_id", "event_at", "valid_until", "status",
    "valid_from", "superseded_by", "fact_key",
})
# Fields that only move when a memory stops being searchable: a change to nothing else indexed
# appends an EXPIRY feed row, which every process applies by reading these two columns (an
# UPSERT makes it read the whole row again, embedding included). Access tracking's sliding
# window is most of the feed on a store in use.
EXPIRY_FIELDS = frozenset({"expires_at", "decay_eligible"})
DIRECT_LIMIT = 20  # after commit, up to this many memories are applied to the index one by one; more: one sync
# A change to any of these moves a threaded message's neighbours' context (memories/conversations.py).
THREAD_FIELDS = frozenset({"content", "thread", "occurred_at", "archived", "namespace"})
CONTEXT_CHANGE = frozenset({"context"})  # what an indexer is told when only a memory's context moved


class Indexer(Protocol):
    """An index kept inside the write's transaction (so it never disagrees with the memories)."""

    def written(self, memories: Sequence[Memory], fields: frozenset[str] | None) -> None:
        """Memories inserted or updated; ``fields`` changed (None: any field may have)."""

    def removed(self, memory_ids: Sequence[uuid.UUID]) -> None: ...

    def cleared(self) -> None:
        """Every memory is gone (a restore replaces the store)."""


_indexers: list[Indexer] = []


def register_indexer(indexer: Indexer) -> None:
    """Run ``indexer`` in every memory write from now on (once per indexer type)."""
    if not any(type(existing) is type(indexer) for existing in _indexers):
        _indexers.append(indexer)


@dataclass(frozen=True)
class Audit:
    """The audit row of a change: which operation, who asked (the client id), what it did."""

    operation: str
    actor: str
    details: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Revision:
    """What a memory said before a change replaced it (a ``memory_revisions`` row): ``operation``
    EDIT (a T0 memory's content edited), MERGE (a dedup merge; ``state`` holds the fields the
    merge changed and ``after_checksum``, so it can be undone) or UNDO_MERGE (the merged text an
    undo put aside)."""

    operation: str
    content: str
    state: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AuditEntry:
    """A complete audit row (as read back from a backup)."""

    timestamp: datetime
    namespace: str
    operation: str
    memory_id: uuid.UUID | None
    client_id: str
    details: dict[str, Any]


def record_audit(*, operation: str, actor: str, namespace: str, memory_id: uuid.UUID | None = None,
                 details: dict[str, Any] | None = None, at: datetime | None = None) -> None:
    """One audit row for a write that changes no memory (categories, tokens, backups, a
    collection); ``namespace`` "*" for the whole store."""
    AuditLog.objects.create(timestamp=at or timezone.now(), namespace=namespace, operation=operation,
                            memory_id=memory_id, client_id=actor, details=details or {})


def _audit_rows(memories: Iterable[Memory], audit_of: Callable[[Memory], Audit | None], at: datetime) -> None:
    rows = []
    for memory in memories:
        entry = audit_of(memory)
        if entry is not None:
            rows.append(AuditLog(timestamp=at, namespace=memory.namespace, operation=entry.operation,
                                 memory_id=memory.id, client_id=entry.actor, details=entry.details))
    AuditLog.objects.bulk_create(rows)


FEED_BATCH = 2000  # feed rows per statement


def _append_feed(memory_ids: list[uuid.UUID], op: str) -> list[int]:
    """The feed rows, their ids in order (SQLite before 3.35 returns none from a bulk insert: one
    row is created alone). On PostgreSQL the transaction takes its id in the same statement,
    before the rows take theirs (feed_cursor.append_statement)."""
    at = timezone.now()
    if not feed_cursor.tracks_transactions():
        if len(memory_ids) == 1:
            return [ChangeFeedEntry.objects.create(memory_id=memory_ids[0], op=op, created_at=at).pk]
        rows = ChangeFeedEntry.objects.bulk_create(
            (ChangeFeedEntry(memory_id=memory_id, op=op, created_at=at) for memory_id in memory_ids), batch_size=FEED_BATCH)
        return [row.pk for row in rows]
    ids: list[int] = []
    with connection.cursor() as cursor:
        for start in range(0, len(memory_ids), FEED_BATCH):
            cursor.execute(feed_cursor.append_statement(),
                           [str(op), at, [str(m) for m in memory_ids[start:start + FEED_BATCH]]])
            ids += [row[0] for row in cursor.fetchall()]
    return ids


def _feed(memory_ids: Iterable[uuid.UUID], op: str) -> None:
    """Append the feed rows (readers track the transaction's id: feed_cursor)."""
    ids = list(memory_ids)
    if ids:
        with transaction.atomic(savepoint=False):
            _append_feed(ids, op)


def _feed_one(memory_id: uuid.UUID, op: str) -> int:
    """One feed row as ``_feed`` appends them; its id."""
    with transaction.atomic(savepoint=False):
        return _append_feed([memory_id], op)[0]


def _feed_op(changed: frozenset[str] | None) -> str | None:
    """The feed row a change of ``changed`` (None: any field) appends; None when no index sees it."""
    if changed is None:
        return ChangeFeedEntry.Op.UPSERT
    indexed = changed & INDEXED_FIELDS
    if not indexed:
        return None
    return ChangeFeedEntry.Op.EXPIRY if indexed <= EXPIRY_FIELDS else ChangeFeedEntry.Op.UPSERT


def _index_written(memories: Sequence[Memory], fields: frozenset[str] | None) -> None:
    for indexer in _indexers:
        indexer.written(memories, fields)


def _index_removed(memory_ids: Sequence[uuid.UUID]) -> None:
    for indexer in _indexers:
        indexer.removed(memory_ids)


# --------------------------------------------------------------------------- after commit


def _apply(written: Sequence[tuple[Memory, int]], removed: Sequence[uuid.UUID]) -> None:
    """This process's vector index learns the change now (the others from the feed)."""
    index = get_vector_index()
    if index is None:
        return
    try:
        if len(written) + len(removed) > DIRECT_LIMIT:
            index.sync()
            return
        for memory, change_id in written:
            index.upsert(memory, change_id=change_id)
        for memory_id in removed:
            index.delete(str(memory_id))
    except Exception:  # noqa: BLE001 - an index failure must only flag rows, never lose a write
        logger.exception("vector index update failed; the change feed keeps it for vector_sync")
        if written:
            Memory.objects.filter(pk__in=[memory.pk for memory, _ in written]).update(vector_synced=False)


def _after_commit(written: Sequence[tuple[Memory, int]] = (), removed: Sequence[uuid.UUID] = ()) -> None:
    transaction.on_commit(lambda: _apply(list(written), list(removed)))


def sync_indexes() -> None:
    """Bring this process's vector index up to the feed now (after writes made with ``sync=False``)."""
    index = get_vector_index()
    if index is None:
        return
    try:
        index.sync()
    except Exception:  # noqa: BLE001 - the feed keeps the change; the scheduled vector_sync retries
        logger.exception("vector index sync failed; retried by the scheduled vector_sync")


# --------------------------------------------------------------------------- memory changes


def _neighbours_changed(neighbours: Sequence[Memory]) -> None:
    """Turns whose context window holds a changed message: their context is indexed again, and
    the feed tells every process's in-process text index to read it."""
    if neighbours:
        _index_written(neighbours, CONTEXT_CHANGE)
        _feed([n.id for n in neighbours], ChangeFeedEntry.Op.UPSERT)


def _revision_row(memory: Memory, revision: Revision, actor: str, at: datetime) -> None:
    """Append the memory's next revision (the caller holds the memory's row lock)."""
    latest = MemoryRevision.objects.filter(memory_id=memory.id).aggregate(m=Max("revision"))["m"] or 0
    MemoryRevision.objects.create(memory_id=memory.id, revision=latest + 1, content=revision.content,
                                  operation=revision.operation, state=revision.state, updated_at=at, updated_by=actor)


def _with_validity(memories: Iterable[Memory]) -> None:
    """Every inserted memory says from when it holds: ``valid_from`` as given, else when it
    happened, else its creation (memories/temporal)."""
    for memory in memories:
        if memory.valid_from is None:
            memory.valid_from = memory.occurred_at or memory.created_at


def _actor(audit: Audit | None) -> str:
    return audit.actor if audit is not None else "system"


def save_memory(memory: Memory, *, audit: Audit | None, at: datetime, insert: bool = False,
                fields: Iterable[str] | None = None, sync: bool = True, revision: Revision | None = None,
                quota: bool = True) -> int | None:
    """Insert (``insert``, after the namespace's quota check unless ``quota`` is False) or update
    one memory (only ``fields`` when given) with every side effect; ``revision``: keep what it
    said before (by the audit's actor). Returns the feed row's id (None when no indexed field changed)."""
    changed = frozenset(fields) if fields is not None else None
    if insert:
        _with_validity([memory])
    if insert and quota:
        admission.admit([memory], actor=_actor(audit), at=at)
    if revision is not None:
        _revision_row(memory, revision, _actor(audit), at)
    if insert:
        memory.save(force_insert=True)
    else:
        memory.save(update_fields=sorted(changed) if changed is not None else None)
    if memory.thread and (changed is None or changed & THREAD_FIELDS):
        with conversations.known_window(memory):  # one read of the turns around it serves every context below
            _index_written([memory], changed)
            _neighbours_changed(conversations.affected_turns(memory))
    else:
        _index_written([memory], changed)
    if audit is not None:
        _audit_rows([memory], lambda _m: audit, at)
    op = _feed_op(changed)
    if op is None:
        return None
    change_id = _feed_one(memory.id, op)
    if sync:
        _after_commit(written=[(memory, change_id)])
    return change_id


def save_memories(memories: Sequence[Memory], fields: Iterable[str], *, audits: Mapping[uuid.UUID, Audit],
                  at: datetime) -> None:
    """Update ``fields`` of many loaded memories at once (one UPDATE per 500), with save_memory's
    side effects: the indexers, an audit row for each memory in ``audits``, a feed row each when
    an indexed field is among ``fields``. Not for fields a thread's neighbours are built from."""
    changed = frozenset(fields)
    if not memories or not changed:
        return
    if changed & THREAD_FIELDS:
        raise ValueError(f"save_memories cannot update {sorted(changed & THREAD_FIELDS)}: use save_memory")
    _update_rows(memories, sorted(changed))
    _index_written(memories, changed)
    _audit_rows([m for m in memories if m.id in audits], lambda m: audits[m.id], at)
    op = _feed_op(changed)
    if op is not None:
        _feed([m.id for m in memories], op)


def _update_rows(memories: Sequence[Memory], fields: Sequence[str]) -> None:
    """``fields`` of each memory written with one parameterised UPDATE, all sent by executemany.
    Django's bulk_update builds a CASE expression per row and field in Python: about 0.7 ms per
    memory, and an access flush of a thousand memories held the GIL from the requests for 0.7 s."""
    connection = connections[router.db_for_write(Memory)]
    meta, quote = Memory._meta, connection.ops.quote_name
    columns = [meta.get_field(name) for name in fields]
    assignments = ", ".join(f"{quote(column.column)} = %s" for column in columns)
    sql = f"UPDATE {quote(meta.db_table)} SET {assignments} WHERE {quote(meta.pk.column)} = %s"  # noqa: S608 - names are the model's
    rows = [[column.get_db_prep_save(getattr(memory, column.attname), connection) for column in columns]
            + [meta.pk.get_db_prep_save(memory.pk, connection)] for memory in memories]
    with connection.cursor() as cursor:
        cursor.executemany(sql, rows)


def update_memories(memory_ids: Sequence[uuid.UUID], values: dict[str, Any], *,
                    audit: Callable[[Memory], Audit | None] | None, at: datetime) -> int:
    """Set ``values`` on many memories at once (one UPDATE); returns how many changed."""
    count = Memory.objects.filter(id__in=memory_ids).update(**values)
    changed = frozenset(values)
    memories = list(Memory.objects.filter(id__in=memory_ids).defer("embedding"))
    _index_written(memories, changed)
    if audit is not None:
        _audit_rows(memories, audit, at)
    op = _feed_op(changed)
    if op is not None:
        _feed([m.id for m in memories], op)
        transaction.on_commit(sync_indexes)
    return count


def insert_memories(memories: Sequence[Memory], *, audit: Callable[[Memory], Audit | None] | None,
                    at: datetime, quota: bool = True) -> None:
    """Insert many memories at once (a batch of messages): the namespaces' quota check (unless
    ``quota`` is False: all or none are admitted), one INSERT, the indexers once for the batch,
    their neighbours' contexts, one audit row and one feed row each."""
    if not memories:
        return
    _with_validity(memories)
    if quota:
        admission.admit(memories, actor=_actor(audit(memories[0]) if audit is not None else None), at=at)
    Memory.objects.bulk_create(memories)
    _index_written(memories, None)
    _neighbours_changed(conversations.affected_by_batch(memories))
    if audit is not None:
        _audit_rows(memories, audit, at)
    _feed([m.id for m in memories], ChangeFeedEntry.Op.UPSERT)
    transaction.on_commit(sync_indexes)


def delete_memories(memories: Sequence[Memory], *, audit: Callable[[Memory], Audit | None] | None,
                    at: datetime) -> None:
    """Delete memories for good (forget, a collection deleted, the cleanup after archiving)."""
    if not memories:
        return
    ids = [memory.id for memory in memories]
    neighbours = conversations.affected_by_batch([m for m in memories if m.thread])
    if audit is not None:
        _audit_rows(memories, audit, at)
    _feed(ids, ChangeFeedEntry.Op.DELETE)
    _index_removed(ids)
    Memory.objects.filter(id__in=ids).delete()
    _neighbours_changed(neighbours)
    _after_commit(removed=ids)


class StoreReplacement:
    """The whole store being replaced inside one transaction (a backup restore)."""

    def __init__(self, actor: str, at: datetime) -> None:
        self.actor, self.at = actor, at
        self.audit: Audit | None = None  # set before the block ends
        self._before: set[uuid.UUID] = set(Memory.objects.values_list("id", flat=True))
        self._loaded: set[uuid.UUID] = set()

    def clear(self) -> None:
        """Every memory and audit row goes; so does every index's copy."""
        Memory.objects.all().delete()
        AuditLog.objects.all().delete()
        for indexer in _indexers:
            indexer.cleared()

    def load(self, memories: Sequence[Memory]) -> None:
        """Insert a batch of memories as they were (no audit row each: the store's row says it);
        the indexers read them when the whole store is in (a message's context spans batches)."""
        _with_validity(memories)  # a store saved before facts had a validity
        Memory.objects.bulk_create(memories)
        self._loaded.update(memory.id for memory in memories)

    def load_audit(self, entries: Iterable[AuditEntry], batch_size: int = 2000) -> None:
        AuditLog.objects.bulk_create(
            (AuditLog(timestamp=e.timestamp, namespace=e.namespace, operation=e.operation, memory_id=e.memory_id,
                      client_id=e.client_id, details=e.details) for e in entries),
            batch_size=batch_size,
        )

    def finish(self) -> None:
        """Index the new store, then DELETE feed rows only for memories this store had and the new
        one lacks (a shared Qdrant keeps other devices' points), then a RESET: every index reloads."""
        loaded = sorted(self._loaded)
        for start in range(0, len(loaded), 2000):
            _index_written(list(Memory.objects.filter(id__in=loaded[start:start + 2000]).defer("embedding")), None)
        _feed(self._before - self._loaded, ChangeFeedEntry.Op.DELETE)
        _feed([uuid.UUID(int=0)], ChangeFeedEntry.Op.RESET)
        if self.audit is not None:
            record_audit(operation=self.audit.operation, actor=self.audit.actor, namespace="*", details=self.audit.details,
                         at=self.at)
        admission.fold_crowded()  # PostgreSQL: the load appended a usage row per memory; each namespace's become one
        transaction.on_commit(sync_indexes)


@contextlib.contextmanager
def replace_store(*, actor: str, at: datetime) -> Iterator[StoreReplacement]:
    """Replace the whole store: ``clear()``, ``load()`` the new memories, set ``audit``; the
    feed, the audit row and the indexes' reload follow when the block ends."""
    with transaction.atomic():
        replacement = StoreReplacement(actor, at)
        yield replacement
        replacement.finish()
