"""Access tracking: count, last_accessed, sliding-window expiry, T1 review, auto-promotion.

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
from datetime import datetime

from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection, transaction
from django.utils import timezone

from memories.models import AuditLog, Memory, VectorChange
from memories.tiers import tier_metadata

logger = logging.getLogger("bhgbrain.retention")

FLUSH_INTERVAL = 2.0
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
    """expires_at = max(current, at + TTL); T1 review_due reset; a new tier re-anchors at `at`."""
    meta = tier_metadata(memory.retention_tier, anchor=at, ttl=settings.BHGBRAIN.retention.tier_ttl)
    memory.decay_eligible = meta.decay_eligible
    if meta.expires_at is None:
        memory.expires_at = None
    elif settings.BHGBRAIN.retention.sliding_window_enabled or memory.expires_at is None:
        memory.expires_at = max(memory.expires_at or meta.expires_at, meta.expires_at)
    memory.review_due = meta.review_due


def memory_record_access(*, memory_id: str, count: int, at: datetime) -> AccessOutcome | None:
    """Apply ``count`` accesses made at ``at`` to one memory (one transaction)."""
    retention = settings.BHGBRAIN.retention
    with transaction.atomic():
        memory = Memory.objects.select_for_update().filter(pk=memory_id, archived=False).first()
        if memory is None:
            return None
        before, tier_before = memory.access_count, memory.retention_tier
        memory.access_count = before + count
        memory.last_accessed = max(memory.last_accessed or at, at)
        if tier_before != "T0":
            memory.retention_tier = _promoted_tier(tier_before, before, memory.access_count, retention.auto_promote_access_threshold)
        if memory.retention_tier != tier_before:
            memory.expires_at = None  # recomputed from the new tier, anchored at this access
        expires_before = memory.expires_at
        _sliding_expiry(memory, at)
        memory.save(update_fields=["access_count", "last_accessed", "retention_tier", "expires_at", "decay_eligible", "review_due"])
        if memory.retention_tier != tier_before:
            AuditLog.objects.create(
                timestamp=at, namespace=memory.namespace, operation="PROMOTE", memory_id=memory.id,
                client_id="system", details={"from": tier_before, "to": memory.retention_tier, "access_count": memory.access_count},
            )
        if memory.expires_at != expires_before or memory.retention_tier != tier_before:
            VectorChange.objects.create(memory_id=memory.id, op=VectorChange.Op.UPSERT)
    promoted = tier_before if memory.retention_tier != tier_before else None
    return AccessOutcome(str(memory.id), memory.access_count, memory.retention_tier, promoted)


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

    def pending(self) -> int:
        with self._lock:
            return sum(self._pending.values())

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
            outcomes = []
            for index, (memory_id, count, at) in enumerate(batch):
                try:
                    outcome = memory_record_access(memory_id=memory_id, count=count, at=at)
                except DatabaseError:
                    logger.exception("access flush failed; %d updates kept for the next flush", len(batch) - index)
                    self._restore(batch[index:])
                    break
                if outcome:
                    outcomes.append(outcome)
            if outcomes:
                from memories.vector_index import sync_now

                sync_now()  # expiry and tier changes reach an external index's payload (Qdrant)
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
