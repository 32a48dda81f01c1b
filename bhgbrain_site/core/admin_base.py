"""What every app's admin shares (the admin modules themselves are interfaces, imported by no one)."""
from __future__ import annotations

from django.http import HttpRequest
from unfold.admin import ModelAdmin


class ReadOnlyAdmin(ModelAdmin):
    """Rows written only by the product (audit, revisions, backups): shown, never changed here."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False
