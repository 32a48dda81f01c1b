"""The retention app's operations (the backup tool; archive, cleanup, stats and health for REST
and the CLI) and health://status."""
from __future__ import annotations

from typing import Any, Literal

from django.conf import settings
from pydantic import Field, model_validator

from bhgbrain_site.core.calls import CallContext
from bhgbrain_site.core.contracts import PATH_MAX, Tier
from bhgbrain_site.core.inputs import Input, MemoryId, Namespace, Query
from bhgbrain_site.registry import Hints, operation, resource
from memories.quotas.selectors import visible_quotas
from retention import archive, cleanup, selectors
from retention.backups import bhgb_format, create, restore
from retention.outputs import BackupResult


class BackupParams(Input):
    action: Literal["create", "list", "restore"]
    path: str | None = Field(default=None, min_length=1, max_length=PATH_MAX)

    @model_validator(mode="after")
    def _path_only_for_restore(self) -> BackupParams:
        if self.action == "restore" and self.path is None:
            raise ValueError("path is required for restore")
        if self.action != "restore" and self.path is not None:
            raise ValueError("path is only used by restore")
        return self


@operation("backup", BackupParams, writes=lambda p: p.action != "list", whole_store=True, title="Back up or restore",
           output=BackupResult, hints=Hints(destructive=True))  # restore replaces the whole store
def backup(params: BackupParams, ctx: CallContext) -> dict[str, Any]:
    """Back up or restore the whole store (every namespace; needs the master token).
    create: snapshot memories with their vectors, categories, collections, audit and
    revisions into <data_dir>/backups/<timestamp>.bhgb; list: known backups; restore
    (path: absolute path of a .bhgb file in that folder): replace the store live, after
    saving the current one as a pre-restore backup. Backups of the original BHGBrain restore too."""
    if params.action == "create":
        return create.backup_create(actor=ctx.actor, progress=ctx.progress).as_dict()
    if params.action == "list":
        return {"backups": [info.as_dict() for info in bhgb_format.backups_list()]}
    assert params.path is not None  # the model requires it for restore
    return restore.backup_restore(path=params.path, actor=ctx.actor, progress=ctx.progress)


class RestoreFileParams(Input):
    path: str = Field(min_length=1, max_length=PATH_MAX)


@operation("backups.restore_file", RestoreFileParams, writes=lambda p: True, whole_store=True, tool=False)
def backups_restore_file(params: RestoreFileParams, ctx: CallContext) -> dict[str, Any]:
    """Replace the store with a .bhgb file anywhere on the server's disk (the CLI only: it runs
    on the server as the store's owner; tools and REST read <data_dir>/backups only)."""
    return restore.backup_restore(path=params.path, actor=ctx.actor, allow_any_path=True, progress=ctx.progress)


class ArchiveListParams(Input):
    namespace: Namespace | None = None
    query: Query | None = None
    limit: int = Field(default=20, ge=1, le=100)


@operation("archive.list", ArchiveListParams, tool=False)
def archive_list(params: ArchiveListParams, ctx: CallContext) -> dict[str, Any]:
    """Memories the retention cleanup archived in a namespace, newest first (best match first for a query)."""
    namespace = params.namespace or settings.BHGBRAIN.defaults.namespace
    return {"entries": archive.archive_entries(namespace=namespace, query=params.query, limit=params.limit)}


class ArchiveRestoreParams(Input):
    id: MemoryId
    namespace: Namespace | None = None
    tier: Tier = "T2"


@operation("archive.restore", ArchiveRestoreParams, writes=lambda p: True, tool=False)
def archive_restore(params: ArchiveRestoreParams, ctx: CallContext) -> dict[str, Any]:
    """Bring an archived memory back (same id, content, tags and vector; T2 unless ``tier``)."""
    namespace = params.namespace or settings.BHGBRAIN.defaults.namespace
    return archive.archive_restore(memory_id=params.id, namespace=namespace, actor=ctx.actor, tier=params.tier)


class CleanupParams(Input):
    consolidate: bool = False
    dry_run: bool = False
    tier: Literal["T1", "T2", "T3"] | None = None
    force_compact: bool = False


@operation("retention.cleanup", CleanupParams, writes=lambda p: not p.dry_run, whole_store=True, tool=False)
def retention_cleanup(params: CleanupParams, ctx: CallContext) -> dict[str, Any]:
    """Archive and delete expired memories now, then trim tiers over their budgets (archived
    first, never T0) and compact the store when deletions passed the threshold (consolidate:
    first mark long-unused ones stale; dry_run: count only; tier: only that tier;
    force_compact: compact in any case)."""
    return cleanup.retention_cleanup(consolidate=params.consolidate, dry_run=params.dry_run, tier=params.tier,
                                     force_compact=params.force_compact, progress=ctx.progress).as_dict()


class StatsParams(Input):
    by_tier: bool = False
    expiring: bool = False


@operation("store.stats", StatsParams, whole_store=True, tool=False)
def store_stats(params: StatsParams, ctx: CallContext) -> dict[str, Any]:
    """Counts, sizes and collections of every namespace (optionally by tier, and what expires soon)."""
    return selectors.store_stats(by_tier=params.by_tier, expiring=params.expiring)


class HealthParams(Input):
    pass


@operation("store.health", HealthParams, tool=False, scoped=False)
def store_health(params: HealthParams, ctx: CallContext) -> dict[str, Any]:
    """The full health snapshot: components, counts, retention state, namespace quotas (a scoped
    token sees its own namespaces' only)."""
    body = selectors.store_health()
    if "quotas" in body:
        body["quotas"] = visible_quotas(body["quotas"], ctx.principal.namespaces, anonymous=False)
    return body


resource("health://status", "Health", "The full health snapshot", operation="store.health")
