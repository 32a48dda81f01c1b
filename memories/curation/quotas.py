"""Setting a namespace's quota (the admin, by a superuser; ``bhgbrain namespace quota``): a
``NamespaceQuota`` row, which every worker reads on its next write (memories/quotas/limits.py).

A change starts from the quota the namespace has now (its row, else the config's) and replaces
only the values it names; a reset deletes the row, so the config applies again. Both are audited
(QUOTA_SET / QUOTA_RESET, with the quota before and after).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import transaction
from django.utils import timezone

from bhgbrain_site.core.contracts import TIERS, is_namespace
from bhgbrain_site.core.errors import InvalidInput
from memories import funnel
from memories.models import NamespaceQuota
from memories.quotas.limits import BUDGET_FIELDS, configured, from_row, quota_for
from memories.quotas.selectors import quota_use

CHANGEABLE = ("max_memories", "tier_budgets", "on_quota_exceeded")
POLICIES = ("reject", "trim")


def _limit(name: str, value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInput(f"{name}: a whole number of at least 1, or null for no limit", field=name)
    return value


def _checked(namespace: str, changes: Mapping[str, Any]) -> None:
    if not is_namespace(namespace):
        raise InvalidInput(f"namespace: {namespace[:50]!r} is not a valid namespace", field="namespace")
    unknown = set(changes) - set(CHANGEABLE)
    if unknown:
        raise InvalidInput(f"{sorted(unknown)[0]}: not a quota setting", field=sorted(unknown)[0])
    if "on_quota_exceeded" in changes and changes["on_quota_exceeded"] not in POLICIES:
        raise InvalidInput("on_quota_exceeded: reject or trim", field="on_quota_exceeded")
    if set(changes.get("tier_budgets") or {}) - set(TIERS):
        raise InvalidInput(f"tier_budgets: tiers are {', '.join(TIERS)}", field="tier_budgets")


def _apply(row: NamespaceQuota, changes: Mapping[str, Any]) -> None:
    if "max_memories" in changes:
        row.max_memories = _limit("max_memories", changes["max_memories"])
    for tier, value in (changes.get("tier_budgets") or {}).items():
        setattr(row, BUDGET_FIELDS[tier], _limit(f"tier_budgets.{tier}", value))
    if "on_quota_exceeded" in changes:
        row.on_quota_exceeded = changes["on_quota_exceeded"]


def _row_from(namespace: str) -> NamespaceQuota:
    """The namespace's row, locked; or a new one holding the quota the config gives it."""
    row = NamespaceQuota.objects.select_for_update().filter(namespace=namespace).first()
    if row is not None:
        return row
    quota = configured(namespace)
    return NamespaceQuota(namespace=namespace, max_memories=quota.limits.max_memories, on_quota_exceeded=quota.policy,
                          **{BUDGET_FIELDS[t]: quota.limits.tier_budgets.get(t) for t in TIERS})


def namespace_quota_set(*, namespace: str, changes: Mapping[str, Any], actor: str) -> dict[str, Any]:
    """Set some of a namespace's quota (``max_memories``, ``tier_budgets`` {tier: limit},
    ``on_quota_exceeded``; a limit of None: no limit), the rest kept; audited. Returns the quota
    and the namespace's use."""
    _checked(namespace, changes)
    now = timezone.now()
    with transaction.atomic():
        before = quota_for(namespace).as_dict()
        row = _row_from(namespace)
        _apply(row, changes)
        row.updated_at, row.updated_by = now, actor
        row.save()
        funnel.record_audit(operation="QUOTA_SET", actor=actor, namespace=namespace, at=now,
                            details={"before": before, "after": from_row(row).as_dict()})
    return quota_use(namespace=namespace)


def namespace_quota_reset(*, namespace: str, actor: str) -> dict[str, Any]:
    """Drop the namespace's own setting: the config's quota applies again; audited when there
    was one. Returns the quota and the namespace's use."""
    _checked(namespace, {})
    with transaction.atomic():
        row = NamespaceQuota.objects.select_for_update().filter(namespace=namespace).first()
        if row is not None:
            before = from_row(row).as_dict()
            row.delete()
            funnel.record_audit(operation="QUOTA_RESET", actor=actor, namespace=namespace,
                                details={"before": before, "after": configured(namespace).as_dict()})
    return quota_use(namespace=namespace)
