"""Tool definitions: pydantic inputs with the seed's limits, thin calls into services."""
from __future__ import annotations

from typing import Annotated, Any, Literal

from django.conf import settings
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from bhgbrain_site.errors import InvalidInput
from mcp_bridge.registry import CallContext, tool
from memories import backup as backup_service
from memories import services
from search import services as search_services

Namespace = Annotated[str, StringConstraints(pattern=r"^[a-zA-Z0-9/-]{1,200}$")]
CollectionName = Annotated[str, StringConstraints(pattern=r"^[a-zA-Z0-9-]{1,100}$")]
Tag = Annotated[str, StringConstraints(pattern=r"^[a-zA-Z0-9-]+$", min_length=1, max_length=100)]
MemoryType = Literal["episodic", "semantic", "procedural"]
Tier = Literal["T0", "T1", "T2", "T3"]


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class RememberParams(_Input):
    content: str = Field(min_length=1, max_length=100_000)
    namespace: Namespace | None = None
    collection: CollectionName | None = None
    type: MemoryType = "semantic"
    tags: list[Tag] = Field(default_factory=list, max_length=20)
    category: str | None = Field(default=None, min_length=1, max_length=100)
    importance: float = Field(default=0.5, ge=0.0, le=1.0)
    source: Literal["cli", "api", "agent", "import"] = "cli"
    retention_tier: Tier | None = None


class ForgetParams(_Input):
    id: str = Field(min_length=1, max_length=64)
    namespace: Namespace | None = None


@tool("remember", RememberParams, writes=lambda p: True)
def remember(params: RememberParams, ctx: CallContext) -> dict[str, Any]:
    """Store a memory. Content is normalised, checked for secrets, deduplicated (exact
    checksum, then semantic similarity within the collection) and given a retention tier
    (T0 foundational … T3 transient). Returns the id and operation: ADD, UPDATE (merged
    into a near-duplicate; merged_with_id) or NOOP (already known)."""
    defaults = settings.BHGBRAIN.defaults
    data = services.RememberInput(
        content=params.content,
        namespace=params.namespace or defaults.namespace,
        collection=params.collection or defaults.collection,
        type=params.type,
        tags=tuple(params.tags),
        category=params.category,
        importance=params.importance,
        source=params.source,
        retention_tier=params.retention_tier,
    )
    return services.memory_remember(data=data, actor=ctx.actor).as_dict()


Query = Annotated[str, StringConstraints(min_length=1, max_length=500)]


class RecallParams(_Input):
    query: Query
    namespace: Namespace | None = None
    collection: CollectionName | None = None
    type: MemoryType | None = None
    tags: list[Tag] | None = Field(default=None, max_length=20)
    limit: int | None = Field(default=None, ge=1, le=20)
    min_score: float | None = Field(default=None, ge=0.0, le=1.0)


class SearchParams(_Input):
    query: Query
    namespace: Namespace | None = None
    collection: CollectionName | None = None
    mode: Literal["semantic", "fulltext", "hybrid"] = "hybrid"
    limit: int = Field(default=10, ge=1, le=50)


@tool("recall", RecallParams)
def recall(params: RecallParams, ctx: CallContext) -> dict[str, Any]:
    """Recall the memories most relevant to a query by meaning (semantic search), across
    every collection of the namespace unless one is given. Only results whose calibrated
    similarity reaches min_score (default 0.6) are returned; optional type and tags
    (any-match) filters. Returned memories count as accessed (sliding expiry, promotion)."""
    defaults = settings.BHGBRAIN.defaults
    return search_services.recall_run(
        query=params.query,
        namespace=params.namespace or defaults.namespace,
        collection=params.collection,
        memory_type=params.type,
        tags=params.tags,
        limit=params.limit or defaults.recall_limit,
        min_score=defaults.min_score if params.min_score is None else params.min_score,
    )


