"""The memories app's operations (tools remember, forget, tag, collections, bootstrap, import,
repair; reads for REST and the CLI) and the resources that read them.

Each handler parses nothing and decides nothing: the registry has validated the input and
checked the caller; the handler fills defaults and calls one service or selector.
"""
from __future__ import annotations

import dataclasses
from typing import Annotated, Any, Literal

from django.conf import settings
from pydantic import Field, model_validator

from bhgbrain_site.core.calls import CallContext
from bhgbrain_site.core.contracts import (
    CATEGORY_NAME_MAX,
    CONTENT_MAX,
    DEVICE_ID_MAX,
    IMPORT_MAX,
    SUPERSEDES_MAX,
    THREAD_BATCH_MAX,
    EventStatus,
    MemoryTypeName,
    SourceName,
    Tier,
)
from bhgbrain_site.core.errors import InvalidInput, NotFound
from bhgbrain_site.core.inputs import (
    CollectionName,
    Cursor,
    Duration,
    FactKey,
    Input,
    MemoryId,
    MessageId,
    Namespace,
    Speaker,
    Tag,
    Tags,
    ThreadId,
    Timestamp,
)
from bhgbrain_site.registry import Hints, PromptMessages, completer, operation, prompt, resource
from memories import access, completions, outputs, prompts, selectors, services
from memories.curation import edits, quotas
from memories.indexes import feed
from memories.interop import bootstrap, repair
from memories.quotas import selectors as quota_selectors
from memories.remember import RememberInput, memory_remember
from memories.remember import thread_append as append_to_thread
from memories.temporal import history


def _namespace(value: str | None) -> str:
    return value or settings.BHGBRAIN.defaults.namespace


def _always(params: Any) -> bool:
    return True


class _EventFields(Input):
    event_at: Timestamp | None = None  # when the event happens (or happened)
    valid_until: Timestamp | None = None  # after this a plan is no longer current
    status: EventStatus | None = None  # planned | done | cancelled


class _MessageFields(_EventFields):
    content: str = Field(min_length=1, max_length=CONTENT_MAX)
    type: MemoryTypeName = "semantic"
    tags: Tags = Field(default_factory=list)
    category: str | None = Field(default=None, min_length=1, max_length=CATEGORY_NAME_MAX)
    importance: float = Field(default=0.5, ge=0.0, le=1.0)
    source: SourceName = "cli"
    retention_tier: Tier | None = None
    speaker: Speaker | None = None
    occurred_at: Timestamp | None = None
    message_id: MessageId | None = None


class RememberParams(_MessageFields):
    namespace: Namespace | None = None
    collection: CollectionName | None = None
    thread: ThreadId | None = None
    # a fact's place in time (memories/temporal)
    valid_from: Timestamp | None = Field(
        default=None, description="ISO 8601: since when the fact holds (default: occurred_at, else now)")
    key: FactKey | None = Field(
        default=None, description='the fact\'s slot, e.g. "alice/home-city": the version with the latest valid_from is current')
    supersedes: MemoryId | Annotated[list[MemoryId], Field(max_length=SUPERSEDES_MAX)] | None = Field(
        default=None, description="the id (or ids) of memories this one replaces; they stay, superseded")

    @model_validator(mode="after")
    def _message_fields_need_a_thread(self) -> RememberParams:
        if self.thread is None and (self.speaker is not None or self.message_id is not None):
            raise ValueError("speaker and message_id describe a message of a thread: give thread too")
        if self.thread is not None and (self.key is not None or self.supersedes is not None):
            raise ValueError("key and supersedes describe a fact, not a message of a thread")
        return self

    def superseded_ids(self) -> tuple[str, ...]:
        if self.supersedes is None:
            return ()
        return (self.supersedes,) if isinstance(self.supersedes, str) else tuple(self.supersedes)


def _remember_input(message: _MessageFields, *, namespace: str, collection: str | None,
                    thread: str | None) -> RememberInput:
    return RememberInput(
        content=message.content, namespace=namespace, collection=collection or settings.BHGBRAIN.defaults.collection,
        type=message.type, tags=tuple(message.tags), category=message.category, importance=message.importance,
        source=message.source, retention_tier=message.retention_tier, thread=thread, speaker=message.speaker,
        occurred_at=message.occurred_at, message_id=message.message_id, event_at=message.event_at,
        valid_until=message.valid_until, status=message.status,
    )


