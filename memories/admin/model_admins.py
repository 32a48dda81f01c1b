from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.views.main import ORDER_VAR
from django.contrib.auth.admin import GroupAdmin as BaseGroupAdmin
from django.contrib.auth.admin import UserAdmin as BaseUserAdmin
from django.contrib.auth.models import Group, User
from django.db.models import Case, IntegerField, Q, QuerySet, Value, When
from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html
from unfold.admin import ModelAdmin, StackedInline
from unfold.forms import AdminPasswordChangeForm, UserChangeForm, UserCreationForm

from bhgbrain_site.core.admin_base import ReadOnlyAdmin
from bhgbrain_site.core.contracts import MESSAGE_ID_MAX, is_namespace
from bhgbrain_site.core.errors import DomainError
from memories.admin.actions import ACTIONS, TagsField
from memories.admin.exports import memories_export, memory_export_columns
from memories.admin.pages import ConsolePages
from memories.admin.scope import AllNamespacesOnly, ListExport, NamespaceScoped, actor, request_namespaces
from memories.api_tokens import token_change, token_create
from memories.conversations import contexts, thread_turns
from memories.curation.console import console
from memories.curation.edits import EDITABLE_FIELDS, EVENT_FIELDS, memory_edit, memory_edit_check, memory_set_event
from memories.curation.namespaces import Namespaces, curator_scope_set, within
from memories.curation.queues import QUEUES, queue_condition
from memories.curation.timeline import FACT_FILTERS, fact_timeline
from memories.models import ApiToken, AuditLog, Collection, CuratorScope, Memory, MemoryRevision
from memories.services import memory_forget

THREAD_VIEW_MAX = 1000  # turns the admin's thread view shows
SEARCH_RANKED = 300  # hybrid search hits the list shows (best first)


class MemoryForm(forms.ModelForm):
    """Runs the service's edit rules in the form, so a bad edit is a form error, never a 500.
    Tags are typed comma-separated (TagsField), checked with the tools' rules."""

    tags = TagsField(required=False)

    class Meta:
        model = Memory
        exclude = ("embedding",)

    def clean(self) -> dict:
        cleaned = super().clean()
        changes = {f: cleaned[f] for f in self.changed_data if f in EDITABLE_FIELDS and f in cleaned}
        if self.instance.pk is not None and changes:
            try:
                memory_edit_check(Memory.objects.get(pk=self.instance.pk), changes)
            except DomainError as exc:
                self.add_error(exc.field if exc.field in changes else None, exc.message)
        return cleaned


class FactFilter(admin.SimpleListFilter):
    """Current facts, or the superseded versions kept as their history (issue 42)."""

    title = "fact"
    parameter_name = "fact"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(name, label) for name, (label, _condition) in FACT_FILTERS.items()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Memory]) -> QuerySet[Memory]:
        if self.value() in FACT_FILTERS:
            return queryset.filter(FACT_FILTERS[self.value()][1])
        return queryset


class QueueFilter(admin.SimpleListFilter):
    """The curator's queues (memories.curation.queues): the dashboard's numbers link here."""

    title = "queue"
    parameter_name = "queue"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return list(QUEUES.items())

    def queryset(self, request: HttpRequest, queryset: QuerySet[Memory]) -> QuerySet[Memory]:
        if self.value() in QUEUES:
            return queryset.filter(queue_condition(self.value(), timezone.now()))
        return queryset


def _exact_matches(queryset: QuerySet[Memory], term: str, namespaces: list[str]) -> QuerySet[Memory] | None:
    """A memory id, or a message id / thread id typed whole: those rows only (None: not one).
    The namespaces lead so the (namespace, message_id) and (namespace, thread) indexes answer."""
    if len(term) > MESSAGE_ID_MAX:
        return None
    rows = queryset.filter(Q(message_id=term) | Q(thread=term), namespace__in=namespaces)
    return rows if rows.exists() else None


