"""The quota check of every write that adds memories, made by the write funnel before the insert,
inside the write's transaction.

For each namespace the new memories go to: its quota (memories/quotas/limits.py); if it has a
limit, the namespace is locked for the rest of the transaction (PostgreSQL: a transaction-level
advisory lock per namespace; SQLite: ``BEGIN IMMEDIATE`` already serialises every writer), its
count read (memories/quotas/usage.py), and then:

- the new memories fit: nothing more (the usual case: two small reads);
- they do not: memories that expired and wait for the cleanup do not count; if they still do not
  fit, policy ``reject`` raises ``QUOTA_EXCEEDED`` naming the namespace, the limit and the count,
  and policy ``trim`` hands the plan (memories/quotas/plan.py) to the trimmer the retention app
  registered: the cleanup's least-used-first trim, limited to this namespace, archiving each
  memory first. A limit no trim can meet (T0 is never trimmed; a batch larger than the limit)
  rejects under either policy.

Holding the lock from the count to the commit means two writers (threads or worker processes)
can never both pass the check at limit - 1. An update of an existing memory (a dedup merge, an
edit, a revision) adds nothing and is not checked.
"""
from __future__ import annotations

import zlib
from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Protocol

from django.db import connection, transaction

from bhgbrain_site.core.errors import QuotaExceeded
from memories.models import Memory
from memories.quotas import usage
from memories.quotas.limits import Quota, quota_for
from memories.quotas.plan import Breach, Limits, first_breach, trim_plan

LOCK_CLASS = 0x42484751  # "BHGQ": the first key of the quota's two-key advisory locks (the second: the namespace)


class Trimmer(Protocol):
    def __call__(self, *, namespace: str, take: Mapping[str, int], actor: str, at: datetime) -> int:
        """Archive and delete ``take[tier]`` memories of each tier of ``namespace`` in the trim
        order (never expired ones: they do not count); how many went."""


_trimmer: Trimmer | None = None


def register_trimmer(trimmer: Trimmer) -> None:
    """The trim policy's trimmer (retention registers the cleanup's, from its ``AppConfig.ready``);
    without one, ``trim`` rejects like ``reject``."""
    global _trimmer
    _trimmer = trimmer


def lock_namespace(namespace: str) -> None:
    """Hold ``namespace``'s quota lock until the transaction ends (PostgreSQL; a no-op on SQLite,
    whose write transactions are serialised)."""
    if not connection.in_atomic_block:
        raise RuntimeError("the quota check runs inside the write's transaction")
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            key = zlib.crc32(namespace.encode()) - 2**31  # a signed 32-bit key, the same in every process
            cursor.execute("SELECT pg_advisory_xact_lock(%s::integer, %s::integer)", [LOCK_CLASS, key])


def fold_crowded(more_than: int = 1) -> int:
    """Fold each namespace's usage rows into one when it has more than ``more_than`` (PostgreSQL;
    memories/quotas/usage.py), each under the namespace's quota lock; how many were folded. Every
    reader of the counts sums a namespace's rows: a million of them (a restored store, a day of
    writes before the nightly cleanup) cost 120-145 ms a read at 1M (/health, the dashboard, the
    full-text answered while the text index is rebuilt)."""
    folded = usage.crowded(more_than)
    for namespace in folded:
        with transaction.atomic():
            lock_namespace(namespace)
            usage.fold(namespace)
    return len(folded)


def _exceeded(quota: Quota, held: Mapping[str, int], breach: Breach, reason: str = "") -> QuotaExceeded:
    count = held[breach.tier] if breach.tier else sum(held.values())
    return QuotaExceeded(namespace=quota.namespace, limit=breach.limit, count=count, tier=breach.tier, reason=reason)


def _relevant(quota: Quota, incoming: Mapping[str, int]) -> Limits:
    """The limits a write answers to: ``max_memories`` and the budgets of the tiers it adds to (a
    tier already over a lowered budget does not block a write to another tier)."""
    budgets = {tier: budget if incoming.get(tier) else None for tier, budget in quota.limits.tier_budgets.items()}
    return Limits(quota.limits.max_memories, budgets)


def _admit(quota: Quota, incoming: Mapping[str, int], actor: str, at: datetime) -> None:
    lock_namespace(quota.namespace)
    limits = _relevant(quota, incoming)
    held = usage.counts(quota.namespace)
    if trim_plan(held, limits, incoming=incoming).fits:
        return
    expired = usage.expired_counts(quota.namespace, at)
    held = {tier: count - expired[tier] for tier, count in held.items()}
    plan = trim_plan(held, limits, incoming=incoming)
    if plan.fits:
        return
    breach = first_breach(held, incoming, limits) or plan.blocked or Breach(None, limits.max_memories or 0)
    if quota.policy != "trim" or _trimmer is None:
        raise _exceeded(quota, held, breach)
    if plan.blocked is not None:
        raise _exceeded(quota, held, plan.blocked, "trimming cannot make room: T0 is never trimmed, "
                                                   "and a write never trims what it adds")
    removed = _trimmer(namespace=quota.namespace, take=plan.take, actor=actor, at=at)
    if removed < sum(plan.take.values()):
        raise _exceeded(quota, held, breach, "too few memories could be trimmed")


def room_check(namespace: str, incoming: Mapping[str, int], *, at: datetime, what: str) -> None:
    """Before a write of many memories one by one (an import): raise QuotaExceeded, so that none of
    them is stored, when ``incoming`` (new memories per tier) cannot fit ``namespace`` — under
    ``reject`` when it is over, under ``trim`` when trimming cannot make room. Each insert is still
    checked (a concurrent writer may take the room in between); this only keeps an import from
    stopping half-way at the limit."""
    quota = quota_for(namespace)
    if not quota.limited or not any(incoming.values()):
        return
    limits = _relevant(quota, incoming)
    expired = usage.expired_counts(namespace, at)
    held = {tier: count - expired[tier] for tier, count in usage.counts(namespace).items()}
    plan = trim_plan(held, limits, incoming=incoming)
    if plan.fits:
        return
    breach = first_breach(held, incoming, limits) or plan.blocked or Breach(None, limits.max_memories or 0)
    if quota.policy != "trim" or _trimmer is None:
        raise _exceeded(quota, held, breach, f"{what} would add {sum(incoming.values())}; nothing was stored")
    if plan.blocked is not None:
        raise _exceeded(quota, held, plan.blocked, f"{what} would add {sum(incoming.values())} and trimming cannot "
                                                   "make room (T0 is never trimmed); nothing was stored")


def admit(memories: Sequence[Memory], *, actor: str, at: datetime) -> None:
    """Check (and under policy ``trim`` make room for) ``memories`` about to be inserted; raise
    QuotaExceeded when a namespace cannot take them. Call inside the write's transaction."""
    by_namespace: dict[str, Counter[str]] = {}
    for memory in memories:
        if not memory.archived:
            by_namespace.setdefault(memory.namespace, Counter())[memory.retention_tier] += 1
    for namespace in sorted(by_namespace):  # one order for every writer: locks taken in turn never cross
        quota = quota_for(namespace)
        if quota.limited:
            _admit(quota, by_namespace[namespace], actor, at)
