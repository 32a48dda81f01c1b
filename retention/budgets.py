"""Capacity budgets (seed: 容量预算): ``retention.tier_budgets`` and ``retention.max_memories``.

Reads only: how much of each budget is used (``/health``) and what the cleanup must trim
(retention/cleanup.py does the trimming, archiving first).

- A tier's budget counts its live memories (not soft-archived ones). T0 has no budget and is
  never trimmed: foundational knowledge must always fit.
- ``max_memories`` counts every live memory, T0 included. When the store is still over it
  after the tier budgets are met, the excess is trimmed from T3, then T2, then T1 (the least
  lasting tier first); when T0 alone exceeds it nothing is trimmed and ``/health`` keeps
  reporting it.
- Memories a cleanup would expire anyway (``expires_at`` passed) do not count when planning a
  trim: the cleanup removes them first.
- Within a tier the trim order is :data:`TRIM_ORDER`: the fewest accesses first, then the
  longest unused (``last_accessed``, or ``created_at`` for a memory never read back), then the
  oldest, then the id (so the order is total and a dry run names the same memories).

The arithmetic is memories/quotas/plan.py's, shared with the namespace quotas, whose trim
(retention/cleanup.py, ``namespace_trim``) takes its memories in this same order.
"""
from __future__ import annotations

from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.models import Count, F, Q, QuerySet
from django.db.models.functions import Coalesce

from bhgbrain_site.core.contracts import TIERS
from memories.models import Memory
from memories.quotas.plan import TRIMMABLE, Limits
from memories.quotas.plan import trim_plan as plan_for

TRIM_ORDER = ("access_count", "last_use", "created_at", "id")


def _expired(now: datetime) -> Q:
    return Q(decay_eligible=True, expires_at__lt=now)


def budget_use(counts: dict[str, int]) -> dict[str, dict[str, Any]]:
    """``used`` / ``budget`` (null: no limit) / ``over`` for each tier and for the whole store
    (``total``: every live memory against ``max_memories``)."""
    retention = settings.BHGBRAIN.retention
    use: dict[str, dict[str, Any]] = {}
    for tier in TIERS:
        budget = getattr(retention.tier_budgets, tier) if tier != "T0" else None
        use[tier] = {"used": counts[tier], "budget": budget, "over": budget is not None and counts[tier] > budget}
    total = sum(counts.values())
    use["total"] = {"used": total, "budget": retention.max_memories, "over": total > retention.max_memories}
    return use


def _countable(now: datetime) -> dict[str, int]:
    """Live memories per tier that no cleanup would expire."""
    counts = dict.fromkeys(TIERS, 0)
    rows = Memory.objects.filter(archived=False).exclude(_expired(now)).values("retention_tier").annotate(n=Count("id"))
    for row in rows:
        counts[row["retention_tier"]] = row["n"]
    return counts


def trim_plan(*, now: datetime, tier: str | None = None) -> dict[str, int]:
    """How many memories of each trimmable tier the cleanup must archive and delete to meet the
    tier budgets and then ``max_memories`` (``tier``: only that tier may be trimmed)."""
    retention = settings.BHGBRAIN.retention
    limits = Limits(retention.max_memories, {t: getattr(retention.tier_budgets, t) for t in TIERS})
    eligible = tuple(t for t in TRIMMABLE if tier is None or t == tier)
    return plan_for(_countable(now), limits, eligible=eligible).take


def trim_candidates(tier: str, *, namespace: str | None = None, now: datetime | None = None) -> QuerySet[Memory]:
    """A tier's live memories in trim order (first = first to go). Never T0. ``namespace``: only
    that namespace's; ``now``: not those expired by then (they do not count against a quota)."""
    if tier not in TRIMMABLE:
        raise ValueError(f"tier {tier} is never trimmed")
    rows = Memory.objects.filter(archived=False, retention_tier=tier)
    if namespace is not None:
        rows = rows.filter(namespace=namespace)
    if now is not None:
        rows = rows.exclude(_expired(now))
    return rows.annotate(last_use=Coalesce(F("last_accessed"), F("created_at"))).order_by(*TRIM_ORDER)