def _ranked(queryset: QuerySet[Memory], ranked: list[str], term: str) -> QuerySet[Memory]:
    """The hybrid hits in rank order, then the rows the search indexes leave out by design
    (expired, awaiting the cleanup; soft-archived) whose text holds the words."""
    now = timezone.now()
    unindexed = queryset.filter(Q(archived=True) | Q(decay_eligible=True, expires_at__lte=now))
    extra = list(unindexed.filter(Q(summary__icontains=term) | Q(content__icontains=term))
                 .values_list("pk", flat=True)[:SEARCH_RANKED])
    rank = Case(*[When(pk=pk, then=Value(i)) for i, pk in enumerate(ranked)], default=Value(len(ranked)),
                output_field=IntegerField())
    return queryset.filter(pk__in=[*ranked, *extra]).annotate(search_rank=rank)


@admin.register(Memory)
class MemoryAdmin(ConsolePages, ListExport, NamespaceScoped, ModelAdmin):
    """The memory list: filters (the dashboard's queues too), the product's hybrid search, the
    curation actions (memories/admin/actions.py), the review queue and merges pages
    (memories/admin/pages.py), exports (ListExport). Edits go through the services."""

    form = MemoryForm
    actions = ACTIONS
    export_name = "memories"
    list_display = ("summary", "namespace", "collection", "type", "retention_tier", "expires_at", "access_count",
                    "vector_synced", "thread_link")
    list_filter = (QueueFilter, FactFilter, "retention_tier", "namespace", "type", "source", "last_operation", "archived",
                   "vector_synced", "status")
    search_fields = ("summary", "content")  # only used without the search app (console.search unset)
    search_help_text = "Hybrid search (words and meaning, any language), or an exact id, message id or thread"
    readonly_fields = ("id", "namespace", "summary", "checksum", "source", "expires_at", "decay_eligible", "review_due",
                       "created_at", "updated_at", "access_count", "last_accessed", "last_operation", "merged_from",
                       "vector_synced", "device_id", "embedding_model", "archived", "stale", "thread_link", "speaker",
                       "occurred_at", "message_id", "conversation_context", "valid_from", "superseded_by", "fact_key",
                       "fact_timeline")
    exclude = ("embedding", "thread")

    @admin.display(description="thread")
    def thread_link(self, obj: Memory) -> str:
        if not obj.thread:
            return "—"
        url = reverse("admin:memories_memory_thread") + "?" + urlencode({"namespace": obj.namespace, "thread": obj.thread})
        return format_html('<a href="{}">{}</a>', url, obj.thread)

    @admin.display(description="context (indexed with it)")
    def conversation_context(self, obj: Memory) -> str:
        if not obj.thread:
            return "—"
        return contexts([obj]).get(str(obj.id), "") or "—"

    @admin.display(description="timeline of this fact")
    def fact_timeline(self, obj: Memory) -> str:
        """Its versions oldest first: validity, successor, who superseded each and why."""
        if obj.pk is None:
            return "—"
        return render_to_string("admin/memories/memory/fact_timeline.html",
                                {"versions": fact_timeline(obj), "this": {"id": str(obj.pk), "key": obj.fact_key}})

    def get_urls(self) -> list[Any]:
        thread = path("thread/", self.admin_site.admin_view(self.thread_view), name="memories_memory_thread")
        return [thread, *super().get_urls()]

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        """The curation actions; "Forget…" replaces Django's bulk delete; "Archive now" only when
        the retention app lent its service."""
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        if console.archive is None:
            actions.pop("archive_now", None)
        return actions

    def get_search_results(self, request: HttpRequest, queryset: QuerySet[Memory],
                           search_term: str) -> tuple[QuerySet[Memory], bool]:
        """The product's hybrid search (search/console.py) over the namespaces the list holds as
        filtered (at most the curator's; one when filtered to one), in rank order; an exact
        memory id, message id or thread id finds those rows."""
        term = search_term.strip()
        if not term:
            return queryset, False
        try:
            return queryset.filter(pk=uuid.UUID(term)), False
        except ValueError:
            pass
        namespaces = sorted(set(queryset.order_by().values_list("namespace", flat=True).distinct()))
        exact = _exact_matches(queryset, term, namespaces)
        if exact is not None:
            return exact, False
        if console.search is None:
            return super().get_search_results(request, queryset, search_term)
        ranked = console.search(query=term, namespaces=namespaces, limit=SEARCH_RANKED) if namespaces else []
        rows = _ranked(queryset, ranked, term)
        # the list orders before it searches: rank order, unless the curator sorted by a column
        return (rows if request.GET.get(ORDER_VAR) else rows.order_by("search_rank", "-pk")), False

    def export_rows(self, rows: QuerySet[Memory], namespaces: Namespaces) -> Iterator[dict[str, Any]]:
        return memories_export(rows=rows, namespaces=namespaces)

    def export_columns(self) -> list[str]:
        return memory_export_columns()

    def thread_view(self, request: HttpRequest) -> HttpResponse:
        """A thread's transcript in order, each turn linked to its memory and shown with its context."""
        namespace, thread = request.GET.get("namespace", ""), request.GET.get("thread", "")
        self.check_namespace(request, namespace)
        turns = list(thread_turns(namespace, thread).defer("embedding")[:THREAD_VIEW_MAX])
        indexed = contexts(turns)
        rows = [{"memory": t, "context": indexed.get(str(t.id), "")} for t in turns]
        context = {**self.admin_site.each_context(request), "opts": self.model._meta, "title": f"Thread {thread}",
                   "namespace": namespace, "thread": thread, "rows": rows, "cut": len(turns) >= THREAD_VIEW_MAX}
        return TemplateResponse(request, "admin/memories/thread.html", context)

    def save_model(self, request, obj, form, change) -> None:  # noqa: ANN001 - Django admin API
        """Edits go through the services: re-normalised, re-embedded, re-indexed, audited; event
        fields through memory_set_event."""
        if not change:
            raise PermissionError("create memories with the remember tool")
        actor = f"admin:{request.user.get_username()}"
        changes = {field: form.cleaned_data[field] for field in form.changed_data if field in EDITABLE_FIELDS}
        if changes:
            memory_edit(memory_id=str(obj.pk), changes=changes, actor=actor)
        events = {field: form.cleaned_data[field] for field in form.changed_data if field in EVENT_FIELDS}
        if events:
            memory_set_event(memory_id=str(obj.pk), namespace=obj.namespace, changes=events, actor=actor)

    def has_add_permission(self, request) -> bool:  # noqa: ANN001
        return False

    def delete_model(self, request, obj) -> None:  # noqa: ANN001
        """Deleting is forgetting: audited, and every index (other processes, Qdrant) is told."""
        memory_forget(memory_id=str(obj.pk), namespace=obj.namespace, actor=f"admin:{request.user.get_username()}")

    def delete_queryset(self, request, queryset) -> None:  # noqa: ANN001
        for memory in queryset:
            self.check_namespace(request, memory.namespace)
            self.delete_model(request, memory)


