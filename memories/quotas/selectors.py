"""Reads of the quotas: each namespace's limits against what it holds (``/health``, the admin's
dashboard and quota pages, ``bhgbrain namespace quota``).

``used`` is what the namespace holds now, expired memories the cleanup has not archived yet
included (memories/quotas/usage.py); a write does not count those, so a namespace shown at its
limit may still take a memory.
"""
from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any

from bhgbrain_site.core.contracts import TIERS
from memories.quotas import usage
from memories.quotas.limits import Quota, named_namespaces, quotas_for

Namespaces = Collection[str] | None  # None: every namespace


def _state(used: int, limit: int | None) -> str:
    if limit is None:
        return "ok"
    return "over" if used > limit else "at_limit" if used == limit else "ok"


@dataclass(frozen=True)
class QuotaUse:
    """A namespace's quota and the memories it holds per tier."""

    quota: Quota
    held: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.held.values())

    @property
    def state(self) -> str:
        """``over`` when some limit is exceeded, ``at_limit`` when one is reached, else ``ok``."""
        limits = self.quota.limits
        states = {_state(self.total, limits.max_memories),
                  *(_state(self.held[t], limits.tier_budgets.get(t)) for t in TIERS)}
        return "over" if "over" in states else "at_limit" if "at_limit" in states else "ok"

    def as_dict(self) -> dict[str, Any]:
        limits = self.quota.limits
        return {
            "namespace": self.quota.namespace, "on_quota_exceeded": self.quota.policy, "source": self.quota.source,
            "state": self.state, "total": {"used": self.total, "limit": limits.max_memories},
            "tiers": {t: {"used": self.held[t], "limit": limits.tier_budgets.get(t)} for t in TIERS},
        }


def quota_uses(*, namespaces: Collection[str] | None = None, limited_only: bool = False) -> list[QuotaUse]:
    """The quota use of every namespace that holds memories or has a quota of its own, within
    ``namespaces``, by name (``limited_only``: those with some limit)."""
    held = usage.counts_of(namespaces)
    names = set(held) | named_namespaces()
    names = sorted(names if namespaces is None else names & set(namespaces))
    quotas = quotas_for(names)
    uses = [QuotaUse(quotas[n], held.get(n) or usage.zero()) for n in names]
    return [use for use in uses if use.quota.limited or not limited_only]


def quota_use(*, namespace: str) -> dict[str, Any]:
    """One namespace's quota and use (any namespace: one without memories has its default quota)."""
    quota = quotas_for([namespace])[namespace]
    return QuotaUse(quota, usage.counts_of([namespace]).get(namespace) or usage.zero()).as_dict()


def quotas_summary(uses: Iterable[QuotaUse]) -> dict[str, Any]:
    """``/health``'s quotas section: how many namespaces have a limit, reach one, exceed one; and each
    of them (``namespaces``: :func:`visible_quotas` keeps only what the caller may see)."""
    uses = list(uses)
    return {
        "namespaces_limited": len(uses),
        "at_limit": sum(use.state == "at_limit" for use in uses),
        "over": sum(use.state == "over" for use in uses),
        "namespaces": {use.quota.namespace: use.as_dict() for use in uses},
    }


def visible_quotas(section: dict[str, Any], namespaces: Namespaces, *, anonymous: bool) -> dict[str, Any]:
    """The quotas section as a caller may see it: an anonymous caller (``/health`` without a token
    where one is required) gets the counts only, a scoped token its own namespaces."""
    if anonymous:
        return {key: value for key, value in section.items() if key != "namespaces"}
    if namespaces is None:
        return section
    return {**section, "namespaces": {ns: use for ns, use in section["namespaces"].items() if ns in namespaces}}