@tool("search", SearchParams)
def search(params: SearchParams, ctx: CallContext) -> dict[str, Any]:
    """Search memories by hybrid (default: BM25 full-text fused with semantic similarity),
    fulltext or semantic mode, up to 50 results, optionally within one collection. Works in
    any language (Chinese is segmented). Returned memories count as accessed."""
    return search_services.search_run(
        query=params.query,
        namespace=params.namespace or settings.BHGBRAIN.defaults.namespace,
        collection=params.collection,
        mode=params.mode,
        limit=params.limit,
    )


@tool("forget", ForgetParams, writes=lambda p: True)
def forget(params: ForgetParams, ctx: CallContext) -> dict[str, Any]:
    """Permanently delete one memory by id (NOT_FOUND if it does not exist, is archived,
    or belongs to another namespace than the one given)."""
    return services.memory_forget(memory_id=params.id, namespace=params.namespace, actor=ctx.actor)


class TagParams(_Input):
    id: str = Field(min_length=1, max_length=64)
    add: list[Tag] = Field(default_factory=list, max_length=20)
    remove: list[Tag] = Field(default_factory=list, max_length=20)
    namespace: Namespace | None = None


@tool("tag", TagParams, writes=lambda p: True)
def tag(params: TagParams, ctx: CallContext) -> dict[str, Any]:
    """Add and/or remove tags on one memory (at most 20 tags in total). Content and
    embedding are unchanged; the full-text index and the vector payload are updated."""
    return services.memory_tag(
        memory_id=params.id, add=params.add, remove=params.remove, namespace=params.namespace, actor=ctx.actor
    )


class CollectionsParams(_Input):
    action: Literal["list", "create", "delete"]
    namespace: Namespace | None = None
    name: CollectionName | None = None
    force: bool = False


@tool("collections", CollectionsParams, writes=lambda p: p.action != "list")
def collections(params: CollectionsParams, ctx: CallContext) -> dict[str, Any]:
    """List, create or delete the collections of a namespace. Deleting a non-empty
    collection needs force=true and deletes its memories (CONFLICT otherwise)."""
    from memories.selectors import collections_list

    namespace = params.namespace or settings.BHGBRAIN.defaults.namespace
    if params.action == "list":
        return {"collections": collections_list(namespace=namespace)}
    if params.name is None:
        raise InvalidInput(f"name: required for action {params.action}")
    if params.action == "create":
        return services.collection_create(namespace=namespace, name=params.name, actor=ctx.actor)
    return services.collection_delete(namespace=namespace, name=params.name, force=params.force, actor=ctx.actor)


class CategoryParams(_Input):
    action: Literal["list", "get", "set", "delete"]
    namespace: Namespace | None = None
    name: str | None = Field(default=None, min_length=1, max_length=100, pattern=r"^[a-zA-Z0-9._-]+$")
    slot: Literal["company-values", "architecture", "coding-requirements", "custom"] = "custom"
    content: str | None = Field(default=None, min_length=1, max_length=100_000)


@tool("category", CategoryParams, writes=lambda p: p.action in ("set", "delete"))
def category(params: CategoryParams, ctx: CallContext) -> dict[str, Any]:
    """Manage policy categories: always-injected context blocks (company values,
    architecture, coding requirements, custom) at the top of memory://inject. Actions:
    list, get, set (creates or stores a new revision), delete. Scoped to the namespace."""
    from categories import selectors as category_selectors
    from categories import services as category_services

    namespace = params.namespace or settings.BHGBRAIN.defaults.namespace
    if params.action == "list":
        return {"categories": category_selectors.categories_list(namespace=namespace)}
    if params.name is None:
        raise InvalidInput(f"name: required for action {params.action}")
    if params.action == "get":
        return category_selectors.category_get(namespace=namespace, name=params.name)
    if params.action == "delete":
        return category_services.category_delete(namespace=namespace, name=params.name, actor=ctx.actor)
    if params.content is None:
        raise InvalidInput("content: required for action set")
    return category_services.category_set(
        namespace=namespace, name=params.name, slot=params.slot, content=params.content, actor=ctx.actor
    )


class BootstrapParams(_Input):
    action: Literal["start", "submit", "status", "reset"]
    section: int | None = Field(default=None, ge=1, le=10)
    answers: str | None = Field(default=None, min_length=1, max_length=500_000)
    namespace: Namespace = "profile"


