"""MemoryAdmin's pages beside the list: the review queue and the merges review.

- ``review/`` (``admin:memories_memory_review``): tab ``review``, T1 memories whose review date
  has passed (confirm: the tier's rule resets review date and expiry; demote: to T2; archive),
  and tab ``stale``, the consolidation candidates (keep: clear ``stale``, renew the expiry;
  archive). The queues are memories/curation/queues.py's, the dashboard's numbers.
- ``merges/`` (``admin:memories_memory_merges``): memories semantic dedup merged into, each with
  the word diff from what it said before the merge to what it says now, and "Undo merge".

Every decision is a POST (CSRF) of one memory id, looked up in the admin's queryset (the
curator's namespaces only: another namespace's id is "not found"), then one service call.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone

from bhgbrain_site.core.errors import DomainError
from memories.admin.scope import actor, request_namespaces
from memories.curation.console import console
from memories.curation.edits import memory_keep, memory_review_confirm, memory_set_tier
from memories.curation.merges import memory_undo_merge, merges_for_review
from memories.curation.queues import QUEUES, queue_condition
from memories.models import Memory
from memories.selectors import parse_memory_id

PAGE_ROWS = 100  # memories a tab shows (the list, ?queue=, has them all)
DEMOTE_TIER = "T2"
TABS = {"review": ("retention_tier", "review_due"), "stale": ("expires_at", "last_accessed")}  # tab: ordering
DECISIONS = {"review": ("confirm", "demote", "archive"), "stale": ("keep", "archive")}
Decide = Callable[[Memory, str], object]


def _decisions(archive: Any) -> dict[str, tuple[Decide, str]]:
    """decision → (service call, what the message says was done)."""
    table: dict[str, tuple[Decide, str]] = {
        "confirm": (lambda m, who: memory_review_confirm(memory_id=str(m.pk), actor=who, namespace=m.namespace),
                    "Confirmed: next review a TTL away"),
        "demote": (lambda m, who: memory_set_tier(memory_id=str(m.pk), tier=DEMOTE_TIER, actor=who, namespace=m.namespace),
                   f"Demoted to {DEMOTE_TIER}"),
        "keep": (lambda m, who: memory_keep(memory_id=str(m.pk), actor=who, namespace=m.namespace),
                 "Kept: no longer stale, expiry renewed"),
    }
    if archive is not None:
        table["archive"] = (lambda m, who: archive(memory_id=str(m.pk), actor=who, namespace=m.namespace),
                            "Archived (restorable from the archive)")
    return table


class ConsolePages:
    """A MemoryAdmin mixin adding the review queue and the merges review."""

    def get_urls(self) -> list[Any]:
        wrap = self.admin_site.admin_view  # type: ignore[attr-defined]
        return [path("review/", wrap(self.review_view), name="memories_memory_review"),
                path("merges/", wrap(self.merges_view), name="memories_memory_merges"),
                *super().get_urls()]  # type: ignore[misc]

    def _page(self, request: HttpRequest, template: str, **context: Any) -> TemplateResponse:
        base = {**self.admin_site.each_context(request), "opts": Memory._meta,  # type: ignore[attr-defined]
                "can_change": self.has_change_permission(request)}  # type: ignore[attr-defined]
        return TemplateResponse(request, template, {**base, **context})

    def _posted_memory(self, request: HttpRequest) -> Memory | None:
        """The memory a decision names, if the curator may see it (else a "not found" message)."""
        if not self.has_change_permission(request):  # type: ignore[attr-defined]
            raise PermissionDenied
        try:
            pk = parse_memory_id(request.POST.get("memory_id", ""))
        except DomainError as exc:
            messages.error(request, exc.message)
            return None
        memory = self.get_queryset(request).filter(pk=pk, archived=False).defer("embedding").first()  # type: ignore[attr-defined]
        if memory is None:
            messages.error(request, f"Memory {pk} not found.")
            return None
        self.check_namespace(request, memory.namespace)  # type: ignore[attr-defined]
        return memory

    # ----------------------------------------------------------------------- review queue

    def review_view(self, request: HttpRequest) -> HttpResponse:
        """T1 memories due for review and consolidation candidates, each with its decisions."""
        tab = request.GET.get("tab") if request.GET.get("tab") in TABS else "review"
        if request.method == "POST":
            self._review_decide(request, tab)
            return HttpResponseRedirect(f"{reverse('admin:memories_memory_review')}?tab={tab}")
        now = timezone.now()
        scoped = self.get_queryset(request).filter(archived=False)  # type: ignore[attr-defined]
        counts = scoped.aggregate(**{name: Count("pk", filter=queue_condition(name, now)) for name in TABS})
        rows = scoped.filter(queue_condition(tab, now)).defer("embedding").order_by(*TABS[tab], "pk")[:PAGE_ROWS]
        list_url = f"{reverse('admin:memories_memory_changelist')}?queue={tab}"
        decisions = [d for d in DECISIONS[tab] if d in _decisions(console.archive)]
        return self._page(request, "admin/memories/memory/review.html", title="Review queue", tab=tab, rows=list(rows),
                          tabs=[(name, QUEUES[name], counts[name]) for name in TABS], total=counts[tab],
                          decisions=decisions, list_url=list_url, page_rows=PAGE_ROWS)

    def _review_decide(self, request: HttpRequest, tab: str) -> None:
        decision = request.POST.get("decision", "")
        table = _decisions(console.archive)
        if decision not in DECISIONS[tab] or decision not in table:
            messages.error(request, f"Unknown decision {decision[:20]!r}.")
            return
        memory = self._posted_memory(request)
        if memory is None:
            return
        call, done = table[decision]
        try:
            call(memory, actor(request))
        except DomainError as exc:
            messages.error(request, f"«{memory.summary[:60]}»: {exc.message}")
            return
        messages.success(request, f"«{memory.summary[:60]}»: {done}.")

    # ----------------------------------------------------------------------- merges

    def merges_view(self, request: HttpRequest) -> HttpResponse:
        """Memories dedup merged into: the diff, and undo."""
        if request.method == "POST":
            memory = self._posted_memory(request)
            if memory is not None:
                self._undo(request, memory)
            return HttpResponseRedirect(reverse("admin:memories_memory_merges"))
        reviews = merges_for_review(namespaces=request_namespaces(request), limit=PAGE_ROWS)
        return self._page(request, "admin/memories/memory/merges.html", title="Merged by deduplication",
                          reviews=reviews, page_rows=PAGE_ROWS)

    def _undo(self, request: HttpRequest, memory: Memory) -> None:
        try:
            restored = memory_undo_merge(memory_id=str(memory.pk), actor=actor(request), namespace=memory.namespace)
        except DomainError as exc:
            messages.error(request, f"«{memory.summary[:60]}»: {exc.message}")
            return
        messages.success(request, f"Merge undone: the memory says «{restored.summary[:60]}» again.")
