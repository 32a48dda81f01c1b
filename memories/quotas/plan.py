"""What must go for memories to fit their limits: the one trim rule of the store's budgets
(retention/budgets.py, the nightly cleanup) and of a namespace's quota (the write-time check).

A tier over its budget loses its own excess; then, when the memories are still over
``max_memories``, the excess is taken from T3, then T2, then T1 (the least lasting tier first).
T0 is never trimmed. Pure arithmetic on counts: which memories go, in which order, is
``retention.budgets.trim_candidates``' (the fewest accesses first, then the longest unused).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from bhgbrain_site.core.contracts import TIERS

TRIMMABLE = ("T3", "T2", "T1")  # max_memories takes its excess in this order; never T0


@dataclass(frozen=True)
class Limits:
    """``max_memories`` and a budget per tier; None: no limit."""

    max_memories: int | None = None
    tier_budgets: Mapping[str, int | None] = field(default_factory=lambda: dict.fromkeys(TIERS))

    @property
    def unlimited(self) -> bool:
        return self.max_memories is None and all(self.tier_budgets.get(t) is None for t in TIERS)


@dataclass(frozen=True)
class Breach:
    """A limit that is or would be exceeded: ``tier`` None for ``max_memories``."""

    tier: str | None
    limit: int


@dataclass(frozen=True)
class TrimPlan:
    """How many memories of each trimmable tier must go (T1, T2, T3), and the limit that cannot be
    met by trimming at all (``blocked``: T0's budget, or incoming memories beyond a limit alone)."""

    take: dict[str, int]
    blocked: Breach | None = None

    @property
    def fits(self) -> bool:
        """Nothing to trim and nothing blocked: the memories fit as they are."""
        return self.blocked is None and not any(self.take.values())


def _over_budgets(after: Mapping[str, int], held: Mapping[str, int], limits: Limits,
                  eligible: tuple[str, ...]) -> tuple[dict[str, int], Breach | None]:
    take, blocked = dict.fromkeys(TIERS[1:], 0), None
    for tier in TIERS:
        budget = limits.tier_budgets.get(tier)
        if budget is None or after[tier] <= budget:
            continue
        if tier in eligible and after[tier] - budget <= held[tier]:
            take[tier] = after[tier] - budget
        elif blocked is None and (tier == "T0" or tier in eligible):
            blocked = Breach(tier, budget)
    return take, blocked


def trim_plan(held: Mapping[str, int], limits: Limits, *, incoming: Mapping[str, int] | None = None,
              eligible: tuple[str, ...] = TRIMMABLE) -> TrimPlan:
    """What must go of ``held`` (memories per tier) for it and ``incoming`` (memories about to be
    added, never trimmed themselves) to fit ``limits``; only ``eligible`` tiers are trimmed."""
    after = {tier: held.get(tier, 0) + (incoming or {}).get(tier, 0) for tier in TIERS}
    held = {tier: held.get(tier, 0) for tier in TIERS}
    take, blocked = _over_budgets(after, held, limits, eligible)
    if limits.max_memories is None:
        return TrimPlan(take, blocked)
    excess = sum(after.values()) - sum(take.values()) - limits.max_memories
    for tier in (t for t in TRIMMABLE if t in eligible):
        if excess <= 0:
            break
        more = min(excess, held[tier] - take[tier])
        take[tier] += more
        excess -= more
    if excess > 0 and blocked is None:
        blocked = Breach(None, limits.max_memories)
    return TrimPlan(take, blocked)


def first_breach(held: Mapping[str, int], incoming: Mapping[str, int], limits: Limits) -> Breach | None:
    """The first limit ``incoming`` would take ``held`` past (a tier's budget before ``max_memories``)."""
    for tier in TIERS:
        budget = limits.tier_budgets.get(tier)
        if incoming.get(tier) and budget is not None and held.get(tier, 0) + incoming[tier] > budget:
            return Breach(tier, budget)
    total = sum(held.values()) + sum(incoming.values())
    if limits.max_memories is not None and total > limits.max_memories:
        return Breach(None, limits.max_memories)
    return None