@operation("remember", RememberParams, writes=_always, title="Remember", output=outputs.Remembered,
           hints=Hints(idempotent=True), embeds=True)  # the same content again is a NOOP with the same id
def remember(params: RememberParams, ctx: CallContext) -> dict[str, Any]:
    """Store a memory. Content is normalised, checked for secrets, deduplicated (exact
    checksum, then semantic similarity within the collection) and given a retention tier
    (T0 foundational … T3 transient). Returns the id and operation: ADD, UPDATE (merged
    into a near-duplicate; merged_with_id) or NOOP (already known). With `thread` (a
    conversation id you choose), `speaker`, `occurred_at` and `message_id` it stores one
    message of a conversation: never merged; a re-sent `message_id` is a NOOP with the same id.
    Optional `event_at`, `valid_until`, `status` (planned/done/cancelled) make it an event.
    Facts change over time: `key` (a slot you name, e.g. "alice/home-city") makes the newest
    fact of that key current and keeps the older ones as its history; `supersedes` (an id or a
    list) marks older memories replaced by this one; `valid_from` says since when it holds
    (default: occurred_at, else now). Nothing superseded is deleted: see memory://{id}/history."""
    data = _remember_input(params, namespace=_namespace(params.namespace), collection=params.collection,
                           thread=params.thread)
    data = dataclasses.replace(data, valid_from=params.valid_from, key=params.key, supersedes=params.superseded_ids())
    return memory_remember(data=data, actor=ctx.actor).as_dict()


class MessageParams(_MessageFields):
    """One message of a thread_append batch."""


class ThreadAppendParams(Input):
    thread: ThreadId
    messages: list[MessageParams] = Field(min_length=1, max_length=THREAD_BATCH_MAX)
    namespace: Namespace | None = None
    collection: CollectionName | None = None


@operation("thread_append", ThreadAppendParams, writes=_always, title="Append to a thread",
           output=outputs.ThreadAppended, hints=Hints(idempotent=True), embeds=True)  # a re-sent message is a NOOP
def thread_append(params: ThreadAppendParams, ctx: CallContext) -> dict[str, Any]:
    """Append up to 500 messages to a conversation thread at once (each: content, speaker,
    occurred_at, message_id, …): embedded in one batch and written in one transaction. Each
    result is ADD, or NOOP with the existing id when that message was stored before."""
    namespace = _namespace(params.namespace)
    batch = [_remember_input(m, namespace=namespace, collection=params.collection, thread=params.thread)
             for m in params.messages]
    results = append_to_thread(messages=batch, actor=ctx.actor, progress=ctx.progress)
    added = sum(r["operation"] == "ADD" for r in results)
    return {"thread": params.thread, "results": results, "added": added, "noop": len(results) - added}


class EventParams(_EventFields):
    id: MemoryId
    namespace: Namespace | None = None
    clear: list[Literal["event_at", "valid_until", "status"]] = Field(default_factory=list, max_length=3)


@operation("event", EventParams, writes=_always, title="Set event fields", output=outputs.EventView,
           hints=Hints(destructive=True, idempotent=True))  # overwrites or clears the fields
def event(params: EventParams, ctx: CallContext) -> dict[str, Any]:
    """Set a memory's event fields: status (planned, done, cancelled), event_at, valid_until;
    `clear` removes some. Cancelled events, and plans whose time has passed, leave recall and
    memory://inject (search still returns them, marked inactive)."""
    changes = {name: getattr(params, name) for name in ("event_at", "valid_until", "status")
               if name in params.model_fields_set}
    changes.update(dict.fromkeys(params.clear))
    memory = edits.memory_set_event(memory_id=params.id, namespace=_namespace(params.namespace), changes=changes,
                                    actor=ctx.actor)
    return selectors.event_view(memory)


class ForgetParams(Input):
    id: MemoryId
    namespace: Namespace | None = None


@operation("forget", ForgetParams, writes=_always, title="Forget a memory", output=outputs.Forgotten,
           hints=Hints(destructive=True, idempotent=True))
def forget(params: ForgetParams, ctx: CallContext) -> dict[str, Any]:
    """Permanently delete one memory by id (NOT_FOUND if it does not exist, is archived,
    or belongs to another namespace than the one given)."""
    return services.memory_forget(memory_id=params.id, namespace=params.namespace, actor=ctx.actor)


