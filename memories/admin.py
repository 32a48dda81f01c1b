from __future__ import annotations

from django.contrib import admin

from memories.models import AuditLog, BackupRecord, Collection, Memory, MemoryRevision


@admin.register(Memory)
class MemoryAdmin(admin.ModelAdmin):
    list_display = ("summary", "namespace", "collection", "type", "retention_tier", "expires_at", "access_count", "vector_synced")
    list_filter = ("retention_tier", "type", "source", "archived", "vector_synced", "namespace")
    search_fields = ("summary", "content", "id")
    readonly_fields = ("id", "namespace", "summary", "checksum", "source", "expires_at", "decay_eligible", "review_due",
                       "created_at", "updated_at", "access_count", "last_accessed", "last_operation", "merged_from",
                       "vector_synced", "device_id", "embedding_model", "archived", "stale")
    exclude = ("embedding",)

    def save_model(self, request, obj, form, change) -> None:  # noqa: ANN001 - Django admin API
        """Edits go through the service: re-normalised, re-embedded, re-indexed, audited."""
        from memories.services import EDITABLE_FIELDS, memory_edit

        if not change:
            raise PermissionError("create memories with the remember tool")
        changes = {field: form.cleaned_data[field] for field in form.changed_data if field in EDITABLE_FIELDS}
        if changes:
            memory_edit(memory_id=str(obj.pk), changes=changes, actor=f"admin:{request.user.get_username()}")

    def has_add_permission(self, request) -> bool:  # noqa: ANN001
        return False


@admin.register(Collection)
class CollectionAdmin(admin.ModelAdmin):
    list_display = ("namespace", "name", "embedding_model", "embedding_dimensions", "created_at")


@admin.register(AuditLog)
class AuditLogAdmin(admin.ModelAdmin):
    list_display = ("timestamp", "operation", "namespace", "memory_id", "client_id")
    list_filter = ("operation", "namespace")

    def has_change_permission(self, request, obj=None) -> bool:  # noqa: ANN001 - audit is append-only
        return False


admin.site.register(MemoryRevision)
admin.site.register(BackupRecord)