@tool("bootstrap", BootstrapParams, writes=lambda p: p.action in ("submit", "reset"))
def bootstrap(params: BootstrapParams, ctx: CallContext) -> dict[str, Any]:
    """Guided interview that builds a work profile in 10 sections (identity, responsibilities,
    goals, communication, work patterns, tools, entities, repositories, tenants, operating
    rules). start: the first incomplete section and its questions; submit: store the answers
    (one memory per paragraph, with the section's collection, tier and tags) and get the next
    section; status: progress per section; reset: clear a section and forget its memories."""
    from memories import bootstrap as interview

    if params.action == "start":
        return interview.bootstrap_start(namespace=params.namespace)
    if params.action == "status":
        return interview.bootstrap_status(namespace=params.namespace)
    if params.section is None:
        raise InvalidInput(f"section: required for action {params.action}")
    if params.action == "reset":
        return interview.bootstrap_reset(namespace=params.namespace, section=params.section, actor=ctx.actor)
    if params.answers is None:
        raise InvalidInput("answers: required for action submit")
    return interview.bootstrap_submit(namespace=params.namespace, section=params.section, answers=params.answers, actor=ctx.actor)


class ImportParams(_Input):
    format: Literal["profile", "freeform"]
    content: str = Field(min_length=1, max_length=500_000)
    namespace: Namespace = "profile"
    dry_run: bool = False


@tool("import", ImportParams, writes=lambda p: not p.dry_run)
def import_(params: ImportParams, ctx: CallContext) -> dict[str, Any]:
    """Import a structured profile (format "profile": sections by markdown heading, mapped to
    the bootstrap sections) or freeform text (paragraphs) as memories. dry_run returns previews
    (content, collection, type, tier, tags, section) without storing anything."""
    from memories.bootstrap import profile_import

    return profile_import(namespace=params.namespace, fmt=params.format, content=params.content,
                          dry_run=params.dry_run, actor=ctx.actor)


class BackupParams(_Input):
    action: Literal["create", "list", "restore"]
    path: str | None = Field(default=None, min_length=1, max_length=4096)

    @model_validator(mode="after")
    def _path_only_for_restore(self) -> "BackupParams":
        if self.action == "restore" and self.path is None:
            raise ValueError("path is required for restore")
        if self.action != "restore" and self.path is not None:
            raise ValueError("path is only used by restore")
        return self


@tool("backup", BackupParams, writes=lambda p: p.action != "list", whole_store=True)
def backup(params: BackupParams, ctx: CallContext) -> dict[str, Any]:
    """Back up or restore the whole store (every namespace; needs the master token).
    create: snapshot memories with their vectors, categories, collections, audit and
    revisions into <data_dir>/backups/<timestamp>.bhgb; list: known backups; restore
    (path: absolute path of a .bhgb file in that folder): replace the store live, after
    saving the current one as a pre-restore backup. Backups of the original BHGBrain restore too."""
    if params.action == "create":
        return backup_service.backup_create(actor=ctx.actor).as_dict()
    if params.action == "list":
        return {"backups": [info.as_dict() for info in backup_service.backups_list()]}
    assert params.path is not None
    return backup_service.backup_restore(path=params.path, actor=ctx.actor)


class RepairParams(_Input):
    dry_run: bool = False
    device_id: str | None = Field(default=None, min_length=1, max_length=64)


@tool("repair", RepairParams, writes=lambda p: not p.dry_run, whole_store=True)
def repair(params: RepairParams, ctx: CallContext) -> dict[str, Any]:
    """Rebuild this device's store from a shared Qdrant (vector_index "qdrant"; master token).
    Every bhgbrain_* collection is scanned; memories missing here whose point carries content
    are inserted with their metadata, expiry, device id and vector. dry_run reports only;
    device_id limits recovery to memories one device created. Returns collections_scanned,
    points_scanned, already_in_sqlite, skipped_no_content, recovered, errors."""
    from memories.repair import repair_from_index

    return repair_from_index(dry_run=params.dry_run, device_id=params.device_id, actor=ctx.actor).as_dict()
