"""Curators: which namespaces a staff user may see and change in the admin.

A superuser, or a staff user without a :class:`~memories.models.CuratorScope`, curates every
namespace. A staff user with a scope sees only its namespaces: every list, count, action, export
and the dashboard filter by :func:`curator_namespaces`. The filtering lives here, not in the
admin, so the dashboard's selectors and the exports use the same rule.
"""
from __future__ import annotations

from collections.abc import Iterable
from typing import Any, TypeVar

from django.db import transaction
from django.db.models import Model, QuerySet
from django.utils import timezone

from bhgbrain_site.core.contracts import is_namespace
from bhgbrain_site.core.errors import InvalidInput
from memories import funnel
from memories.models import CuratorScope

M = TypeVar("M", bound=Model)
Namespaces = frozenset[str] | None  # None: every namespace

_CACHE = "_bhgbrain_curator_namespaces"


def curator_namespaces(user: Any) -> Namespaces:
    """The namespaces ``user`` may curate (None: all of them; empty: none)."""
    if not getattr(user, "is_active", False) or not getattr(user, "is_staff", False):
        return frozenset()
    if user.is_superuser:
        return None
    if not hasattr(user, _CACHE):  # once per request: the user object lives as long as it
        scope = CuratorScope.objects.filter(user=user).first()
        setattr(user, _CACHE, None if scope is None else frozenset(scope.namespaces))
    return getattr(user, _CACHE)


def within(queryset: QuerySet[M], namespaces: Namespaces, field: str = "namespace") -> QuerySet[M]:
    """``queryset`` limited to ``namespaces`` (unchanged for None)."""
    return queryset if namespaces is None else queryset.filter(**{f"{field}__in": sorted(namespaces)})


def may_curate(namespaces: Namespaces, namespace: str) -> bool:
    return namespaces is None or namespace in namespaces


def _clean(namespaces: Iterable[str]) -> list[str]:
    items = sorted({n.strip() for n in namespaces if n and n.strip()})
    bad = [n for n in items if not is_namespace(n)]
    if bad:
        raise InvalidInput(f"{bad[0][:50]!r} is not a valid namespace", field="namespaces")
    return items


def curator_scope_set(*, user_id: int, namespaces: Iterable[str] | None, actor: str) -> CuratorScope | None:
    """Limit a staff user to ``namespaces`` (None removes the limit); audited."""
    with transaction.atomic():
        if namespaces is None:
            CuratorScope.objects.filter(user_id=user_id).delete()
            scope = None
        else:
            scope, _ = CuratorScope.objects.update_or_create(user_id=user_id, defaults={"namespaces": _clean(namespaces)})
        funnel.record_audit(operation="CURATOR_SCOPE", actor=actor, namespace="*", at=timezone.now(),
                            details={"user_id": user_id, "namespaces": scope.namespaces if scope else None})
    return scope
