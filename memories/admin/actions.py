"""The memory list's curation actions (memories/admin/model_admins.py lists them): each calls one service per
selected memory and reports, in admin messages, how many changed, how many were left as they
were and which failed and why (the DomainError's message).

The selected rows come from the admin's queryset, which is already limited to the curator's
namespaces (memories/admin/scope.py), so ids of another namespace posted by hand select
nothing; each memory's namespace is checked again and passed to the service.

Actions that need a parameter (tier, tags, collection, the successor of "Supersede") and "Forget" show an intermediate page
(``admin/memories/memory/action_parameters.html``) that posts back to the list with the same
selection, like Django's delete confirmation: a plain CSRF-protected form.
"""
from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.db.models import QuerySet
from django.http import HttpRequest
from django.template.response import TemplateResponse
from unfold.widgets import UnfoldAdminSelectWidget, UnfoldAdminTextInputWidget

from bhgbrain_site.core.errors import DomainError
from memories.admin.scope import actor
from memories.curation.console import console
from memories.curation.edits import (
    UNPIN_TIER,
    check_tags,
    memory_extend_expiry,
    memory_keep,
    memory_move,
    memory_reembed,
    memory_review_confirm,
    memory_set_tier,
    memory_unpin,
)
from memories.models import Memory, RetentionTier
from memories.selectors import parse_memory_id
from memories.services import memory_forget, memory_tag
from memories.temporal import supersede

APPLY = "bhg_apply"  # the intermediate page's submit: the parameters are in this POST
CHUNK = 500  # selected memories loaded at a time
FAILURES_LISTED = 10
Call = Callable[[Memory], object]  # a service call for one memory; False: nothing to change


def _plural(count: int) -> str:
    return f"{count} memor{'y' if count == 1 else 'ies'}"


def _report(model_admin: Any, request: HttpRequest, verb: str, unchanged_reason: str, counts: tuple[int, int],
            failed: list[str]) -> None:
    changed, unchanged = counts
    if changed or not (unchanged or failed):
        model_admin.message_user(request, f"{verb} {_plural(changed)}.", messages.SUCCESS)
    if unchanged:
        model_admin.message_user(request, f"{_plural(unchanged)} left as they were: {unchanged_reason}.", messages.INFO)
    if failed:
        more = f" … and {len(failed) - FAILURES_LISTED} more" if len(failed) > FAILURES_LISTED else ""
        model_admin.message_user(request, f"{_plural(len(failed))} failed: " + "; ".join(failed[:FAILURES_LISTED]) + more,
                                 messages.ERROR)


def run_each(model_admin: Any, request: HttpRequest, queryset: QuerySet[Memory], *, verb: str, call: Call,
             unchanged_reason: str = "nothing to change") -> None:
    """``call`` for every selected memory, each in its own transaction (one failure stops
    nothing), then one message per outcome."""
    ids = list(queryset.values_list("pk", flat=True))
    changed = unchanged = 0
    failed: list[str] = []
    for start in range(0, len(ids), CHUNK):
        for memory in model_admin.get_queryset(request).filter(pk__in=ids[start:start + CHUNK]).defer("embedding"):
            model_admin.check_namespace(request, memory.namespace)
            try:
                result = call(memory)
            except DomainError as exc:
                failed.append(f"«{memory.summary[:60]}» ({memory.pk}): {exc.message}")
                continue
            changed, unchanged = (changed, unchanged + 1) if result is False else (changed + 1, unchanged)
    _report(model_admin, request, verb, unchanged_reason, (changed, unchanged), failed)


# --------------------------------------------------------------------------- parameters


def parse_tags(raw: str) -> list[str]:
    """Tags typed as text: comma-separated (a JSON list is read too), blanks and repeats dropped;
    then the tools' rules (memories.curation.edits.check_tags) as a form error."""
    text = raw.strip()
    if text.startswith("["):
        try:
            items = json.loads(text)
        except ValueError:
            raise forms.ValidationError("tags: not a valid JSON list") from None
        items = [str(t).strip() for t in items] if isinstance(items, list) else [text]
    else:
        items = [t.strip() for t in text.replace("\n", ",").split(",")]
    tags = list(dict.fromkeys(t for t in items if t))
    try:
        check_tags(tags)
    except DomainError as exc:
        raise forms.ValidationError(exc.message) from None
    return tags


