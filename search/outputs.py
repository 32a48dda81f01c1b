"""The search app's result models (recall, search, handoff): MCP ``outputSchema`` and OpenAPI."""
from __future__ import annotations

from typing import Literal

from bhgbrain_site.core.contracts import EventStatus, MemoryTypeName, Tier
from bhgbrain_site.core.outputs import Output, Stamp, TagList


class Turn(Output):
    """A neighbouring message of a thread."""

    id: str
    speaker: str | None
    occurred_at: Stamp | None
    content: str
    message_id: str | None


class Context(Output):
    before: list[Turn]
    after: list[Turn]


class Hit(Output):
    """One memory found; the thread fields only for a message, the event fields only for an event."""

    id: str
    namespace: str
    collection: str
    content: str
    summary: str
    type: MemoryTypeName
    tags: TagList
    category: str | None
    importance: float
    score: float
    semantic_score: float | None
    fulltext_score: float | None
    retention_tier: Tier
    expires_at: Stamp | None
    expiring_soon: bool
    created_at: Stamp
    last_accessed: Stamp | None
    device_id: str | None
    thread: str | None = None
    speaker: str | None = None
    occurred_at: Stamp | None = None
    message_id: str | None = None
    status: EventStatus | None = None
    event_at: Stamp | None = None
    inactive: Literal["cancelled", "expired"] | None = None
    # facts over time (search/temporal.py): the validity [valid_from, valid_until) and the successor
    valid_from: Stamp
    valid_until: Stamp | None
    superseded_by: str | None
    key: str | None  # the fact key (a namespace-scoped slot), if the memory has one
    current: bool  # not superseded
    context: Context | None = None  # with_context, for a message of a thread
    context_truncated: bool | None = None  # the context was dropped to fit the response
    content_truncated: bool | None = None  # the content is the summary, to fit the response


class Degraded(Output):
    """An index being rebuilt from the database (no snapshot) that this answer went around."""

    index: Literal["vector", "text"]
    path: str  # what answered instead: "database full-text", "exact scan of the vectors loaded so far"
    state: Literal["queued", "loading", "done", "failed", "stopped"]
    rows_loaded: int
    rows_total: int
    elapsed_s: float
    paused_s: float = 0.0  # how long the rebuild has given way to searches answered around it


class SearchMeta(Output):
    skipped: str | None = None  # gate: why the query was taken for small talk
    expanded_with_thread_turns: int | None = None  # gate: a follow-up borrowed this many turns
    degraded: list[Degraded] | None = None  # answered while an index is rebuilt in the background


class SearchResults(Output):
    """recall and search: best first."""

    results: list[Hit]
    truncated: bool | None = None  # results were left out to fit defaults.max_response_chars
    meta: SearchMeta | None = None


class HandoffSections(Output):
    """How many lines of each section the pack holds."""

    profile: int
    last_turns: int
    open_items: int
    topics: int
    preferences: int


class HandoffPack(Output):
    namespace: str
    thread: str | None
    content: str
    chars: int
    max_chars: int
    sections: HandoffSections
