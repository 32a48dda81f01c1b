"""The retention cleanup (``bhgbrain gc``, scheduled on ``retention.cleanup_schedule``).

1. Expired memories (decay-eligible, ``expires_at`` < now; T0 never is) are archived whole
   (``retention.archive_before_delete``) and deleted, with their full-text rows, a DELETE in
   the vector change feed and a ``FORGET`` audit row by ``system``: in batches, each batch one
   transaction that re-checks the expiry under a row lock, so a memory whose sliding window
   was just extended by a search is never removed.
2. ``consolidate`` (``bhgbrain gc --consolidate``): memories not accessed for
   ``retention.decay_after_days`` with importance < 0.5 and no category are marked stale and
   expire now, so the next cleanup archives them.
3. Namespace quotas under policy ``trim`` (memories/quotas/): a namespace over its quota (its
   limit was lowered, or memories were restored or imported past it) loses its least-used
   memories down to the quota, within that namespace only and never T0, archived first, audited
   ``FORGET`` by ``system``, reason ``over_quota``; under policy ``reject`` nothing is trimmed
   (new writes are refused until it is under). Then budgets (retention/budgets.py): a tier over
   ``retention.tier_budgets``, or the store over ``retention.max_memories``, loses its least-used,
   longest-unused memories first (never T0). Both are always archived (whatever
   ``archive_before_delete`` says: they had not expired) and deleted through the write funnel
   with a ``FORGET`` audit row (reason ``over_budget`` for budgets); so every trimmed memory can
   be restored from the archive.
4. Change-feed rows older than ``FEED_KEEP_DAYS`` are pruned (an index that has not caught up
   for that long reloads instead of replaying: memories/indexes/feed.py), after their deletions are
   tallied for compaction; on PostgreSQL each namespace's usage rows are folded into one.
5. Compaction (retention/compaction.py) when deletions passed
   ``retention.compaction_deleted_threshold``, or when forced (``gc --force-compact``).

The report's ``expired`` counts phase 1, ``quota_trimmed`` phase 3's namespace trims per
namespace, ``trimmed`` its budget trims per tier; ``archived`` and ``deleted`` count them all.

A namespace's quota under policy ``trim`` uses phase 3's trim, limited to that namespace, at
write time (:func:`namespace_trim`, registered from retention/apps.py).

Fact chains (issue 42; retention/chains.py): a memory that was superseded, or superseded another,
is archived in every phase whatever ``archive_before_delete`` says, and the live older versions
of whatever goes leave with it, archived, a ``FORGET`` row each with reason
``successor_archived`` (the report's ``with_successor``, for expiry and budget trims; a namespace
trim's ``quota_trimmed`` counts them with the memories it chose, all of them the namespace's;
``deleted`` and ``archived`` count them all).
"""
from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from bhgbrain_site.core.progress import Progress
from memories import funnel
from memories.access import tracker
from memories.indexes.feed import feed_prune
from memories.models import CONVERSATION_FIELDS, Memory
from memories.quotas import admission, usage
from memories.quotas.limits import Quota, quota_for, quotas_for
from memories.quotas.plan import TRIMMABLE
from memories.quotas.plan import trim_plan as quota_trim_take
from retention import budgets, chains, compaction
from retention.backups.bhgb_format import leftovers_remove
from retention.models import ArchivedMemory

logger = logging.getLogger("bhgbrain.retention")

BATCH = 500
ACTOR = "system"


@dataclass
class CleanupReport:
    expired: int = 0
    archived: int = 0
    deleted: int = 0
    with_successor: int = 0  # older versions of a fact archived with their successor (retention/chains.py)
    consolidated: int = 0
    feed_rows_pruned: int = 0
    dry_run: bool = False
    tier: str | None = None
    trimmed: dict[str, int] = field(default_factory=lambda: {"T1": 0, "T2": 0, "T3": 0})
    quota_trimmed: dict[str, int] = field(default_factory=dict)
    compaction: dict[str, Any] = field(default_factory=dict)

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