class TagsField(forms.Field):
    """Tags as one comma-separated text input ("release, team-core"), not raw JSON; validated
    with the tools' rules. Unchanged when the same tags are typed differently."""

    widget = UnfoldAdminTextInputWidget

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("help_text", 'comma-separated, e.g. "release, team-core": letters, digits and "-"')
        super().__init__(**kwargs)
        self.widget.attrs.setdefault("placeholder", "release, team-core")

    def prepare_value(self, value: Any) -> Any:
        return ", ".join(value) if isinstance(value, list) else value

    def to_python(self, value: Any) -> list[str]:
        if isinstance(value, list):
            return value
        return parse_tags(str(value or ""))

    def has_changed(self, initial: Any, data: Any) -> bool:
        try:
            return self.to_python(initial or []) != self.to_python(data)
        except forms.ValidationError:
            return True


class TierForm(forms.Form):
    tier = forms.ChoiceField(choices=RetentionTier.choices, widget=UnfoldAdminSelectWidget)


class TagsForm(forms.Form):
    tags = TagsField()

    def clean_tags(self) -> list[str]:
        if not self.cleaned_data["tags"]:
            raise forms.ValidationError("name at least one tag")
        return self.cleaned_data["tags"]


class CollectionForm(forms.Form):
    collection = forms.CharField(max_length=100, widget=UnfoldAdminTextInputWidget(attrs={"placeholder": "general"}),
                                 help_text='letters, digits and "-"; created on first use')


class ConfirmForm(forms.Form):
    """No parameter: the page only asks to confirm."""


def _parameters(model_admin: Any, request: HttpRequest, queryset: QuerySet[Memory], form_class: type[forms.Form],
                *, title: str, submit: str) -> forms.Form | TemplateResponse:
    """The action's valid form (its parameters posted from the intermediate page), or that page."""
    form = form_class(request.POST if APPLY in request.POST else None)
    if form.is_bound and form.is_valid():
        return form
    context = {
        **model_admin.admin_site.each_context(request), "opts": Memory._meta, "title": title, "form": form,
        "submit_label": submit, "apply": APPLY, "action": request.POST.get("action", ""),
        "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
        "select_across": request.POST.get("select_across", "0"), "count": queryset.count(),
        "sample": list(queryset.defer("embedding")[:20]), "list_url": request.get_full_path(),
    }
    return TemplateResponse(request, "admin/memories/memory/action_parameters.html", context)


# --------------------------------------------------------------------------- the actions

Service = Callable[..., object]  # memory_id=, actor=, namespace= (keyword-only), maybe more


def _each(service: Service, request: HttpRequest, **parameters: Any) -> Call:
    """``service`` for one memory, in its namespace, by the curator."""
    return lambda m: service(memory_id=str(m.pk), actor=actor(request), namespace=m.namespace, **parameters)


def _with_page(model_admin: Any, request: HttpRequest, queryset: QuerySet[Memory], form_class: type[forms.Form],
               *, title: str, submit: str, then: Callable[[dict[str, Any]], None]) -> TemplateResponse | None:
    """The intermediate page until its form is posted valid, then ``then(cleaned_data)``."""
    form = _parameters(model_admin, request, queryset, form_class, title=title, submit=submit)
    if isinstance(form, TemplateResponse):
        return form
    then(form.cleaned_data)
    return None


@admin.action(description="Set tier…", permissions=["change"])
def set_tier(model_admin: Any, request: HttpRequest, queryset: QuerySet[Memory]) -> TemplateResponse | None:
    def then(data: dict[str, Any]) -> None:
        run_each(model_admin, request, queryset, verb=f"Moved to {data['tier']}:", unchanged_reason=f"already {data['tier']}",
                 call=_each(memory_set_tier, request, tier=data["tier"]))

    return _with_page(model_admin, request, queryset, TierForm, title="Set the tier of the selected memories",
                      submit="Set tier", then=then)


