"""A namespace's quota: its limits and what a write past them does.

Where it comes from, first match wins:

1. a ``NamespaceQuota`` row (set in the admin by a superuser, or with ``bhgbrain namespace
   quota``): read from the database on every check, so every worker applies a change at once;
2. the config's ``namespaces.<ns>``;
3. the config's ``namespace_defaults`` (by default: no limit, so nothing is checked).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from django.conf import settings
from django.db import connection

from bhgbrain_site.core.config import NamespaceQuotaConfig
from bhgbrain_site.core.contracts import TIERS
from memories.models import NamespaceQuota
from memories.quotas.plan import Limits

Source = Literal["admin", "config", "default"]
Policy = Literal["reject", "trim"]
BUDGET_FIELDS = {tier: f"{tier.lower()}_budget" for tier in TIERS}  # NamespaceQuota's column of each tier


@dataclass(frozen=True)
class Quota:
    namespace: str
    limits: Limits
    policy: Policy
    source: Source

    @property
    def limited(self) -> bool:
        return not self.limits.unlimited

    def as_dict(self) -> dict[str, object]:
        return {"namespace": self.namespace, "max_memories": self.limits.max_memories,
                "tier_budgets": dict(self.limits.tier_budgets), "on_quota_exceeded": self.policy, "source": self.source}


def _from_config(namespace: str, entry: NamespaceQuotaConfig, source: Source) -> Quota:
    budgets = {tier: getattr(entry.tier_budgets, tier) for tier in TIERS}
    return Quota(namespace, Limits(entry.max_memories, budgets), entry.on_quota_exceeded, source)


def from_row(row: NamespaceQuota) -> Quota:
    budgets = {tier: getattr(row, column) for tier, column in BUDGET_FIELDS.items()}
    return Quota(row.namespace, Limits(row.max_memories, budgets), row.on_quota_exceeded, "admin")  # type: ignore[arg-type]


def configured(namespace: str) -> Quota:
    """The quota the config file gives ``namespace`` (its entry, else ``namespace_defaults``)."""
    config = settings.BHGBRAIN
    entry = config.namespaces.get(namespace)
    if entry is not None:
        return _from_config(namespace, entry, "config")
    return _from_config(namespace, config.namespace_defaults, "default")


_ROW = ("SELECT max_memories, t0_budget, t1_budget, t2_budget, t3_budget, on_quota_exceeded "
        "FROM namespace_quotas WHERE namespace = %s")


def quota_for(namespace: str) -> Quota:
    """The quota that applies to ``namespace`` now: one indexed read of ``namespace_quotas``, in
    plain SQL (every insert pays for it: the ORM's query building costs 3 times the read itself)."""
    with connection.cursor() as cursor:
        cursor.execute(_ROW, [namespace])
        row = cursor.fetchone()
    if row is None:
        return configured(namespace)
    budgets = dict(zip(TIERS, row[1:5], strict=True))
    return Quota(namespace, Limits(row[0], budgets), row[5], "admin")


def quotas_for(namespaces: list[str]) -> dict[str, Quota]:
    """:func:`quota_for` of many namespaces with one read."""
    rows = {row.namespace: from_row(row) for row in NamespaceQuota.objects.filter(namespace__in=namespaces)}
    return {namespace: rows.get(namespace) or configured(namespace) for namespace in namespaces}


def named_namespaces() -> set[str]:
    """Namespaces with a quota of their own (a row, or an entry in the config)."""
    return set(settings.BHGBRAIN.namespaces) | set(NamespaceQuota.objects.values_list("namespace", flat=True))