@dataclass(frozen=True)
class Removed:
    """What one removal took: the memories chosen (expired, trimmed), the older versions of their
    fact chains that went with them (retention/chains.py), and how many were archived."""

    chosen: int
    with_successor: int
    archived: int

    @property
    def total(self) -> int:
        return self.chosen + self.with_successor


def _forget_audit(memory: Memory, actor: str, reason: str, archived: bool) -> funnel.Audit:
    details = {"reason": reason, "tier": memory.retention_tier, "summary": memory.summary, "archived": archived}
    if reason == chains.CASCADE_REASON:
        details["successor"] = str(memory.superseded_by)
    return funnel.Audit("FORGET", actor, details)


def _archive_and_delete(batch: list[Memory], now: datetime, *, actor: str, reason: str, archive: bool) -> Removed:
    """Inside the caller's transaction: the older versions of the batch's fact chains join it;
    each is archived when ``archive`` says so or when it belongs to a chain (always, for the older
    versions), then all are deleted through the write funnel, a FORGET audit row each."""
    older = chains.predecessors(batch)
    kept = {m.id for m in older} | (chains.chained(batch) if not archive else {m.id for m in batch})
    ArchivedMemory.objects.bulk_create([_archive(m, now) for m in [*older, *batch] if m.id in kept])
    chosen = {m.id for m in batch}
    funnel.delete_memories([*older, *batch], at=now, audit=lambda m: _forget_audit(
        m, actor, reason if m.id in chosen else chains.CASCADE_REASON, m.id in kept))
    return Removed(len(batch), len(older), len(kept))


def _locked_batch(rows: QuerySet[Memory], limit: int) -> list[Memory]:
    """The first ``limit`` of ``rows``, locked after their namespaces' locks: the order every
    writer of a fact chain keeps (memories/temporal), so a cleanup that takes the older versions
    with their successor never deadlocks with a keyed write or a forget. A row that no longer
    matches ``rows`` once locked (its expiry extended meanwhile) is left."""
    ids = list(rows.values_list("id", flat=True)[:limit])
    for namespace in sorted(set(Memory.objects.filter(id__in=ids).values_list("namespace", flat=True))):
        admission.lock_namespace(namespace)
    return list(rows.filter(id__in=ids).select_for_update())


def _remove_batch(now: datetime, archive: bool, tier: str | None) -> Removed:
    """One transaction: lock up to BATCH still-expired rows, archive them (those in a fact chain
    always), delete them with the older versions of their chains."""
    with transaction.atomic():
        batch = _locked_batch(Memory.objects.filter(_expired(now, tier)).order_by("expires_at", "id"), BATCH)
        return _archive_and_delete(batch, now, actor=ACTOR, reason="expired", archive=archive)


