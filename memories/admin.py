from __future__ import annotations

from django.contrib import admin

from memories.models import AuditLog, BackupRecord, Collection, Memory, MemoryRevision


@admin.register(Memory)
class MemoryAdmin(admin.ModelAdmin):
    list_display = ("summary", "namespace", "collection", "type", "retention_tier", "expires_at", "access_count", "vector_synced")
    list_filter = ("retention_tier", "type", "source", "archived", "vector_synced", "namespace")
    search_fields = ("summary", "content", "id")
    readonly_fields = ("id", "checksum", "created_at", "updated_at", "access_count", "last_accessed", "embedding_model")
    exclude = ("embedding",)


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
