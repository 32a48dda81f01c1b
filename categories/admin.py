from __future__ import annotations

from django.contrib import admin

from categories.models import Category, CategoryRevision


class RevisionInline(admin.TabularInline):
    model = CategoryRevision
    extra = 0
    readonly_fields = ("revision", "content", "updated_at", "updated_by")
    can_delete = False


@admin.register(Category)
class CategoryAdmin(admin.ModelAdmin):
    list_display = ("name", "namespace", "slot", "revision", "updated_at")
    list_filter = ("slot", "namespace")
    search_fields = ("name", "content")
    readonly_fields = ("revision", "updated_at")
    inlines = [RevisionInline]

    def save_model(self, request, obj, form, change) -> None:  # noqa: ANN001 - Django admin API
        """Edits go through the service, so they get a revision and an audit row."""
        from categories.services import category_set

        category_set(namespace=obj.namespace, name=obj.name, slot=obj.slot, content=obj.content,
                     actor=f"admin:{request.user.get_username()}")
