from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import date
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils import timezone
from unfold.admin import ModelAdmin

from bhgbrain_site.core.admin_base import ReadOnlyAdmin
from bhgbrain_site.core.contracts import TIERS
from bhgbrain_site.core.errors import DomainError
from memories.admin.scope import AllNamespacesOnly, ListExport, NamespaceScoped, request_namespaces
from memories.curation.namespaces import Namespaces
from memories.curation.queues import QUEUES
from memories.models import NamespaceQuota
from retention.archive import archive_export, archive_restore, archived_to_dict
from retention.dashboard import Dashboard, dashboard_snapshot
from retention.models import ArchivedMemory, BackupRecord


@admin.register(ArchivedMemory)
class ArchivedMemoryAdmin(ListExport, NamespaceScoped, ModelAdmin):
    """Read-only: archived memories change only by being restored (the action below). The list
    downloads as JSON Lines or CSV (ListExport: the filters and search as they are)."""

    export_name = "archive"

    list_display = ("summary", "namespace", "collection", "tier", "expired_at", "restored_at")
    list_filter = ("tier", "namespace", ("restored_at", admin.EmptyFieldListFilter))
    search_fields = ("summary", "content", "memory_id")
    exclude = ("embedding",)
    actions = ("restore",)

    def has_add_permission(self, request) -> bool:  # noqa: ANN001 - Django admin API
        return False

    def has_change_permission(self, request, obj=None) -> bool:  # noqa: ANN001
        return False

    def export_rows(self, rows: QuerySet[ArchivedMemory], namespaces: Namespaces) -> Iterator[dict[str, Any]]:
        return archive_export(rows=rows, namespaces=namespaces)

    def export_columns(self) -> list[str]:
        return list(archived_to_dict(ArchivedMemory()))

    @admin.action(description="Restore the selected memories (same id, tier T2)")
    def restore(self, request, queryset) -> None:  # noqa: ANN001
        restored = 0
        for item in queryset.filter(restored_at__isnull=True):
            try:
                archive_restore(memory_id=str(item.memory_id), namespace=item.namespace,
                                actor=f"admin:{request.user.get_username()}")
                restored += 1
            except DomainError as exc:
                self.message_user(request, f"{item.summary}: {exc.message}", messages.WARNING)
        self.message_user(request, f"Restored {restored} memor{'y' if restored == 1 else 'ies'}.")


@admin.register(BackupRecord)
class BackupRecordAdmin(AllNamespacesOnly, ReadOnlyAdmin):
    list_display = ("path", "memory_count", "size_bytes", "created_at")


def _memories_url(**filters: str) -> str:
    base = reverse("admin:memories_memory_changelist")
    return f"{base}?{urlencode(filters)}" if filters else base


def _chart(days: list[date], series: list[tuple[str, list[int], str]]) -> str:
    return json.dumps({
        "labels": [day.strftime("%d %b") for day in days],
        "datasets": [{"label": label, "data": values, "borderColor": color, "backgroundColor": color}
                     for label, values, color in series],
    })


def _tier_rows(board: Dashboard) -> list[dict[str, Any]]:
    return [{"namespace": namespace, "total": total, "url": _memories_url(namespace__exact=namespace),
             "cells": [{"count": tiers[t], "url": _memories_url(namespace__exact=namespace, retention_tier__exact=t)}
                       for t in TIERS],
             "superseded": {"count": board.superseded.get(namespace, 0),
                            "url": _memories_url(namespace__exact=namespace, fact="superseded")}}
            for namespace, tiers, total in board.namespaces]


def _quota_rows(board: Dashboard, may_edit: bool) -> list[dict[str, Any]]:
    """Each namespace with a quota: used / limit overall and per tier, its policy, where it is set,
    and (for a superuser) the link that edits it: its row, or a new row starting from the config."""
    rows, ids = [], dict(NamespaceQuota.objects.values_list("namespace", "pk")) if may_edit else {}
    for use in board.quotas:
        view = use.as_dict()
        namespace = view["namespace"]
        if not may_edit:
            edit = None
        elif namespace in ids:
            edit = reverse("admin:memories_namespacequota_change", args=[ids[namespace]])
        else:
            edit = f"{reverse('admin:memories_namespacequota_add')}?{urlencode({'namespace': namespace})}"
        rows.append({**view, "cells": [view["tiers"][t] for t in TIERS], "edit": edit,
                     "url": _memories_url(namespace__exact=namespace)})
    return rows


def _queue_cards(board: Dashboard) -> list[dict[str, Any]]:
    return [{"label": label, "count": board.queues[name], "url": _memories_url(queue=name)}
            for name, label in QUEUES.items()]


def dashboard_callback(request: HttpRequest, context: dict[str, Any]) -> dict[str, Any]:
    """UNFOLD["DASHBOARD_CALLBACK"]: the landing page's numbers (retention.dashboard), each with
    the link to the filtered list behind it."""
    board = dashboard_snapshot(namespaces=request_namespaces(request), now=timezone.now())
    activity = [("new memories", board.growth, "#6366f1"), ("accesses", board.accesses, "#10b981"),
                ("archived", board.archived, "#f59e0b")]
    context.update(
        board=board,
        tier_rows=_tier_rows(board),
        quota_rows=_quota_rows(board, may_edit=request.user.is_superuser),
        quotas_url=reverse("admin:memories_namespacequota_changelist"),
        tier_totals=[{"use": use, "url": _memories_url(retention_tier__exact=use.tier)} for use in board.tiers],
        queue_cards=_queue_cards(board),
        activity_chart=_chart(board.days, activity),
        activity_legend=[{"label": label, "color": color, "total": sum(values)} for label, values, color in activity],
        tier_chart=json.dumps({"labels": list(TIERS), "datasets": [
            {"label": "memories", "data": [use.count for use in board.tiers],
             "backgroundColor": ["#7c3aed", "#6366f1", "#0ea5e9", "#94a3b8"],
             "maxBarThickness": 48, "borderRadius": 6}]}),  # unfold's default bars are 4 px wide
        memories_url=_memories_url(),
        superseded_url=_memories_url(fact="superseded"),
        archive_url=reverse("admin:retention_archivedmemory_changelist"),
        backups_url=reverse("admin:retention_backuprecord_changelist"),
        audit_url=reverse("admin:memories_auditlog_changelist"),
    )
    return context