@admin.register(Collection)
class CollectionAdmin(NamespaceScoped, ModelAdmin):
    """A collection's model and dimensions are locked when it is created."""

    list_display = ("namespace", "name", "embedding_model", "embedding_dimensions", "created_at")
    readonly_fields = ("namespace", "name", "embedding_model", "embedding_dimensions", "created_at")

    def has_add_permission(self, request) -> bool:  # noqa: ANN001 - collections come from the tool
        return False

    def has_delete_permission(self, request, obj=None) -> bool:  # noqa: ANN001 - deleting one deletes memories
        return False


@admin.register(AuditLog)
class AuditLogAdmin(NamespaceScoped, ReadOnlyAdmin):
    list_display = ("timestamp", "operation", "namespace", "memory_id", "client_id")
    list_filter = ("operation", "namespace")


@admin.register(MemoryRevision)
class MemoryRevisionAdmin(ReadOnlyAdmin):
    list_display = ("memory_id", "revision", "operation", "updated_at", "updated_by")
    list_filter = ("operation",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[MemoryRevision]:
        namespaces = request_namespaces(request)
        rows = super().get_queryset(request)
        return rows if namespaces is None else rows.filter(
            memory_id__in=within(Memory.objects.all(), namespaces).values("id"))



class ApiTokenForm(forms.ModelForm):
    namespaces = forms.CharField(help_text="comma-separated namespaces, e.g. alice,project/alpha")

    class Meta:
        model = ApiToken
        fields = ("name", "namespaces", "read_only", "write_rate_per_minute", "revoked")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None:  # shown as typed: alice,project/alpha (not a Python list)
            self.initial["namespaces"] = ",".join(self.instance.namespaces or [])

    def clean_namespaces(self) -> list[str]:
        items = [n.strip() for n in str(self.cleaned_data["namespaces"]).split(",") if n.strip()]
        if not items:
            raise forms.ValidationError("a scoped token needs at least one namespace")
        bad = [n for n in items if not is_namespace(n)]
        if bad:
            raise forms.ValidationError(f"{bad[0][:50]!r} is not a valid namespace (letters, digits, / and -)")
        return sorted(set(items))

    def clean_revoked(self) -> bool:
        revoked = bool(self.cleaned_data.get("revoked"))
        if self.instance.pk is not None and self.instance.revoked and not revoked:
            raise forms.ValidationError("a revoked token stays revoked; create a new one")
        return revoked


@admin.register(ApiToken)
class ApiTokenAdmin(AllNamespacesOnly, ModelAdmin):
    form = ApiTokenForm
    list_display = ("name", "prefix", "namespaces", "read_only", "write_rate_per_minute", "revoked", "created_at",
                    "last_used_at")
    list_filter = ("read_only", "revoked")

    def get_fields(self, request, obj=None) -> list[str]:  # noqa: ANN001 - Django admin API
        fields = list(super().get_fields(request, obj))
        return fields if obj is not None else [f for f in fields if f != "revoked"]  # new tokens are live

    def save_model(self, request, obj, form, change) -> None:  # noqa: ANN001 - Django admin API
        """Through the services: a new token is stored hashed and shown once; an edit is audited."""
        actor = f"admin:{request.user.get_username()}"
        if change:
            token_change(token_id=obj.pk, name=obj.name, namespaces=obj.namespaces, read_only=obj.read_only,
                         revoked=obj.revoked, actor=actor, write_rate_per_minute=obj.write_rate_per_minute)
            return
        row, plain = token_create(name=obj.name, namespaces=obj.namespaces, read_only=obj.read_only, actor=actor,
                                  write_rate_per_minute=obj.write_rate_per_minute)
        obj.pk = row.pk
        messages.warning(request, f"Token created. Copy it now, it is not stored: {plain}")


class CuratorScopeForm(forms.ModelForm):
    namespaces = forms.CharField(required=False, help_text="comma-separated namespaces this user may curate; "
                                                           "delete this row to let them curate every namespace")

    class Meta:
        model = CuratorScope
        fields = ("namespaces",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None:
            self.initial["namespaces"] = ",".join(self.instance.namespaces or [])

    def clean_namespaces(self) -> list[str]:
        items = sorted({n.strip() for n in str(self.cleaned_data["namespaces"]).split(",") if n.strip()})
        bad = [n for n in items if not is_namespace(n)]
        if bad:
            raise forms.ValidationError(f"{bad[0][:50]!r} is not a valid namespace (letters, digits, / and -)")
        return items


class CuratorScopeInline(StackedInline):
    model = CuratorScope
    form = CuratorScopeForm
    max_num = 1
    extra = 0
    verbose_name = "namespaces this user curates"
    verbose_name_plural = "curated namespaces (none: every namespace)"


admin.site.unregister(User)
admin.site.unregister(Group)


@admin.register(User)
class UserAdmin(AllNamespacesOnly, BaseUserAdmin, ModelAdmin):
    form = UserChangeForm
    add_form = UserCreationForm
    change_password_form = AdminPasswordChangeForm
    inlines = [CuratorScopeInline]

    def save_formset(self, request, form, formset, change) -> None:  # noqa: ANN001 - Django admin API
        """A curator's namespaces change through the service (audited)."""
        if formset.model is not CuratorScope:
            super().save_formset(request, form, formset, change)
            return
        formset.save(commit=False)  # what changed, for Django's change message; the service writes
        for _scope in formset.deleted_objects:
            curator_scope_set(user_id=form.instance.pk, namespaces=None, actor=actor(request))
        for scope in [*formset.new_objects, *(obj for obj, _fields in formset.changed_objects)]:
            curator_scope_set(user_id=form.instance.pk, namespaces=scope.namespaces, actor=actor(request))


@admin.register(Group)
class GroupAdmin(AllNamespacesOnly, BaseGroupAdmin, ModelAdmin):
    pass
