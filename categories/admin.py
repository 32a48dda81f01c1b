from __future__ import annotations

from django.contrib import admin
from unfold.admin import ModelAdmin, TabularInline

from categories.models import Category, CategoryRevision
from categories.services import category_delete, category_set
from memories.admin.scope import NamespaceScoped


class RevisionInline(TabularInline):
    model = CategoryRevision
    extra = 0
    readonly_fields = ("revision", "content", "updated_at", "updated_by")
    can_delete = False


@admin.register(Category)
class CategoryAdmin(NamespaceScoped, ModelAdmin):
    list_display = ("name", "namespace", "slot", "revision", "updated_at")
    list_filter = ("slot", "namespace")
    search_fields = ("name", "content")
    readonly_fields = ("revision", "updated_at")
    inlines = [RevisionInline]

    def get_readonly_fields(self, request, obj=None) -> tuple[str, ...]:  # noqa: ANN001 - Django admin API
        """A category is identified by (namespace, name): fixed once it exists."""
        return (*self.readonly_fields, "namespace", "name") if obj is not None else self.readonly_fields

    def delete_model(self, request, obj) -> None:  # noqa: ANN001
        category_delete(namespace=obj.namespace, name=obj.name, actor=f"admin:{request.user.get_username()}")

    def delete_queryset(self, request, queryset) -> None:  # noqa: ANN001
        for category in queryset:
            self.delete_model(request, category)

    def save_model(self, request, obj, form, change) -> None:  # noqa: ANN001 - Django admin API
        """Edits go through the service, so they get a revision and an audit row."""
        self.check_namespace(request, obj.namespace)
        category_set(namespace=obj.namespace, name=obj.name, slot=obj.slot, content=obj.content,
                     actor=f"admin:{request.user.get_username()}")