def _one_trim_at_a_time() -> None:
    """Inside a trim's transaction: no other cleanup (the scheduler's, a ``gc``) trims until it
    commits, so the count of what is over budget read next is not stale. SQLite's BEGIN IMMEDIATE
    serialises writers already; PostgreSQL takes a transaction-scoped advisory lock."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", ["bhgbrain-retention-trim"])


def _trim(batch: list[Memory], now: datetime, actor: str, reason: str) -> int:
    """Archive the memories whole, then delete them through the write funnel (a FORGET audit row
    each, with ``reason``): a trimmed memory had not expired, so it is always archived; the older
    versions of its fact chain go with it, archived. How many went."""
    return _archive_and_delete(batch, now, actor=actor, reason=reason, archive=True).total if batch else 0


def _trim_batch(tier: str, limit: int, now: datetime, only: str | None) -> Removed:
    """One transaction: archive and delete up to ``limit`` of the tier's first memories in trim
    order, and never more than the tier is still over now (another cleanup may have trimmed it
    since this one planned: two cleanups at once must not trim it twice)."""
    with transaction.atomic():
        _one_trim_at_a_time()
        still_over = budgets.trim_plan(now=now, tier=only)[tier]
        batch = _locked_batch(budgets.trim_candidates(tier), min(limit, still_over, BATCH))
        return _archive_and_delete(batch, now, actor=ACTOR, reason="over_budget", archive=True)


def namespace_trim(*, namespace: str, take: Mapping[str, int], actor: str, at: datetime) -> int:
    """A namespace's quota, policy ``trim`` (memories/quotas/admission.py): inside the write's
    transaction, archive and delete ``take[tier]`` of that namespace's memories of each tier, the
    first in trim order (least used, longest unused; never T0, never an expired one: it does not
    count and the cleanup archives it anyway). Audited as FORGET by the writer, reason
    ``over_quota``. How many went."""
    removed = 0
    for tier, wanted in take.items():
        if wanted > 0:
            batch = list(budgets.trim_candidates(tier, namespace=namespace, now=at).select_for_update()[:wanted])
            removed += _trim(batch, at, actor, "over_quota")
    return removed


def _quota_take(quota: Quota, now: datetime, tier: str | None) -> dict[str, int]:
    """What ``quota``'s namespace must lose per tier to fit it (expired memories do not count:
    the cleanup's first phase removes them anyway); ``tier``: only that tier is trimmed."""
    held = usage.counts(quota.namespace)
    expired = usage.expired_counts(quota.namespace, now)
    held = {name: count - expired[name] for name, count in held.items()}
    eligible = TRIMMABLE if tier is None else tuple(t for t in TRIMMABLE if t == tier)
    return quota_trim_take(held, quota.limits, eligible=eligible).take


def quota_trim_plan(*, now: datetime, tier: str | None = None) -> dict[str, dict[str, int]]:
    """The namespaces over their quota under policy ``trim``, and what each must lose per tier."""
    quotas = quotas_for(sorted(usage.counts_of()))
    plan = {}
    for namespace, quota in quotas.items():
        if quota.policy == "trim" and quota.limited:
            take = _quota_take(quota, now, tier)
            if any(take.values()):
                plan[namespace] = take
    return plan


def _capped(take: Mapping[str, int], most: int) -> dict[str, int]:
    """``take`` cut to at most ``most`` memories in all (T3 first, the trim's own order)."""
    capped = {}
    for tier in TRIMMABLE:
        capped[tier] = min(take.get(tier, 0), most)
        most -= capped[tier]
    return capped


def _quota_trim_batch(namespace: str, now: datetime, tier: str | None) -> int:
    """One transaction under the namespace's quota lock: its quota and count read again (a writer
    or another cleanup may have changed them since the plan), then up to BATCH trimmed."""
    with transaction.atomic():
        admission.lock_namespace(namespace)
        quota = quota_for(namespace)
        if quota.policy != "trim" or not quota.limited:
            return 0
        take = _capped(_quota_take(quota, now, tier), BATCH)
        return namespace_trim(namespace=namespace, take=take, actor=ACTOR, at=now) if any(take.values()) else 0


def usage_fold() -> int:
    """Fold each namespace's usage rows into one (PostgreSQL; memories/quotas/usage.py), each under
    the namespace's quota lock; how many namespaces were folded."""
    return admission.fold_crowded()


def memories_consolidate(*, now: datetime | None = None) -> int:
    """Mark long-unused, unimportant, uncategorised memories stale and due now."""
    now = now or timezone.now()
    cutoff = now - timedelta(days=settings.BHGBRAIN.retention.decay_after_days)
    unused = Q(last_accessed__lt=cutoff) | Q(last_accessed__isnull=True, created_at__lt=cutoff)
    candidates = Memory.objects.filter(unused, decay_eligible=True, archived=False, stale=False,
                                       importance__lt=0.5, category__isnull=True)
    audit = funnel.Audit("STALE", ACTOR, {"reason": f"not accessed for {settings.BHGBRAIN.retention.decay_after_days} days"})
    with transaction.atomic():
        ids = list(candidates.select_for_update().values_list("id", flat=True))
        funnel.update_memories(ids, {"stale": True, "expires_at": now - timedelta(milliseconds=1), "updated_at": now},
                               audit=lambda _m: audit, at=now)
    return len(ids)


