from __future__ import annotations

import re
from typing import Any

from django import forms
from django.contrib import admin, messages

from mcp_bridge.models import ApiToken
from mcp_bridge.tokens import token_create


_NAMESPACE = re.compile(r"^[a-zA-Z0-9/-]{1,200}$")


class ApiTokenForm(forms.ModelForm):
    namespaces = forms.CharField(help_text="comma-separated namespaces, e.g. alice,project/alpha")

    class Meta:
        model = ApiToken
        fields = ("name", "namespaces", "read_only", "revoked")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None:  # shown as typed: alice,project/alpha (not a Python list)
            self.initial["namespaces"] = ",".join(self.instance.namespaces or [])

    def clean_namespaces(self) -> list[str]:
        items = [n.strip() for n in str(self.cleaned_data["namespaces"]).split(",") if n.strip()]
        if not items:
            raise forms.ValidationError("a scoped token needs at least one namespace")
        bad = [n for n in items if not _NAMESPACE.match(n)]
        if bad:
            raise forms.ValidationError(f"{bad[0][:50]!r} is not a valid namespace (letters, digits, / and -)")
        return sorted(set(items))


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    form = ApiTokenForm
    list_display = ("name", "prefix", "namespaces", "read_only", "revoked", "created_at", "last_used_at")
    list_filter = ("read_only", "revoked")

    def get_fields(self, request, obj=None) -> list[str]:  # noqa: ANN001 - Django admin API
        fields = list(super().get_fields(request, obj))
        return fields if obj is not None else [f for f in fields if f != "revoked"]  # new tokens are live

    def save_model(self, request, obj, form, change) -> None:  # noqa: ANN001 - Django admin API
        """New tokens go through the service: hashed storage, the value shown once."""
        if change:
            super().save_model(request, obj, form, change)
            return
        row, plain = token_create(name=obj.name, namespaces=obj.namespaces, read_only=obj.read_only,
                                  actor=f"admin:{request.user.get_username()}")
        obj.pk = row.pk
        messages.warning(request, f"Token created. Copy it now, it is not stored: {plain}")
