from __future__ import annotations

from django import forms
from django.contrib import admin, messages

from mcp_bridge.models import ApiToken
from mcp_bridge.tokens import token_create


class ApiTokenForm(forms.ModelForm):
    namespaces = forms.CharField(help_text="comma-separated namespaces, e.g. alice,project/alpha")

    class Meta:
        model = ApiToken
        fields = ("name", "namespaces", "read_only", "revoked")

    def clean_namespaces(self) -> list[str]:
        value = self.cleaned_data["namespaces"]
        items = value if isinstance(value, list) else str(value).strip("[]").replace('"', "").split(",")
        return [n.strip() for n in items if n.strip()]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    form = ApiTokenForm
    list_display = ("name", "prefix", "namespaces", "read_only", "revoked", "created_at", "last_used_at")
    list_filter = ("read_only", "revoked")

    def save_model(self, request, obj, form, change) -> None:  # noqa: ANN001 - Django admin API
        """New tokens go through the service: hashed storage, the value shown once."""
        if change:
            super().save_model(request, obj, form, change)
            return
        row, plain = token_create(name=obj.name, namespaces=obj.namespaces, read_only=obj.read_only)
        obj.pk = row.pk
        messages.warning(request, f"Token created. Copy it now, it is not stored: {plain}")