@admin.action(description="Pin (T0: never expires)", permissions=["change"])
def pin(model_admin: Any, request: HttpRequest, queryset: QuerySet[Memory]) -> None:
    run_each(model_admin, request, queryset, verb="Pinned (T0):", unchanged_reason="already pinned",
             call=_each(memory_set_tier, request, tier="T0"))


@admin.action(description=f"Unpin (T0 → {UNPIN_TIER}, reviewed yearly)", permissions=["change"])
def unpin(model_admin: Any, request: HttpRequest, queryset: QuerySet[Memory]) -> None:
    run_each(model_admin, request, queryset, verb=f"Unpinned (now {UNPIN_TIER}):", unchanged_reason="not pinned",
             call=_each(memory_unpin, request))


@admin.action(description="Extend expiry by the tier's TTL", permissions=["change"])
def extend_expiry(model_admin: Any, request: HttpRequest, queryset: QuerySet[Memory]) -> None:
    run_each(model_admin, request, queryset, verb="Extended the expiry of", call=_each(memory_extend_expiry, request))


@admin.action(description="Confirm review (T1: next review a TTL away)", permissions=["change"])
def confirm_review(model_admin: Any, request: HttpRequest, queryset: QuerySet[Memory]) -> None:
    run_each(model_admin, request, queryset, verb="Confirmed", call=_each(memory_review_confirm, request))


@admin.action(description="Keep (clear stale, renew expiry)", permissions=["change"])
def keep(model_admin: Any, request: HttpRequest, queryset: QuerySet[Memory]) -> None:
    run_each(model_admin, request, queryset, verb="Kept", call=_each(memory_keep, request))


@admin.action(description="Archive now (restorable from the archive)", permissions=["change"])
def archive_now(model_admin: Any, request: HttpRequest, queryset: QuerySet[Memory]) -> None:
    if console.archive is None:  # not offered then (MemoryAdmin.get_actions); a stale form posting it changes nothing
        model_admin.message_user(request, "Archiving is not available.", messages.ERROR)
        return
    run_each(model_admin, request, queryset, verb="Archived", call=_each(console.archive, request))


@admin.action(description="Forget (delete permanently)…", permissions=["delete"])
def forget(model_admin: Any, request: HttpRequest, queryset: QuerySet[Memory]) -> TemplateResponse | None:
    return _with_page(model_admin, request, queryset, ConfirmForm, title="Forget the selected memories for good",
                      submit="Forget", then=lambda _data: run_each(model_admin, request, queryset, verb="Forgot",
                                                                   call=_each(memory_forget, request)))


@admin.action(description="Re-embed (recompute the vector)", permissions=["change"])
def reembed(model_admin: Any, request: HttpRequest, queryset: QuerySet[Memory]) -> None:
    run_each(model_admin, request, queryset, verb="Re-embedded", call=_each(memory_reembed, request))


def _retag(model_admin: Any, request: HttpRequest, queryset: QuerySet[Memory], *, adding: bool) -> TemplateResponse | None:
    def tag(memory: Memory, tags: list[str]) -> bool:
        before = list(memory.tags)
        after = memory_tag(memory_id=str(memory.pk), add=tags if adding else [], remove=[] if adding else tags,
                           namespace=memory.namespace, actor=actor(request))
        return after["tags"] != before

    def then(data: dict[str, Any]) -> None:
        names = ", ".join(data["tags"])
        run_each(model_admin, request, queryset, verb=f"Tagged {names}:" if adding else f"Removed {names} from",
                 unchanged_reason="they had the tags" if adding else "they did not have the tags",
                 call=lambda m: tag(m, data["tags"]))

    title = "Add tags to the selected memories" if adding else "Remove tags from the selected memories"
    return _with_page(model_admin, request, queryset, TagsForm, title=title,
                      submit="Add tags" if adding else "Remove tags", then=then)