class TagParams(Input):
    id: MemoryId
    add: Tags = Field(default_factory=list)
    remove: Tags = Field(default_factory=list)
    namespace: Namespace | None = None


@operation("tag", TagParams, writes=_always, title="Tag a memory", output=outputs.Tagged,
           hints=Hints(destructive=True, idempotent=True))  # remove drops tags
def tag(params: TagParams, ctx: CallContext) -> dict[str, Any]:
    """Add and/or remove tags on one memory (at most 20 tags in total). Content and
    embedding are unchanged; the full-text index and the vector payload are updated."""
    return services.memory_tag(memory_id=params.id, add=params.add, remove=params.remove,
                               namespace=params.namespace, actor=ctx.actor)


class CollectionsParams(Input):
    action: Literal["list", "create", "delete"]
    namespace: Namespace | None = None
    name: CollectionName | None = None
    force: bool = False


@operation("collections", CollectionsParams, writes=lambda p: p.action != "list", title="Collections",
           output=outputs.CollectionsResult, hints=Hints(destructive=True, idempotent=True))  # delete removes memories
def collections(params: CollectionsParams, ctx: CallContext) -> dict[str, Any]:
    """List, create or delete the collections of a namespace. Deleting a non-empty
    collection needs force=true and deletes its memories (CONFLICT otherwise)."""
    namespace = _namespace(params.namespace)
    if params.action == "list":
        return {"collections": selectors.collections_list(namespace=namespace)}
    if params.name is None:
        raise InvalidInput(f"name: required for action {params.action}", field="name")
    if params.action == "create":
        return services.collection_create(namespace=namespace, name=params.name, actor=ctx.actor)
    return services.collection_delete(namespace=namespace, name=params.name, force=params.force, actor=ctx.actor)


class BootstrapParams(Input):
    action: Literal["start", "submit", "status", "reset"]
    section: int | None = Field(default=None, ge=1, le=10)
    answers: str | None = Field(default=None, min_length=1, max_length=IMPORT_MAX)
    namespace: Namespace = "profile"


@operation("bootstrap", BootstrapParams, writes=lambda p: p.action in ("submit", "reset"), title="Profile interview",
           output=outputs.BootstrapResult, hints=Hints(destructive=True), embeds=True)  # reset forgets a section's memories
def bootstrap_(params: BootstrapParams, ctx: CallContext) -> dict[str, Any]:
    """Guided interview that builds a work profile in 10 sections (identity, responsibilities,
    goals, communication, work patterns, tools, entities, repositories, tenants, operating
    rules). start: the first incomplete section and its questions; submit: store the answers
    (one memory per paragraph, with the section's collection, tier and tags) and get the next
    section; status: progress per section; reset: clear a section and forget its memories."""
    if params.action == "start":
        return bootstrap.bootstrap_start(namespace=params.namespace)
    if params.action == "status":
        return bootstrap.bootstrap_status(namespace=params.namespace)
    if params.section is None:
        raise InvalidInput(f"section: required for action {params.action}", field="section")
    if params.action == "reset":
        return bootstrap.bootstrap_reset(namespace=params.namespace, section=params.section, actor=ctx.actor)
    if params.answers is None:
        raise InvalidInput("answers: required for action submit", field="answers")
    return bootstrap.bootstrap_submit(namespace=params.namespace, section=params.section, answers=params.answers,
                                      actor=ctx.actor, progress=ctx.progress)


class ImportParams(Input):
    format: Literal["profile", "freeform"]
    content: str = Field(min_length=1, max_length=IMPORT_MAX)
    namespace: Namespace = "profile"
    dry_run: bool = False


@operation("import", ImportParams, writes=lambda p: not p.dry_run, title="Import a profile or text",
           output=outputs.Imported, hints=Hints(idempotent=True), embeds=True)  # every paragraph is deduplicated
def import_(params: ImportParams, ctx: CallContext) -> dict[str, Any]:
    """Import a structured profile (format "profile": sections by markdown heading, mapped to
    the bootstrap sections) or freeform text (paragraphs) as memories. dry_run returns previews
    (content, collection, type, tier, tags, section) without storing anything."""
    return bootstrap.profile_import(namespace=params.namespace, fmt=params.format, content=params.content,
                                    dry_run=params.dry_run, actor=ctx.actor, progress=ctx.progress)


