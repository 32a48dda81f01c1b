"""The change feed (``ChangeFeedEntry``): how in-process indexes follow it, how watchers (MCP
resource subscriptions) read it, and how it is pruned.

Every write appends it in its own transaction (memories/funnel.py), so a change reaches
every process's index, and Qdrant, even when the writer died right after its commit.
"""
from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Collection, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import DatabaseError, connection
from django.db.models import Max
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from memories.indexes.feed_cursor import NO_PENDING, read_after, start_position
from memories.indexes.rebuilds import Rebuilding
from memories.indexes.vectors import until_of
from memories.models import AuditLog, ChangeFeedEntry, Memory, VectorIndexCursor

logger = logging.getLogger("bhgbrain.search")

RELOAD_AFTER_CHANGES = 5_000  # a bigger burst is cheaper to reload than to fetch id by id
FEED_KEEP_DAYS = 7  # feed_prune drops older rows
RELOAD_AFTER_IDLE = (FEED_KEEP_DAYS - 1) * 86_400.0  # seconds without catching up: rows may be gone


def needs_reload(changes: list[tuple[int, uuid.UUID, str]], caught_up_at: float) -> bool:
    """A store-wide reset in the feed, too many changed rows to fetch by id, or a reader idle
    for so long that feed rows it never saw may have been pruned."""
    if time.monotonic() - caught_up_at > RELOAD_AFTER_IDLE:
        return True
    return len(changes) > RELOAD_AFTER_CHANGES or any(op == ChangeFeedEntry.Op.RESET for _, _, op in changes)


def split_expiries(changes: list[tuple[int, uuid.UUID, str]],
                   applied: Collection[int] = ()) -> tuple[set[uuid.UUID], set[uuid.UUID]]:
    """The memories a batch of feed rows changed (those in ``applied`` left out), in two sets:
    those to read again whole, and those whose only change is an EXPIRY (their expiry moved)."""
    whole: set[uuid.UUID] = set()
    expiries: set[uuid.UUID] = set()
    for change_id, memory_id, op in changes:
        if change_id in applied:
            continue
        (expiries if op == ChangeFeedEntry.Op.EXPIRY else whole).add(memory_id)
    return whole, expiries - whole


def expiries_of(memory_ids: set[uuid.UUID]) -> dict[uuid.UUID, float]:
    """When each of these memories stops being searchable (``live_until``); a memory that is gone
    or archived is left out. Plain SQL, as ``_rows_after``."""
    if not memory_ids:
        return {}
    table, pk = connection.ops.quote_name(Memory._meta.db_table), Memory._meta.pk
    placeholders = ", ".join(["%s"] * len(memory_ids))
    keys = [pk.get_db_prep_value(memory_id, connection) for memory_id in memory_ids]
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT id, decay_eligible, expires_at FROM {table} "  # noqa: S608 - the model's own table name
                       f"WHERE archived = %s AND id IN ({placeholders})", [False, *keys])
        rows = cursor.fetchall()
    return {raw_uuid(raw_id): until_of(bool(decay), raw_datetime(expires_at)) for raw_id, decay, expires_at in rows}


def raw_uuid(value: uuid.UUID | str) -> uuid.UUID:
    """A uuid column's value read through a raw cursor (SQLite gives its 32 hex digits)."""
    return value if isinstance(value, uuid.UUID) else uuid.UUID(value)


def raw_datetime(value: datetime | str | None) -> datetime | None:
    """A datetime column's value read through a raw cursor: SQLite gives text, in UTC (None when
    it is not a datetime)."""
    if not isinstance(value, str):
        return value
    parsed = parse_datetime(value)
    return parsed if parsed is None or parsed.tzinfo else parsed.replace(tzinfo=UTC)


class FeedReader:
    """One in-process index's position in the change feed: the last row read, and the
    transactions that may still commit rows below it (memories/indexes/feed_cursor.py)."""

    def __init__(self) -> None:
        self.last_change = 0
        self.last_memory_id: str | None = None  # of the row at last_change (None: unknown or no row)
        self.pending: frozenset[int] = NO_PENDING
        self.caught_up_at = time.monotonic()
        self._before: tuple[int, str | None, frozenset[int]] | None = None

    def start(self) -> None:
        """At a full load: everything up to the newest row is in, but for transactions still running."""
        self.last_change, self.last_memory_id, self.pending = start_position()
        self.caught_up_at = time.monotonic()

    def resume(self, change_id: int, memory_id: str | None, pending: frozenset[int] = NO_PENDING) -> None:
        """At a snapshot's position (checked against the feed by the caller): the tail comes next."""
        self.last_change, self.last_memory_id, self.pending = change_id, memory_id, pending
        self.caught_up_at = time.monotonic()

    def read(self) -> list[tuple[int, uuid.UUID, str]] | None:
        """The rows since the last read (late commits included), or None when the reader must
        reload everything."""
        # One statement, news or not: a probe first cost a second round trip whenever there was
        # news (every search after a write).
        read = read_after(self.last_change, self.pending)
        changes = read.rows
        caught_up_at, self.caught_up_at = self.caught_up_at, time.monotonic()
        if not changes:
            self.pending = read.pending
            return []
        if needs_reload(changes, caught_up_at):
            return None
        self._before = (self.last_change, self.last_memory_id, self.pending)
        newest = changes[-1]
        if newest[0] > self.last_change:
            self.last_change, self.last_memory_id = newest[0], str(newest[1])
        self.pending = read.pending
        return changes

    def rewind(self) -> None:
        """Read the last read's rows again next time: applying them failed."""
        if self._before is not None:
            self.last_change, self.last_memory_id, self.pending = self._before
            self._before = None


