"""What the admin modules share: honouring curators' namespaces (memories.curation.namespaces), the services
the upper apps lend the console (memories.curation.console), and streamed exports.

Not an interface itself: the apps' ``admin`` modules import it.
"""
from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Iterator
from typing import Any

from asgiref.sync import sync_to_async
from django.contrib.admin.options import IncorrectLookupParameters
from django.core.exceptions import PermissionDenied
from django.core.handlers.asgi import ASGIRequest
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest, StreamingHttpResponse
from django.urls import path
from django.utils import timezone

from memories.admin.exports import FORMATS, csv_lines, export_record, jsonl_lines
from memories.curation.namespaces import Namespaces, curator_namespaces, may_curate, within


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

    def get_object(self, request: HttpRequest, object_id: str, from_field: str | None = None) -> Any:
        """Another namespace's row (or a missing one) is a 404, not the stock admin's redirect."""
        obj = super().get_object(request, object_id, from_field)  # type: ignore[misc]
        if obj is None:
            raise Http404("no such row among the namespaces you curate")
        return obj

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


# --------------------------------------------------------------------------- exports

EXPORT_BATCH = 500  # lines sent in one piece


def _batches(lines: Iterator[str]) -> Iterator[bytes]:
    while batch := "".join(itertools.islice(lines, EXPORT_BATCH)):
        yield batch.encode()


async def _async_batches(batches: Iterator[bytes]) -> AsyncIterator[bytes]:
    """Under ASGI Django would read a sync iterator into a list before sending it: pull each
    batch in the request's sync thread (its database connection) instead."""
    pull = sync_to_async(lambda: next(batches, None), thread_sensitive=True)
    while (batch := await pull()) is not None:
        yield batch


def export_response(request: HttpRequest, lines: Iterator[str], *, fmt: str, name: str) -> StreamingHttpResponse:
    """A streamed download of ``lines`` (``fmt``: jsonl or csv), named ``<name>-<time>.<fmt>``."""
    batches = _batches(lines)
    body: Iterator[bytes] | AsyncIterator[bytes] = _async_batches(batches) if isinstance(request, ASGIRequest) else batches
    response = StreamingHttpResponse(body, content_type=FORMATS[fmt])
    stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
    response["Content-Disposition"] = f'attachment; filename="{name}-{stamp}.{fmt}"'
    response["Cache-Control"] = "no-store"
    return response


class ListExport:
    """A ModelAdmin mixin: ``<list>/export/<fmt>/`` (URL name ``<app>_<model>_export``; fmt jsonl
    or csv) streams the list as it is filtered, searched and ordered now (the same query string),
    within the curator's namespaces, through the app's export selector; each export is audited.
    The list's buttons: templates/admin/bhg_list_tools.html (``list_before_template``)."""

    export_name = "export"  # the file's name and the audit's "what"
    list_before_template = "admin/bhg_list_tools.html"

    def export_rows(self, rows: QuerySet, namespaces: Namespaces) -> Iterator[dict[str, Any]]:
        raise NotImplementedError

    def export_columns(self) -> list[str]:
        raise NotImplementedError

    def get_urls(self) -> list[Any]:
        opts = self.model._meta  # type: ignore[attr-defined]
        view = self.admin_site.admin_view(self.export_view)  # type: ignore[attr-defined]
        return [path("export/<str:fmt>/", view, name=f"{opts.app_label}_{opts.model_name}_export"),
                *super().get_urls()]  # type: ignore[misc]

    def export_view(self, request: HttpRequest, fmt: str) -> HttpResponse:
        if fmt not in FORMATS:
            raise Http404(f"no export format {fmt!r}")
        if not self.has_view_or_change_permission(request):  # type: ignore[attr-defined]
            raise PermissionDenied
        try:
            rows = self.get_changelist_instance(request).queryset  # type: ignore[attr-defined]
        except IncorrectLookupParameters:
            return HttpResponseBadRequest("unknown filter in the query string")
        namespaces = request_namespaces(request)
        export_record(what=self.export_name, fmt=fmt, namespaces=namespaces, query=request.GET.urlencode(),
                      actor=actor(request))
        items = self.export_rows(rows, namespaces)
        lines = jsonl_lines(items) if fmt == "jsonl" else csv_lines(items, self.export_columns())
        return export_response(request, lines, fmt=fmt, name=self.export_name)