class RepairParams(Input):
    dry_run: bool = False
    device_id: str | None = Field(default=None, min_length=1, max_length=DEVICE_ID_MAX)


@operation("repair", RepairParams, writes=lambda p: not p.dry_run, whole_store=True, title="Repair from the vector index",
           output=outputs.Repaired, hints=Hints(idempotent=True))  # only inserts what is missing
def repair_(params: RepairParams, ctx: CallContext) -> dict[str, Any]:
    """Rebuild this device's store from a shared Qdrant (vector_index "qdrant"; master token).
    Every bhgbrain_* collection is scanned; memories missing here whose point carries content
    are inserted with their metadata, expiry, device id and vector. dry_run reports only;
    device_id limits recovery to memories one device created. Returns collections_scanned,
    points_scanned, already_in_sqlite, skipped_no_content, recovered, errors."""
    return repair.repair_from_index(dry_run=params.dry_run, device_id=params.device_id, actor=ctx.actor,
                                    progress=ctx.progress).as_dict()


class ChangesParams(Input):
    change: int | None = Field(default=None, ge=0, le=2**63 - 1)  # the database's integer range
    audit: int | None = Field(default=None, ge=0, le=2**63 - 1)
    # Transactions that may still commit feed rows below ``change`` (memories/indexes/feed_cursor.py).
    pending: list[Annotated[int, Field(ge=0, le=2**63 - 1)]] = Field(default_factory=list, max_length=100_000)


@operation("changes.since", ChangesParams, whole_store=True, scoped=False, tool=False)
def changes_since(params: ChangesParams, ctx: CallContext) -> dict[str, Any]:
    """What changed in the store (memories, categories, a restore) after a position of the change
    feed and the audit log; without a position, only the current one. Every namespace: the MCP
    transport's subscription watcher reads it, then tells each subscriber what it may see."""
    if params.change is None or params.audit is None:
        return {"position": feed.feed_position()}
    return feed.changes_since(change=params.change, audit=params.audit, pending=frozenset(params.pending))


# --------------------------------------------------------------------------- reads (REST, CLI, resources)


class MemoriesListParams(Input):
    namespace: Namespace | None = None
    limit: int = Field(default=20, ge=1, le=100)
    cursor: Cursor | None = None
    type: MemoryTypeName | None = None
    tier: Tier | None = None
    tag: Tag | None = None
    expiring_within: Duration | None = None  # "7d", "12h", "30m"


@operation("memories.list", MemoriesListParams, tool=False)
def memories_list(params: MemoriesListParams, ctx: CallContext) -> dict[str, Any]:
    """Memories of a namespace, newest first, keyset-paginated; filters: type, tier, tag, and
    expiring_within (e.g. "7d": only memories whose expiry falls within that window from now)."""
    return selectors.memories_page(namespace=_namespace(params.namespace), limit=params.limit, cursor=params.cursor,
                                   memory_type=params.type, tier=params.tier, tag=params.tag,
                                   expiring_within=params.expiring_within)


class MemoryParams(Input):
    id: MemoryId
    namespace: Namespace | None = None


@operation("memories.get", MemoryParams, tool=False)
def memories_get(params: MemoryParams, ctx: CallContext) -> dict[str, Any]:
    """One memory in full; counts as an access (sliding expiry, promotion)."""
    return access.memory_open(memory_id=params.id, namespace=_namespace(params.namespace))


@operation("memories.tier", MemoryParams, tool=False)
def memories_tier(params: MemoryParams, ctx: CallContext) -> dict[str, Any]:
    """A memory's tier, expiry, review date and access count (not counted as an access)."""
    memory = selectors.memory_get(memory_id=selectors.parse_memory_id(params.id), namespace=_namespace(params.namespace))
    if memory is None:
        raise NotFound(f"Memory {params.id} not found")
    return selectors.tier_view(memory)


class SetTierParams(Input):
    id: MemoryId
    tier: Tier
    namespace: Namespace | None = None


@operation("memories.set_tier", SetTierParams, writes=_always, tool=False)
def memories_set_tier(params: SetTierParams, ctx: CallContext) -> dict[str, Any]:
    """Change a memory's tier; its expiry and review date are recomputed from now."""
    memory = edits.memory_edit(memory_id=params.id, namespace=_namespace(params.namespace),
                               changes={"retention_tier": params.tier}, actor=ctx.actor)
    return selectors.tier_view(memory)