def _preview(report: CleanupReport, now: datetime, archive: bool, force_compact: bool) -> CleanupReport:
    """What a cleanup would do now, changing nothing."""
    report.expired = Memory.objects.filter(_expired(now, report.tier)).count()
    report.quota_trimmed = {ns: sum(take.values()) for ns, take in quota_trim_plan(now=now, tier=report.tier).items()}
    report.trimmed = budgets.trim_plan(now=now, tier=report.tier)
    report.archived = ((report.expired if archive else 0) + sum(report.quota_trimmed.values())
                       + sum(report.trimmed.values()))
    report.compaction = compaction.compaction_run(force=force_compact, dry_run=True)
    return report


def _expire_all(report: CleanupReport, now: datetime, archive: bool, step: Callable[[int], None]) -> None:
    while True:
        removed = _remove_batch(now, archive, report.tier)
        if not removed.total:
            return
        report.expired += removed.chosen
        report.with_successor += removed.with_successor
        report.deleted += removed.total
        report.archived += removed.archived
        step(removed.total)


def _quota_trim_all(report: CleanupReport, plan: dict[str, dict[str, int]], now: datetime,
                    step: Callable[[int], None]) -> None:
    for namespace in plan:
        while True:
            removed = _quota_trim_batch(namespace, now, report.tier)
            if not removed:
                break
            report.quota_trimmed[namespace] = report.quota_trimmed.get(namespace, 0) + removed
            report.deleted += removed
            report.archived += removed
            step(removed)


def _trim_all(report: CleanupReport, plan: dict[str, int], now: datetime, step: Callable[[int], None]) -> None:
    for tier, wanted in plan.items():
        while report.trimmed[tier] < wanted:
            removed = _trim_batch(tier, wanted - report.trimmed[tier], now, report.tier)
            if not removed.chosen:
                break
            report.trimmed[tier] += removed.chosen
            report.with_successor += removed.with_successor
            report.deleted += removed.total
            report.archived += removed.archived
            step(removed.total)


def retention_cleanup(*, consolidate: bool = False, dry_run: bool = False, tier: str | None = None,
                      force_compact: bool = False, now: datetime | None = None,
                      progress: Progress | None = None) -> CleanupReport:
    """The cleanup cycle: expired memories, then budgets, feed pruning and compaction.
    ``consolidate`` first marks stale memories so they go in this cycle; ``dry_run`` counts what
    would go and changes nothing; ``tier`` limits expiry and trimming to one tier;
    ``force_compact`` compacts even below the threshold; ``progress("memories removed", done, total)`` is called
    after each batch of memories removed."""
    report, now = CleanupReport(dry_run=dry_run, tier=tier), now or timezone.now()
    archive = settings.BHGBRAIN.retention.archive_before_delete
    if dry_run:
        return _preview(report, now, archive, force_compact)
    if consolidate:
        report.consolidated = memories_consolidate(now=now)
    tracker.flush()  # accesses this process still buffers count in the trim order
    quota_plan = quota_trim_plan(now=now, tier=tier)  # expired memories do not count: they go first
    total = (Memory.objects.filter(_expired(now, tier)).count()
             + sum(sum(take.values()) for take in quota_plan.values()) + sum(budgets.trim_plan(now=now, tier=tier).values()))
    done = 0

    def step(removed: int) -> None:
        nonlocal done
        done += removed
        if progress is not None:
            progress("memories removed", done, max(total, done))

    _expire_all(report, now, archive, step)
    _quota_trim_all(report, quota_plan, now, step)
    _trim_all(report, budgets.trim_plan(now=now, tier=tier), now, step)  # after the namespaces' own trims
    compaction.deletions_tally()  # before the feed rows it counts are pruned
    report.feed_rows_pruned = feed_prune(now=now)
    usage_fold()
    report.compaction = compaction.compaction_run(force=force_compact, now=now)
    leftovers_remove()  # the work files of a backup that was killed
    logger.info("retention cleanup: %s", report.as_dict())
    return report