@contextlib.contextmanager
def discarded_on_failure(discard: Callable[[], None], index: str) -> Iterator[None]:
    """Around an in-process index's catch-up and search. A database error leaves the index as it
    is (nothing was half-applied: a failed load starts over, a failed fetch rewinds the feed). Any
    other failure may have left it half-changed, so it is thrown away (``discard``, logged with its
    traceback) and the next search reloads it: one error never turns into a broken index."""
    try:
        yield
    except (DatabaseError, Rebuilding):  # nothing half-applied; a rebuild is not a failure
        raise
    except BaseException:
        discard()
        logger.warning("%s discarded after a failure; the next search reloads it", index, exc_info=True)
        raise


STEP_PAUSE_S = 0.0005  # see let_waiters_in


def let_waiters_in() -> None:
    """Call between two steps of background work that each hold an index's lock (the text
    statistics primer, a snapshot capture's copy): a request waiting for the lock takes it now.
    Without a pause the background thread, still holding the GIL, took the lock again before the
    woken waiter could, step after step (a new process's second search at a million rows waited
    0.8-1.7 s for the whole primer)."""
    time.sleep(STEP_PAUSE_S)


CATEGORY_OPERATIONS = ("CATEGORY_SET", "CATEGORY_DELETE")  # the audit rows of category writes (categories/services.py)
WATCH_BATCH = 1000  # feed rows a watcher reads at a time


def feed_position() -> dict[str, Any]:
    """Where the change feed and the audit log end now: a watcher starts from here."""
    change, _, pending = start_position()
    return {"change": change, "pending": sorted(pending), "audit": AuditLog.objects.aggregate(last=Max("id"))["last"] or 0}


def _where(memory_ids: set[uuid.UUID]) -> dict[uuid.UUID, tuple[str, str | None]]:
    """Namespace and collection of each memory; a deleted one's namespace from its audit rows."""
    found: dict[uuid.UUID, tuple[str, str | None]] = {
        memory_id: (namespace, collection)
        for memory_id, namespace, collection in Memory.objects.filter(id__in=memory_ids).values_list("id", "namespace", "collection")
    }
    gone = memory_ids - found.keys()
    if gone:
        for memory_id, namespace in AuditLog.objects.filter(memory_id__in=gone).values_list("memory_id", "namespace"):
            found.setdefault(memory_id, (namespace, None))
    return found


def changes_since(*, change: int, audit: int, pending: frozenset[int] = NO_PENDING) -> dict[str, Any]:
    """What changed after a position (``feed_position``): each memory changed (id, namespace,
    collection, op; namespace None when nothing tells it any more), each category written or
    deleted (namespace, name), whether the whole store was replaced (``reset``), and the new
    position. Reads at most WATCH_BATCH feed rows after it (and the late commits of ``pending``
    transactions); ``more`` says whether to read again."""
    read = read_after(change, pending, WATCH_BATCH)
    rows = read.rows
    last_audit = AuditLog.objects.aggregate(last=Max("id"))["last"] or audit
    category_rows = (AuditLog.objects.filter(id__gt=audit, id__lte=last_audit, operation__in=CATEGORY_OPERATIONS)
                     .order_by("id").values_list("namespace", "details"))
    changed = {memory_id: op for _, memory_id, op in rows if op != ChangeFeedEntry.Op.RESET}
    where = _where(set(changed)) if changed else {}
    return {
        "memories": [{"id": str(memory_id), "namespace": where.get(memory_id, (None, None))[0],
                      "collection": where.get(memory_id, (None, None))[1], "op": op} for memory_id, op in changed.items()],
        "categories": [{"namespace": namespace, "name": (details or {}).get("name")} for namespace, details in category_rows],
        "reset": any(op == ChangeFeedEntry.Op.RESET for _, _, op in rows),
        "position": {"change": read.position_after(change), "pending": sorted(read.pending), "audit": last_audit},
        "more": sum(1 for row in rows if row[0] > change) == WATCH_BATCH,
    }


def feed_prune(*, now: datetime | None = None) -> int:
    """Old feed rows go, but never one an external index (Qdrant) has not applied yet."""
    now = now or timezone.now()
    old = ChangeFeedEntry.objects.filter(created_at__lt=now - timedelta(days=FEED_KEEP_DAYS))
    behind = VectorIndexCursor.objects.order_by("last_change").values_list("last_change", flat=True).first()
    if behind is not None:
        old = old.filter(id__lte=behind)
    deleted, _ = old.delete()
    return deleted