class CollectionParams(Input):
    name: CollectionName
    namespace: Namespace | None = None
    limit: int = Field(default=20, ge=1, le=100)
    cursor: Cursor | None = None


@operation("collections.get", CollectionParams, tool=False)
def collections_get(params: CollectionParams, ctx: CallContext) -> dict[str, Any]:
    """The memories of one collection, newest first, keyset-paginated."""
    page = selectors.memories_page(namespace=_namespace(params.namespace), limit=params.limit, cursor=params.cursor,
                                   collection=params.name)
    return {"name": params.name, **page}


class AuditParams(Input):
    namespace: Namespace | None = None
    limit: int = Field(default=50, ge=1, le=500)
    operation: str | None = Field(default=None, min_length=1, max_length=32)
    memory_id: MemoryId | None = None


@operation("audit.list", AuditParams, tool=False)
def audit_list(params: AuditParams, ctx: CallContext) -> dict[str, Any]:
    """Recent audit entries of a namespace, newest first (optionally one operation or memory)."""
    return {"entries": selectors.audit_entries(namespace=_namespace(params.namespace), limit=params.limit,
                                               operation=params.operation, memory_id=params.memory_id)}


class HistoryParams(Input):
    id: MemoryId
    namespace: Namespace | None = None


@operation("memories.history", HistoryParams, tool=False, output=outputs.MemoryHistory)
def memories_history(params: HistoryParams, ctx: CallContext) -> dict[str, Any]:
    """A fact's versions, oldest first: each with its validity interval (valid_from, valid_until),
    its key, whether it is current, and who superseded it, why (explicit, key, dedup) and when.
    Not counted as an access."""
    return history.memory_history(memory_id=params.id, namespace=_namespace(params.namespace))


resource("memory://list", "Memory list", "Cursor-paginated memories, newest first (?namespace=&limit=1..100&cursor=)",
         operation="memories.list")
resource("collection://list", "Collection list", "Collections of the namespace with memory counts (?namespace=)",
         operation="collections", fixed={"action": "list"})
resource("memory://{id}", "Memory", "One memory by id (?namespace=); counts as an access", operation="memories.get")
resource("memory://{id}/history", "Memory history",
         "The versions of a memory's fact, oldest first, with validity and who superseded them (?namespace=)",
         operation="memories.history")
resource("collection://{name}", "Collection", "Memories of one collection, newest first (?namespace=&limit=&cursor=)",
         operation="collections.get")


class ThreadsListParams(Input):
    namespace: Namespace | None = None
    limit: int = Field(default=20, ge=1, le=100)


@operation("threads.list", ThreadsListParams, tool=False)
def threads_list(params: ThreadsListParams, ctx: CallContext) -> dict[str, Any]:
    """The conversation threads of a namespace, most recently active first, with their size,
    time span and speakers."""
    return {"threads": selectors.threads_list(namespace=_namespace(params.namespace), limit=params.limit)}


class ThreadParams(Input):
    thread: ThreadId
    namespace: Namespace | None = None
    limit: int = Field(default=100, ge=1, le=500)
    cursor: Cursor | None = None


@operation("threads.get", ThreadParams, tool=False)
def threads_get(params: ThreadParams, ctx: CallContext) -> dict[str, Any]:
    """One thread's transcript in conversation order (occurred_at, then arrival), paginated."""
    return selectors.thread_transcript(namespace=_namespace(params.namespace), thread=params.thread, limit=params.limit,
                                       cursor=params.cursor)


# --------------------------------------------------------------------------- namespace quotas (REST, CLI)


class QuotaParams(Input):
    namespace: Namespace | None = None


@operation("namespaces.quota", QuotaParams, tool=False)
def namespaces_quota(params: QuotaParams, ctx: CallContext) -> dict[str, Any]:
    """A namespace's quota (max_memories, tier budgets, on_quota_exceeded; where it is set) and the
    memories it holds against each limit."""
    return quota_selectors.quota_use(namespace=_namespace(params.namespace))


class QuotasParams(Input):
    limited_only: bool = False


