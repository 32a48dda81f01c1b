"""Access tracking: count, last_accessed, sliding-window expiry, T1 review, auto-promotion.

It lives beside the memories because every read path records accesses: search and recall,
memory://inject, memory://{id}.

Searches record the ids they returned; :class:`AccessTracker` batches them in memory and
a background thread flushes at least every ``FLUSH_INTERVAL`` seconds (the seed's 5 s
window), off the request path. Each flush applies every pending id in its own short
transaction with a row lock and relative arithmetic, so several processes flushing the
same memory stay correct. ``atexit`` (and the server's SIGTERM handling) flush on a
clean shutdown.
"""
from __future__ import annotations

import atexit
import logging
import threading
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import DatabaseError, IntegrityError, close_old_connections, connection, transaction
from django.db.models import F
from django.utils import timezone

from bhgbrain_site.core.errors import NotFound
from memories import funnel
from memories.models import AccessDay, Memory
from memories.pipeline.tiers import tier_metadata
from memories.selectors import memory_get, memory_to_dict, parse_memory_id

logger = logging.getLogger("bhgbrain.retention")

FLUSH_INTERVAL = 2.0
# The sliding window moves an expiry only when it gains at least this much: TTLs are days, and
# an expiry that moved by seconds on every flush would send every returned memory through the
# change feed (every process's indexes re-reading it) for nothing.
EXPIRY_STEP = timedelta(hours=1)
PROMOTION = {"T3": "T2", "T2": "T1"}  # never to T0: that takes explicit intent


@dataclass(frozen=True)
class AccessOutcome:
    memory_id: str
    access_count: int
    retention_tier: str
    promoted_from: str | None


