"""Namespace quotas in the console: a superuser sets a namespace's quota (a NamespaceQuota row,
memories/curation/quotas.py); other staff with the view permission see the rows of the
namespaces they curate, read-only. Deleting a row returns the namespace to the config's quota.

The dashboard's "Namespace quotas" card (templates/admin/index.html) links each namespace here:
to its row, or to the add form filled with the quota the config gives it (``?namespace=``).
"""
from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from unfold.admin import ModelAdmin

from bhgbrain_site.core.contracts import TIERS, is_namespace
from memories.admin.scope import NamespaceScoped, actor
from memories.curation.quotas import namespace_quota_reset, namespace_quota_set
from memories.models import NamespaceQuota
from memories.quotas.limits import BUDGET_FIELDS, configured
from memories.quotas.selectors import quota_use

LIMIT_FIELDS = ("max_memories", *BUDGET_FIELDS.values())


class NamespaceQuotaForm(forms.ModelForm):
    class Meta:
        model = NamespaceQuota
        fields = ("namespace", *LIMIT_FIELDS, "on_quota_exceeded")
        help_texts = {name: "empty: no limit" for name in LIMIT_FIELDS}

    def clean_namespace(self) -> str:
        namespace = self.cleaned_data["namespace"]
        if not is_namespace(namespace):
            raise forms.ValidationError("letters, digits, / and -, at most 200 characters")
        return namespace

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        for name in LIMIT_FIELDS:
            if cleaned.get(name) == 0:
                self.add_error(name, "at least 1 (empty: no limit)")
        return cleaned

    def changes(self) -> dict[str, Any]:
        """The form's values as the service takes them."""
        data = self.cleaned_data
        return {"max_memories": data.get("max_memories"), "on_quota_exceeded": data["on_quota_exceeded"],
                "tier_budgets": {tier: data.get(column) for tier, column in BUDGET_FIELDS.items()}}


@admin.register(NamespaceQuota)
class NamespaceQuotaAdmin(NamespaceScoped, ModelAdmin):
    form = NamespaceQuotaForm
    list_display = ("namespace", "max_memories", *BUDGET_FIELDS.values(), "on_quota_exceeded", "use", "updated_by",
                    "updated_at")
    search_fields = ("namespace",)
    readonly_fields = ("use", "updated_by", "updated_at")

    @admin.display(description="memories held (limit)")
    def use(self, obj: NamespaceQuota) -> str:
        held = quota_use(namespace=obj.namespace)
        tiers = ", ".join(f"{t} {held['tiers'][t]['used']}" for t in TIERS)
        return f"{held['total']['used']} ({held['total']['limit'] or 'no limit'}): {tiers}"

    # Only a superuser changes a quota: a curator may not raise the limit of a namespace they fill.
    def has_add_permission(self, request: HttpRequest) -> bool:
        return request.user.is_superuser

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.is_superuser

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        return (*self.readonly_fields, "namespace") if obj is not None else self.readonly_fields

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        """``?namespace=`` (the dashboard's link): the form starts from the quota the config gives it."""
        namespace = request.GET.get("namespace", "")
        if not is_namespace(namespace):
            return super().get_changeform_initial_data(request)
        quota = configured(namespace)
        return {"namespace": namespace, "max_memories": quota.limits.max_memories, "on_quota_exceeded": quota.policy,
                **{column: quota.limits.tier_budgets.get(tier) for tier, column in BUDGET_FIELDS.items()}}

    def save_model(self, request: HttpRequest, obj: NamespaceQuota, form: NamespaceQuotaForm, change: bool) -> None:
        """Through the service (audited); the row it wrote is the one the admin shows next."""
        self.check_namespace(request, obj.namespace)
        namespace_quota_set(namespace=obj.namespace, changes=form.changes(), actor=actor(request))
        obj.pk = NamespaceQuota.objects.get(namespace=obj.namespace).pk

    def delete_model(self, request: HttpRequest, obj: NamespaceQuota) -> None:
        namespace_quota_reset(namespace=obj.namespace, actor=actor(request))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[NamespaceQuota]) -> None:
        for namespace in queryset.values_list("namespace", flat=True):
            namespace_quota_reset(namespace=namespace, actor=actor(request))