@operation("namespaces.quotas", QuotasParams, whole_store=True, tool=False)
def namespaces_quotas(params: QuotasParams, ctx: CallContext) -> dict[str, Any]:
    """Every namespace that holds memories or has a quota of its own, with its quota and use."""
    uses = quota_selectors.quota_uses(limited_only=params.limited_only)
    return {"namespaces": [use.as_dict() for use in uses]}


class QuotaSetParams(Input):
    namespace: Namespace
    max_memories: int | None = Field(default=None, ge=1)  # null: no limit
    tier_budgets: dict[Tier, int | None] = Field(default_factory=dict)  # only the tiers named change
    on_quota_exceeded: Literal["reject", "trim"] | None = None
    reset: bool = False  # drop this namespace's own setting: the config's quota applies again


@operation("namespaces.set_quota", QuotaSetParams, writes=_always, whole_store=True, tool=False)
def namespaces_set_quota(params: QuotaSetParams, ctx: CallContext) -> dict[str, Any]:
    """Set a namespace's quota (the master token only: a scoped token may not raise its own). Only
    the values given change; `reset` returns the namespace to the config's quota."""
    if params.reset:
        return quotas.namespace_quota_reset(namespace=params.namespace, actor=ctx.actor)
    changes = {name: getattr(params, name) for name in params.model_fields_set if name in quotas.CHANGEABLE}
    if changes.get("on_quota_exceeded", "") is None:
        raise InvalidInput("on_quota_exceeded: reject or trim", field="on_quota_exceeded")
    return quotas.namespace_quota_set(namespace=params.namespace, changes=changes, actor=ctx.actor)


# --------------------------------------------------------------------------- prompts and completions


class FactHistoryArgs(Input):
    key: FactKey = Field(description='the fact key, e.g. "alice/home-city"')
    namespace: Namespace | None = Field(default=None, description="where the fact is stored (default: yours)")


@prompt("fact-history", FactHistoryArgs, title="How a fact changed", completes={"key": "key", "namespace": "namespace"})
def fact_history_prompt(params: FactHistoryArgs, ctx: CallContext) -> PromptMessages:
    """The versions of one fact key, oldest first, with when each held and what replaced it, and
    a request to say what is true now and what changed when."""
    return [("user", prompts.fact_history(history.key_history(key=params.key, namespace=_namespace(params.namespace))))]



class BootstrapPromptArgs(Input):
    namespace: Namespace = Field(default="profile", description='where the profile is stored (default "profile")')
    section: int | None = Field(default=None, ge=1, le=10,
                                description="the section to start with, 1-10 (default: the first one not answered)")


@prompt("bootstrap", BootstrapPromptArgs, title="Build my work profile", completes={"namespace": "namespace"})
def bootstrap_prompt(params: BootstrapPromptArgs, ctx: CallContext) -> PromptMessages:
    """A guided interview, one section at a time, that fills the 10 profile sections (identity,
    responsibilities, goals, communication, work patterns, tools, entities, repositories, tenants,
    operating rules) through the bootstrap tool; shows which sections are answered already."""
    return [("user", prompts.bootstrap_interview(namespace=params.namespace, section=params.section))]


class RememberThisArgs(Input):
    passage: str = Field(min_length=1, max_length=CONTENT_MAX, description="the text to turn into memories")
    namespace: Namespace | None = Field(default=None, description="where to store them (default: yours)")
    collection: CollectionName | None = Field(default=None, description="the collection to store them in")
    tag: Tag | None = Field(default=None, description="a tag every one of them gets (a project, a customer)")


@prompt("remember-this", RememberThisArgs, title="Remember this",
        completes={"namespace": "namespace", "collection": "collection", "tag": "tag"})
def remember_this_prompt(params: RememberThisArgs, ctx: CallContext) -> PromptMessages:
    """Turn a passage (notes, a decision, a conversation) into well-formed memories: one
    self-contained fact each, with a type, tags (reusing the namespace's) and an importance."""
    return [("user", prompts.remember_this(passage=params.passage, namespace=_namespace(params.namespace),
                                           collection=params.collection, tag=params.tag))]


completer("namespace", completions.namespaces_complete)
completer("collection", completions.collections_complete, resources={"collection://{name}": "name"})
completer("tag", completions.tags_complete)
completer("thread", completions.threads_complete)
completer("memory", completions.memory_ids_complete,
          resources={"memory://{id}": "id", "memory://{id}/history": "id"})
completer("key", completions.keys_complete)