def _promoted_tier(tier: str, before: int, after: int, threshold: int) -> str:
    """One step per threshold crossed: 5 accesses T3→T2, 10 accesses T2→T1 (default threshold)."""
    for _ in range(after // threshold - before // threshold):
        tier = PROMOTION.get(tier, tier)
    return tier


def _sliding_expiry(memory: Memory, at: datetime) -> None:
    """expires_at = max(current, at + TTL), moved only by EXPIRY_STEP or more; T1 review_due
    reset; a new tier re-anchors at `at`."""
    meta = tier_metadata(memory.retention_tier, anchor=at, ttl=settings.BHGBRAIN.retention.tier_ttl)
    memory.decay_eligible = meta.decay_eligible
    if meta.expires_at is None:
        memory.expires_at = None
    elif memory.expires_at is None:
        memory.expires_at = meta.expires_at
    elif settings.BHGBRAIN.retention.sliding_window_enabled and meta.expires_at - memory.expires_at >= EXPIRY_STEP:
        memory.expires_at = meta.expires_at
    memory.review_due = meta.review_due


_ACCESS_FIELDS = ("access_count", "last_accessed", "retention_tier", "expires_at", "decay_eligible", "review_due")
# What a flush reads of a memory: the fields it changes and what its audit and day counts name. Not the
# text, tags and the other dates (about a third of a flush's time went into loading and converting them;
# none of the funnel's indexers reads them for an access-only change: their fields do not intersect).
_FLUSH_FIELDS = ("id", "namespace", *_ACCESS_FIELDS)


def _apply_access(memory: Memory, count: int, at: datetime, threshold: int) -> None:
    before, tier_before = memory.access_count, memory.retention_tier
    memory.access_count = before + count
    memory.last_accessed = max(memory.last_accessed or at, at)
    if tier_before != "T0":
        memory.retention_tier = _promoted_tier(tier_before, before, memory.access_count, threshold)
    if memory.retention_tier != tier_before:
        memory.expires_at = None  # recomputed from the new tier, anchored at this access
    _sliding_expiry(memory, at)


def _count_day(namespace: str, day: date, count: int) -> None:
    """Add ``count`` to the namespace's accesses on ``day`` (the dashboard's chart)."""
    if AccessDay.objects.filter(day=day, namespace=namespace).update(accesses=F("accesses") + count):
        return
    try:
        with transaction.atomic():
            AccessDay.objects.create(day=day, namespace=namespace, accesses=count)
    except IntegrityError:  # another process created the day's row first
        AccessDay.objects.filter(day=day, namespace=namespace).update(accesses=F("accesses") + count)


@dataclass(frozen=True)
class _Accessed:
    """One memory after its accesses were applied in memory: what changed, the audit, the outcome."""

    changed: frozenset[str]
    audit: funnel.Audit | None
    outcome: AccessOutcome


def _accessed(memory: Memory, count: int, at: datetime, threshold: int) -> _Accessed:
    """Apply ``count`` accesses at ``at`` to a loaded (locked) memory; nothing is written yet."""
    previous = {name: getattr(memory, name) for name in _ACCESS_FIELDS}
    _apply_access(memory, count, at, threshold)
    tier_before = previous["retention_tier"]
    promoted = memory.retention_tier != tier_before
    audit = funnel.Audit("PROMOTE", "system", {"from": tier_before, "to": memory.retention_tier,
                                               "access_count": memory.access_count}) if promoted else None
    return _Accessed(
        changed=frozenset(name for name in _ACCESS_FIELDS if getattr(memory, name) != previous[name]),
        audit=audit,
        outcome=AccessOutcome(str(memory.id), memory.access_count, memory.retention_tier,
                              tier_before if promoted else None),
    )


FLUSH_CHUNK = 200  # memories written per transaction by a flush
Access = tuple[uuid.UUID, int, datetime]  # a memory, how many accesses, the last one


def access_chunks(batch: list[tuple[str, int, datetime]]) -> list[list[Access]]:
    """A flush's accesses in id order, FLUSH_CHUNK per transaction; ids that are not UUIDs are dropped."""
    valid: list[Access] = []
    for memory_id, count, at in batch:
        try:
            valid.append((uuid.UUID(str(memory_id)), count, at))
        except ValueError:
            continue
    valid.sort(key=lambda item: item[0])
    return [valid[start:start + FLUSH_CHUNK] for start in range(0, len(valid), FLUSH_CHUNK)]


def memories_record_access(chunk: list[Access]) -> list[AccessOutcome]:
    """Apply one chunk of accesses in one transaction: one locking read, one UPDATE per set of
    changed fields, the day counts once per namespace. Rows are locked in id order, so processes
    flushing the same memories never deadlock."""
    threshold = settings.BHGBRAIN.retention.auto_promote_access_threshold
    wanted = {memory_id: (count, at) for memory_id, count, at in chunk}
    outcomes: list[AccessOutcome] = []
    groups: dict[frozenset[str], list[Memory]] = {}
    audits: dict[uuid.UUID, funnel.Audit] = {}
    days: Counter[tuple[str, date]] = Counter()
    with transaction.atomic():
        rows = Memory.objects.select_for_update().filter(pk__in=list(wanted), archived=False).order_by("pk")
        for memory in rows.only(*_FLUSH_FIELDS):
            count, at = wanted[memory.id]
            done = _accessed(memory, count, at, threshold)
            if done.audit is not None:
                audits[memory.id] = done.audit
            groups.setdefault(done.changed, []).append(memory)
            days[(memory.namespace, at.date())] += count
            outcomes.append(done.outcome)
        latest = max(at for _, at in wanted.values())
        for changed, memories in groups.items():
            funnel.save_memories(memories, changed, audits=audits, at=latest)
        for (namespace, day), count in days.items():
            _count_day(namespace, day, count)
    return outcomes


class AccessTracker:
    """Batches accesses per process; flushes on a timer thread and at exit."""

    def __init__(self, interval: float = FLUSH_INTERVAL) -> None:
        self.interval = interval
        self._pending: Counter[str] = Counter()
        self._last_seen: dict[str, datetime] = {}
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def record(self, memory_ids: list[str], at: datetime | None = None) -> None:
        at = at or timezone.now()
        with self._lock:
            for memory_id in memory_ids:
                self._pending[memory_id] += 1
                self._last_seen[memory_id] = max(self._last_seen.get(memory_id, at), at)
        self._ensure_thread()

    @property
    def running(self) -> bool:
        """Whether the background flush thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def pending(self) -> int:
        with self._lock:
            return sum(self._pending.values())

    def discard(self) -> int:
        """Drop the pending accesses without writing them; how many there were."""
        return len(self._take())

    def _take(self) -> list[tuple[str, int, datetime]]:
        with self._lock:
            batch = [(mid, n, self._last_seen[mid]) for mid, n in self._pending.items()]
            self._pending.clear()
            self._last_seen.clear()
        return batch

    def _restore(self, items: list[tuple[str, int, datetime]]) -> None:
        with self._lock:
            for memory_id, count, at in items:
                self._pending[memory_id] += count
                self._last_seen[memory_id] = max(self._last_seen.get(memory_id, at), at)

    def flush(self) -> list[AccessOutcome]:
        """Write every pending access now (also callable from tests and shutdown)."""
        with self._flush_lock:
            batch = self._take()
            outcomes: list[AccessOutcome] = []
            chunks = access_chunks(batch)
            for index, chunk in enumerate(chunks):
                try:
                    outcomes += memories_record_access(chunk)
                except DatabaseError:
                    left = [(str(memory_id), count, at) for rest in chunks[index:] for memory_id, count, at in rest]
                    logger.exception("access flush failed; %d updates kept for the next flush", len(left))
                    self._restore(left)
                    break
            if outcomes:
                funnel.sync_indexes()  # expiry and tier changes reach an external index's payload (Qdrant)
            return outcomes

    def _ensure_thread(self) -> None:
        if not getattr(settings, "BHGBRAIN_ACCESS_FLUSH_THREAD", True):
            return
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="bhgbrain-access-flush", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            self._wake.wait(self.interval)
            self._wake.clear()
            try:
                close_old_connections()
                self.flush()
            finally:
                connection.close()


tracker = AccessTracker()


def _flush_at_exit() -> None:
    if tracker.pending():
        try:
            tracker.flush()
        except DatabaseError:
            logger.exception("final access flush failed")


atexit.register(_flush_at_exit)


def memories_touch(*, memory_ids: list[str], at: datetime | None = None) -> None:
    """Record that these memories were returned to a caller (batched, flushed ≤ 5 s later)."""
    if memory_ids:
        tracker.record([str(uuid.UUID(m)) for m in memory_ids], at)


def memory_open(*, memory_id: str, namespace: str) -> dict[str, Any]:
    """One live memory of the namespace, shown to a caller: counted as an access."""
    memory = memory_get(memory_id=parse_memory_id(memory_id), namespace=namespace)
    if memory is None:
        raise NotFound(f"Memory {memory_id} not found")
    memories_touch(memory_ids=[str(memory.id)])
    return memory_to_dict(memory)
