"""The retention cleanup (``bhgbrain gc``, scheduled on ``retention.cleanup_schedule``).

1. Expired memories (decay-eligible, ``expires_at`` < now; T0 never is) are archived whole
   (``retention.archive_before_delete``) and deleted, with their full-text rows, a DELETE in
   the vector change feed and a ``FORGET`` audit row by ``system``: in batches, each batch one
   transaction that re-checks the expiry under a row lock, so a memory whose sliding window
   was just extended by a search is never removed.
2. ``consolidate`` (``bhgbrain gc --consolidate``): memories not accessed for
   ``retention.decay_after_days`` with importance < 0.5 and no category are marked stale and
   expire now, so the next cleanup archives them.
3. Change-feed rows older than ``FEED_KEEP_DAYS`` are pruned (an index that has not caught up
   for that long reloads instead of replaying: memories/feed.py).
"""
from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from memories import changes
from memories.feed import feed_prune
from memories.models import CONVERSATION_FIELDS, Memory
from retention.models import ArchivedMemory

logger = logging.getLogger("bhgbrain.retention")

BATCH = 500
ACTOR = "system"


@dataclass
class CleanupReport:
    expired: int = 0
    archived: int = 0
    deleted: int = 0
    consolidated: int = 0
    feed_rows_pruned: int = 0
    dry_run: bool = False
    tier: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _expired(now: datetime, tier: str | None = None) -> Q:
    condition = Q(decay_eligible=True, expires_at__lt=now)
    return condition & Q(retention_tier=tier) if tier else condition


def _archive(memory: Memory, now: datetime) -> ArchivedMemory:
    return ArchivedMemory(
        memory_id=memory.id, namespace=memory.namespace, collection=memory.collection, type=memory.type,
        category=memory.category, content=memory.content, summary=memory.summary, tags=memory.tags,
        source=memory.source, checksum=memory.checksum, importance=memory.importance, tier=memory.retention_tier,
        access_count=memory.access_count, last_accessed=memory.last_accessed, device_id=memory.device_id,
        embedding=memory.embedding, embedding_model=memory.embedding_model, created_at=memory.created_at,
        expired_at=now, **{name: getattr(memory, name) for name in CONVERSATION_FIELDS},
    )


def _remove_batch(now: datetime, archive: bool, tier: str | None) -> tuple[int, int]:
    """One transaction: lock up to BATCH still-expired rows, archive them, delete them."""
    with transaction.atomic():
        batch = list(Memory.objects.select_for_update().filter(_expired(now, tier)).order_by("expires_at", "id")[:BATCH])
        if not batch:
            return 0, 0
        if archive:
            ArchivedMemory.objects.bulk_create([_archive(m, now) for m in batch])
        changes.memories_removed(batch, at=now, audit=lambda m: changes.Audit(
            "FORGET", ACTOR, {"reason": "expired", "tier": m.retention_tier, "summary": m.summary, "archived": archive}))
    return len(batch), len(batch) if archive else 0


def memories_consolidate(*, now: datetime | None = None) -> int:
    """Mark long-unused, unimportant, uncategorised memories stale and due now."""
    now = now or timezone.now()
    cutoff = now - timedelta(days=settings.BHGBRAIN.retention.decay_after_days)
    unused = Q(last_accessed__lt=cutoff) | Q(last_accessed__isnull=True, created_at__lt=cutoff)
    candidates = Memory.objects.filter(unused, decay_eligible=True, archived=False, stale=False,
                                       importance__lt=0.5, category__isnull=True)
    audit = changes.Audit("STALE", ACTOR, {"reason": f"not accessed for {settings.BHGBRAIN.retention.decay_after_days} days"})
    with transaction.atomic():
        ids = list(candidates.select_for_update().values_list("id", flat=True))
        changes.memories_updated(ids, {"stale": True, "expires_at": now - timedelta(milliseconds=1), "updated_at": now},
                                 audit=lambda _m: audit, at=now)
    return len(ids)


def retention_cleanup(*, consolidate: bool = False, dry_run: bool = False, tier: str | None = None,
                      now: datetime | None = None) -> CleanupReport:
    """The cleanup cycle; ``consolidate`` first marks stale memories so they go in this cycle.
    ``dry_run`` counts what would go and changes nothing; ``tier`` limits it to one tier."""
    report, now = CleanupReport(dry_run=dry_run, tier=tier), now or timezone.now()
    archive = settings.BHGBRAIN.retention.archive_before_delete
    if dry_run:
        report.expired = Memory.objects.filter(_expired(now, tier)).count()
        report.archived = report.expired if archive else 0
        return report
    if consolidate:
        report.consolidated = memories_consolidate(now=now)
    while True:
        removed, archived = _remove_batch(now, archive, tier)
        if not removed:
            break
        report.expired += removed
        report.deleted += removed
        report.archived += archived
    report.feed_rows_pruned = feed_prune(now=now)
    logger.info("retention cleanup: %s", report.as_dict())
    return report
