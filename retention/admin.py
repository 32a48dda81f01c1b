from __future__ import annotations

from django.contrib import admin, messages

from bhgbrain_site.admin_base import ReadOnlyAdmin
from bhgbrain_site.errors import DomainError
from retention.archive import archive_restore
from retention.models import ArchivedMemory, BackupRecord


@admin.register(ArchivedMemory)
class ArchivedMemoryAdmin(admin.ModelAdmin):
    """Read-only: archived memories change only by being restored (the action below)."""

    list_display = ("summary", "namespace", "collection", "tier", "expired_at", "restored_at")
    list_filter = ("tier", "namespace", ("restored_at", admin.EmptyFieldListFilter))
    search_fields = ("summary", "content", "memory_id")
    exclude = ("embedding",)
    actions = ("restore",)

    def has_add_permission(self, request) -> bool:  # noqa: ANN001 - Django admin API
        return False

    def has_change_permission(self, request, obj=None) -> bool:  # noqa: ANN001
        return False

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
class BackupRecordAdmin(ReadOnlyAdmin):
    list_display = ("path", "memory_count", "size_bytes", "created_at")
