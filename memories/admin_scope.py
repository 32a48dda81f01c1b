"""What the admin modules share to honour curators' namespaces (memories.curators).

Not an interface itself: the apps' ``admin`` modules import it.
"""
from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest

from memories.curators import Namespaces, curator_namespaces, may_curate, within


def request_namespaces(request: HttpRequest) -> Namespaces:
    return curator_namespaces(request.user)


def actor(request: HttpRequest) -> str:
    return f"admin:{request.user.get_username()}"


class NamespaceScoped:
    """A ModelAdmin mixin: rows outside the curator's namespaces do not exist for them (lists,
    filters, counts, actions, change pages: 404), and nothing can be written into them."""

    namespace_field = "namespace"

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return within(super().get_queryset(request), request_namespaces(request), self.namespace_field)  # type: ignore[misc]

    def check_namespace(self, request: HttpRequest, namespace: str) -> None:
        if not may_curate(request_namespaces(request), namespace):
            raise PermissionDenied(f"you do not curate namespace {namespace!r}")

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        self.check_namespace(request, getattr(obj, self.namespace_field))
        super().save_model(request, obj, form, change)  # type: ignore[misc]


class AllNamespacesOnly:
    """A ModelAdmin mixin for rows that span namespaces (backups, tokens, scheduled jobs): only
    curators of every namespace see them."""

    def _unscoped(self, request: HttpRequest) -> bool:
        return request_namespaces(request) is None

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self._unscoped(request) and super().has_module_permission(request)  # type: ignore[misc]

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._unscoped(request) and super().has_view_permission(request, obj)  # type: ignore[misc]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._unscoped(request) and super().has_change_permission(request, obj)  # type: ignore[misc]

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        return self._unscoped(request) and super().has_add_permission(request, *args)  # type: ignore[misc]

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self._unscoped(request) and super().has_delete_permission(request, obj)  # type: ignore[misc]