@admin.action(description="Add tags…", permissions=["change"])
def add_tags(model_admin: Any, request: HttpRequest, queryset: QuerySet[Memory]) -> TemplateResponse | None:
    return _retag(model_admin, request, queryset, adding=True)


@admin.action(description="Remove tags…", permissions=["change"])
def remove_tags(model_admin: Any, request: HttpRequest, queryset: QuerySet[Memory]) -> TemplateResponse | None:
    return _retag(model_admin, request, queryset, adding=False)


@admin.action(description="Move to collection…", permissions=["change"])
def move_collection(model_admin: Any, request: HttpRequest, queryset: QuerySet[Memory]) -> TemplateResponse | None:
    def then(data: dict[str, Any]) -> None:
        name = data["collection"]
        run_each(model_admin, request, queryset, verb=f"Moved to {name}:", unchanged_reason=f"already in {name}",
                 call=_each(memory_move, request, collection=name))

    return _with_page(model_admin, request, queryset, CollectionForm,
                      title="Move the selected memories to another collection", submit="Move", then=then)


class SupersedeForm(forms.Form):
    """The successor of the selected memories, by id: a live memory of their namespace, among the
    namespaces the curator curates, and not one of them."""

    successor = forms.CharField(
        max_length=36, label="Superseded by (the newer memory's id)",
        widget=UnfoldAdminTextInputWidget(attrs={"placeholder": "3f2b…-…", "autocomplete": "off"}),
        help_text="the id on the newer memory's page; same namespace. The selected memories become its history: "
                  "their validity ends where it starts.")

    def __init__(self, *args: Any, candidates: QuerySet[Memory], selected: QuerySet[Memory], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.candidates, self.selected = candidates, selected

    def clean_successor(self) -> Memory:
        try:
            pk = parse_memory_id(self.cleaned_data["successor"].strip())
        except DomainError as exc:
            raise forms.ValidationError(exc.message) from None
        successor = self.candidates.filter(pk=pk).defer("embedding").first()
        if successor is None:
            raise forms.ValidationError(f"no live memory {pk} among the namespaces you curate")
        if self.selected.filter(pk=pk).exists():
            raise forms.ValidationError("a memory cannot supersede itself: name a memory you did not select")
        others = sorted(set(self.selected.exclude(namespace=successor.namespace).values_list("namespace", flat=True)))
        if others:
            raise forms.ValidationError(f"the successor is in namespace {successor.namespace!r}, the selection also in "
                                        f"{', '.join(repr(n) for n in others)}: a fact is superseded within its namespace")
        return successor


def _supersede_all(model_admin: Any, request: HttpRequest, queryset: QuerySet[Memory], successor: Memory) -> None:
    """One call for the whole selection (all or nothing), then one message."""
    older = list(queryset.values_list("pk", flat=True))
    try:
        closed = supersede(older=older, newer=successor.pk, actor=actor(request))
    except DomainError as exc:
        model_admin.message_user(request, f"Nothing superseded: {exc.message}", messages.ERROR)
        return
    _report(model_admin, request, f"Superseded by «{successor.summary[:60]}»:", "already superseded by it",
            (len(closed), len(older) - len(closed)), [])


@admin.action(description="Supersede by a newer memory…", permissions=["change"])
def supersede_by(model_admin: Any, request: HttpRequest, queryset: QuerySet[Memory]) -> TemplateResponse | None:
    """The selected memories become the history of the memory named on the intermediate page."""
    candidates = model_admin.get_queryset(request).filter(archived=False)

    def form_class(*args: Any, **kwargs: Any) -> SupersedeForm:
        return SupersedeForm(*args, candidates=candidates, selected=queryset, **kwargs)

    return _with_page(model_admin, request, queryset, form_class,  # type: ignore[arg-type]
                      title="Supersede the selected memories by a newer one", submit="Supersede",
                      then=lambda data: _supersede_all(model_admin, request, queryset, data["successor"]))


ACTIONS = (set_tier, pin, unpin, extend_expiry, confirm_review, keep, archive_now, add_tags, remove_tags,
           move_collection, supersede_by, reembed, forget)
