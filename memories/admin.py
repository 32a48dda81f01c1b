from __future__ import annotations

from django import forms
from django.contrib import admin

from bhgbrain_site.errors import DomainError
from memories.models import AuditLog, BackupRecord, Collection, Memory, MemoryRevision


class MemoryForm(forms.ModelForm):
    """Runs the service's edit rules in the form, so a bad edit is a form error, never a 500."""

    class Meta:
        model = Memory
        exclude = ("embedding",)

    def clean(self) -> dict:
        from memories.services import EDITABLE_FIELDS, memory_edit_check

        cleaned = super().clean()
        changes = {f: cleaned[f] for f in self.changed_data if f in EDITABLE_FIELDS and f in cleaned}
        if self.instance.pk is not None and changes:
            try:
                memory_edit_check(Memory.objects.get(pk=self.instance.pk), changes)
            except DomainError as exc:
                field = exc.message.split(":", 1)[0]
                self.add_error(field if field in changes else None, exc.message)
        return cleaned


class ReadOnlyAdmin(admin.ModelAdmin):
    """Rows written only by the product (audit, revisions, backups): shown, never changed here."""

    def has_add_permission(self, request) -> bool:  # noqa: ANN001 - Django admin API
        return False

    def has_change_permission(self, request, obj=None) -> bool:  # noqa: ANN001
        return False

    def has_delete_permission(self, request, obj=None) -> bool:  # noqa: ANN001
        return False


@admin.register(Memory)
class MemoryAdmin(admin.ModelAdmin):
    form = MemoryForm
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

    def delete_model(self, request, obj) -> None:  # noqa: ANN001
        """Deleting is forgetting: audited, and every index (other processes, Qdrant) is told."""
        from memories.services import memory_forget

        memory_forget(memory_id=str(obj.pk), namespace=obj.namespace, actor=f"admin:{request.user.get_username()}")

    def delete_queryset(self, request, queryset) -> None:  # noqa: ANN001
        for memory in queryset:
            self.delete_model(request, memory)


@admin.register(Collection)
class CollectionAdmin(admin.ModelAdmin):
    """A collection's model and dimensions are locked when it is created."""

    list_display = ("namespace", "name", "embedding_model", "embedding_dimensions", "created_at")
    readonly_fields = ("namespace", "name", "embedding_model", "embedding_dimensions", "created_at")

    def has_add_permission(self, request) -> bool:  # noqa: ANN001 - collections come from the tool
        return False

    def has_delete_permission(self, request, obj=None) -> bool:  # noqa: ANN001 - deleting one deletes memories
        return False


@admin.register(AuditLog)
class AuditLogAdmin(ReadOnlyAdmin):
    list_display = ("timestamp", "operation", "namespace", "memory_id", "client_id")
    list_filter = ("operation", "namespace")


@admin.register(MemoryRevision)
class MemoryRevisionAdmin(ReadOnlyAdmin):
    list_display = ("memory_id", "revision", "updated_at", "updated_by")


@admin.register(BackupRecord)
class BackupRecordAdmin(ReadOnlyAdmin):
    list_display = ("path", "memory_count", "size_bytes", "created_at")
