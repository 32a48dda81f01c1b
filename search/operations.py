"""The search app's operations (tools recall and search; the inject block) and memory://inject."""
from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from django.conf import settings
from pydantic import AfterValidator, BeforeValidator, Field, WithJsonSchema

from bhgbrain_site.core.calls import CallContext
from bhgbrain_site.core.contracts import CONTEXT_TURNS_MAX, MemoryTypeName
from bhgbrain_site.core.inputs import CollectionName, Input, Namespace, Query, Tags, ThreadId
from bhgbrain_site.registry import PromptMessages, operation, prompt, resource
from search import inject, prompts, services
from search.handoff import handoff_pack
from search.outputs import HandoffPack, SearchResults
from search.temporal import TimeScope, end_of_day, in_utc

WithContext = Field(default=0, ge=0, le=CONTEXT_TURNS_MAX)
# ISO 8601: a bare date is the end of that day (UTC), a time without a zone is UTC
AsOf = Annotated[datetime, Field(strict=False), BeforeValidator(end_of_day), AfterValidator(in_utc), WithJsonSchema({
    "type": "string", "description": "ISO 8601 date or date-time: the facts valid then (a bare date: the end of "
    "that day, UTC; a time without a zone: UTC)", "examples": ["2026-03-01", "2026-03-01T12:00:00Z"]})]


def _scope(params: RecallParams | SearchParams) -> TimeScope:
    """Which versions of facts the search answers with (search/temporal.py)."""
    return TimeScope(as_of=params.as_of, include_history=params.include_history)


class RecallParams(Input):
    query: Query
    namespace: Namespace | None = None
    collection: CollectionName | None = None
    type: MemoryTypeName | None = None
    tags: Tags | None = None
    limit: int | None = Field(default=None, ge=1, le=20)
    min_score: float | None = Field(default=None, ge=0.0, le=1.0)
    with_context: int = WithContext
    gate: bool = False
    thread: ThreadId | None = None
    include_inactive: bool = False
    as_of: AsOf | None = None
    include_history: bool = False


@operation("recall", RecallParams, title="Recall by meaning", output=SearchResults)
def recall(params: RecallParams, ctx: CallContext) -> dict[str, Any]:
    """Recall the memories most relevant to a query by meaning (semantic search), across
    every collection of the namespace unless one is given. Only results whose calibrated
    similarity reaches min_score (default 0.6) are returned; optional type and tags
    (any-match) filters. Returned memories count as accessed (sliding expiry, promotion).
    with_context (0-5): each message of a thread comes with that many turns before and after.
    gate: small talk ("thanks!", "ok", "哈哈") returns nothing, with meta.skipped; a short
    follow-up in `thread` borrows its last turns. Cancelled events and past plans are left out
    unless include_inactive. Only current facts unless as_of (ISO 8601 date or date-time: the
    versions valid then) or include_history (each result followed by its older versions)."""
    defaults = settings.BHGBRAIN.defaults
    return services.recall_run(
        query=params.query, namespace=params.namespace or defaults.namespace, collection=params.collection,
        memory_type=params.type, tags=params.tags, limit=params.limit or defaults.recall_limit,
        min_score=defaults.min_score if params.min_score is None else params.min_score,
        gate=params.gate, thread=params.thread, with_context=params.with_context,
        include_inactive=params.include_inactive, scope=_scope(params),
    )


class SearchParams(Input):
    query: Query
    namespace: Namespace | None = None
    collection: CollectionName | None = None
    mode: Literal["semantic", "fulltext", "hybrid"] = "hybrid"
    limit: int = Field(default=10, ge=1, le=50)
    with_context: int = WithContext
    as_of: AsOf | None = None
    include_history: bool = False


@operation("search", SearchParams, title="Search memories", output=SearchResults)
def search(params: SearchParams, ctx: CallContext) -> dict[str, Any]:
    """Search memories by hybrid (default: BM25 full-text fused with semantic similarity),
    fulltext or semantic mode, up to 50 results, optionally within one collection. Works in
    any language (Chinese is segmented). Returned memories count as accessed. with_context
    (0-5): each message of a thread comes with that many turns before and after. Cancelled
    events and past plans are returned with `inactive` set. Only current facts unless as_of (ISO
    8601 date or date-time: the versions valid then) or include_history (each result followed by
    its older versions, newest first); a superseded fact never ranks above its successor."""
    return services.search_run(query=params.query, namespace=params.namespace or settings.BHGBRAIN.defaults.namespace,
                               collection=params.collection, mode=params.mode, limit=params.limit,
                               with_context=params.with_context, scope=_scope(params))


class InjectParams(Input):
    namespace: Namespace | None = None
    query: Query | None = None
    gate: bool = False
    thread: ThreadId | None = None
    include_inactive: bool = False


@operation("search.inject", InjectParams, tool=False)
def inject_block(params: InjectParams, ctx: CallContext) -> dict[str, Any]:
    """The session inject block: categories first, then the most useful memories (for the
    query when one is given), within the configured budget; included memories count as accessed.
    gate: a small-talk query adds no memories (meta.skipped)."""
    return inject.build_inject(namespace=params.namespace or settings.BHGBRAIN.defaults.namespace, query=params.query,
                               gate=params.gate, thread=params.thread, include_inactive=params.include_inactive)


class HandoffParams(Input):
    namespace: Namespace | None = None
    thread: ThreadId | None = None
    max_chars: int | None = Field(default=None, ge=200, le=100_000)


@operation("handoff", HandoffParams, title="Hand-off pack", output=HandoffPack)
def handoff(params: HandoffParams, ctx: CallContext) -> dict[str, Any]:
    """A hand-off pack to start a fresh session with: the namespace's profile categories, the
    thread's last turns verbatim, open items (planned events), recent topics and stated
    preferences, in at most max_chars (default auto_inject.handoff_max_chars, 1500), no section
    cut mid-sentence. Deterministic; reads only."""
    return handoff_pack(namespace=params.namespace or settings.BHGBRAIN.defaults.namespace, thread=params.thread,
                        max_chars=params.max_chars)


resource("memory://inject", "Session inject",
         "Budgeted context block: categories, then the most useful memories (?namespace=&query=&gate=&thread=)",
         operation="search.inject")
resource("memory://handoff", "Hand-off pack",
         "Profile, last turns, open items, topics and preferences for a new session (?namespace=&thread=)",
         operation="handoff")


class SessionStartArgs(Input):
    namespace: Namespace | None = Field(default=None, description="whose context (default: yours)")
    thread: ThreadId | None = Field(default=None, description="the conversation to pick up: its last turns and open items")
    query: Query | None = Field(default=None, description="what this session is about: the memories most useful for it")


@prompt("session-start", SessionStartArgs, title="Start a session with my context",
        completes={"namespace": "namespace", "thread": "thread"})
def session_start_prompt(params: SessionStartArgs, ctx: CallContext) -> PromptMessages:
    """The standing context for a new session: profile categories, then the memories most useful
    for the query; with a thread, its hand-off (last turns, open items, topics, preferences)."""
    namespace = params.namespace or settings.BHGBRAIN.defaults.namespace
    return [("user", prompts.session_start(namespace=namespace, thread=params.thread, query=params.query))]
