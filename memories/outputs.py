"""The memories app's result models: the shape of each successful tool result (MCP
``outputSchema``) and REST response (OpenAPI), declared on the operations in operations.py."""
from __future__ import annotations

from typing import Literal

from pydantic import RootModel

from bhgbrain_site.core.contracts import EventStatus, MemoryTypeName, Tier
from bhgbrain_site.core.outputs import Output, Stamp, TagList


class Remembered(Output):
    """remember: ADD (new), UPDATE (merged into a near-duplicate) or NOOP (already stored; its id)."""

    id: str
    summary: str
    type: MemoryTypeName
    operation: Literal["ADD", "UPDATE", "NOOP"]
    created_at: Stamp
    retention_tier: Tier
    expires_at: Stamp | None
    merged_with_id: str | None = None  # only for UPDATE
    valid_from: Stamp | None = None  # from when the fact holds
    key: str | None = None  # its fact key, normalised
    current: bool = True  # False: a late arrival, stored straight into its key's history
    superseded_by: str | None = None  # only when not current
    superseded: list[str] | None = None  # only when this write closed memories (the key's previous version, …)


class AppendedMessage(Output):
    id: str
    operation: Literal["ADD", "NOOP"]
    message_id: str | None


class ThreadAppended(Output):
    thread: str
    results: list[AppendedMessage]  # in the order the messages were given
    added: int
    noop: int


class EventView(Output):
    id: str
    namespace: str
    summary: str
    status: EventStatus | None
    event_at: Stamp | None
    valid_until: Stamp | None
    inactive: Literal["cancelled", "expired"] | None  # why it no longer counts; None while current


class Forgotten(Output):
    deleted: Literal[True]
    id: str


class Tagged(Output):
    id: str
    tags: TagList  # every tag the memory now has


class CollectionInfo(Output):
    name: str
    count: int  # live memories


class CollectionList(Output):
    """collections list."""

    collections: list[CollectionInfo]


class CollectionCreated(Output):
    """collections create."""

    ok: Literal[True]
    namespace: str
    name: str


class CollectionDeleted(CollectionCreated):
    """collections delete."""

    deleted_memory_count: int


class CollectionsResult(RootModel[CollectionList | CollectionCreated | CollectionDeleted]):
    """collections: the list, or what create / delete did (by action)."""


class BootstrapQuestions(Output):
    section: int
    title: str
    questions: list[str]
    collection: str
    tier: Tier


class BootstrapNext(Output):
    """start: the first incomplete section."""

    complete: Literal[False]
    sections_complete: int
    next: BootstrapQuestions


class BootstrapDone(Output):
    """start: every section answered."""

    complete: Literal[True]
    sections_complete: int
    memories_created: int


class BootstrapSubmittedNext(BootstrapNext):
    """submit: the section's answers stored; the next section."""

    section: int
    memories_created: int
    duplicates_skipped: int


class BootstrapSubmittedDone(BootstrapDone):
    """submit: the last section stored; the interview is complete."""

    section: int
    duplicates_skipped: int


class BootstrapSectionStatus(Output):
    section: int
    title: str
    status: Literal["pending", "complete"]
    memory_count: int


class BootstrapStatus(Output):
    """status: progress per section."""

    namespace: str
    sections: list[BootstrapSectionStatus]
    complete: bool


class BootstrapReset(Output):
    """reset: the section is pending again; its memories are forgotten."""

    section: int
    status: Literal["pending"]
    memories_forgotten: int


class BootstrapResult(RootModel[BootstrapNext | BootstrapDone | BootstrapSubmittedNext | BootstrapSubmittedDone
                                | BootstrapStatus | BootstrapReset]):
    """bootstrap: by action (start, submit, status, reset)."""


class ImportPreview(Output):
    content: str  # the first 200 characters
    collection: str
    type: MemoryTypeName
    tier: Tier
    tags: TagList
    section: str | None  # the profile heading it came from


class Imported(Output):
    dry_run: bool
    format: Literal["profile", "freeform"]
    collections: list[str]
    sections_processed: int
    memories_created: int
    duplicates_skipped: int
    previews: list[ImportPreview] | None = None  # only with dry_run


class Repaired(Output):
    collections_scanned: int
    points_scanned: int
    already_in_sqlite: int
    skipped_no_content: int
    skipped_other_device: int
    recovered: int
    errors: int
    dry_run: bool


class Supersession(Output):
    """Who superseded a version, why and when (its SUPERSEDE audit row)."""

    by: str  # the caller's client id
    reason: Literal["explicit", "key", "dedup"] | None
    at: Stamp
    late: bool  # a late arrival: stored straight into its key's history


class HistoryVersion(Output):
    id: str
    collection: str
    summary: str
    content: str
    tags: TagList
    retention_tier: Tier
    created_at: Stamp
    valid_from: Stamp  # the version holds from valid_from (inclusive) …
    valid_until: Stamp | None  # … until valid_until (exclusive); null: open
    superseded_by: str | None
    key: str | None
    current: bool
    superseded: Supersession | None  # null while current (or superseded before the audit said why)


class MemoryHistory(Output):
    """memory://{id}/history: every version of the fact, oldest first."""

    id: str  # the memory asked about
    namespace: str
    key: str | None
    current_id: str | None  # the current version (null: every version is superseded or gone)
    versions: list[HistoryVersion]
