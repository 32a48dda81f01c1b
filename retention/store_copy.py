"""Moving a store: copy another store (the *source*, a second database alias) into this one.

It runs in a process whose own store (``default``) is the *target* — a PostgreSQL database,
typically — so every memory goes in through the write funnel (``memories.funnel``): each
registered indexer (the full-text rows of the target's engine) and the change feed follow, and
the target's vector index (embedded, or Qdrant) learns the memories from that feed. Nothing is
embedded again: each memory's stored vector (``Memory.embedding``) is copied as it is.

Resumable: every table is copied in primary-key order, in batches, each batch in its own
transaction; a batch skips the rows the target already holds (the audit log, renumbered by the
funnel, resumes after the rows already copied). A run stopped anywhere — a crash, Ctrl-C —
leaves whole batches only, and the next run continues and never duplicates.

What is copied and what is not (device-local state, derived rows): :data:`COPIED`,
:data:`NOT_COPIED`. :func:`store_verify` compares both stores table by table: row counts and a
sha256 over every copied column in key order (a memory's id, content hash and vector bytes
included), and on Qdrant, that every indexable memory has its point.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

from django.contrib.auth.models import Group, Permission, User
from django.core.management.color import no_style
from django.db import connection, connections, models, transaction
from django.utils import timezone

from bhgbrain_site.core.errors import Conflict, InvalidInput
from bhgbrain_site.core.progress import Progress
from categories.models import Category, CategoryRevision
from memories import funnel
from memories.indexes.embedded import get_vector_index
from memories.models import (
    AccessDay,
    ApiToken,
    AuditLog,
    BootstrapSession,
    Collection,
    CuratorScope,
    Memory,
    MemoryRevision,
)
from retention.models import ArchivedMemory, BackupRecord

SOURCE = "migration_source"
MAX_BATCH = 1000  # a memory has ~35 columns: 1000 rows stay under PostgreSQL's 65535 parameters

# A batch callback: (table, rows copied so far in it) after each batch is committed.
OnBatch = Callable[[str, int], None]

# Not copied, and why: the target starts these afresh.
NOT_COPIED = {
    "vector_changes": "the change feed is device-local: the target's own feed is written as the memories go in",
    "vector_index_cursors": "how far an index applied this store's feed; the target's index starts at its own feed",
    "compaction_state": "deletions since this database was last compacted: the target is freshly written",
    "memories_fts / memory_search": "the full-text rows are rebuilt by the target's indexers (each engine its own layout)",
    "memory_tags": "the tag index is rebuilt by the target's indexers as the memories go in",
    "django_session": "admin sessions: log in again",
    "django_admin_log": "the admin's recent-actions list (the audit log, which is copied, records every change)",
    "axes_*": "login-throttling attempts are per server",
    "django_q_*": "the scheduler's queue and results; schedules are registered again at every start",
    "django_content_type / auth_permission": "created by the target's migrations; group and user permissions "
                                             "are mapped onto them by (app, model, codename)",
}


@dataclass(frozen=True)
class Table:
    """One copied table: its model, how it goes in, and whether its rows keep their keys."""

    label: str
    model: type[models.Model]
    kind: str = "rows"  # rows (verbatim, keys kept) | memories (the funnel) | audit (renumbered) | permissions

    @property
    def keyed(self) -> bool:
        return self.kind != "audit"


COPIED: tuple[Table, ...] = (
    Table("auth_group", Group),
    Table("auth_group_permissions", Group.permissions.through, "permissions"),
    Table("auth_user", User),
    Table("auth_user_groups", User.groups.through),
    Table("auth_user_user_permissions", User.user_permissions.through, "permissions"),
    Table("curator_scopes", CuratorScope),
    Table("api_tokens", ApiToken),
    Table("collections", Collection),
    Table("categories", Category),
    Table("category_revisions", CategoryRevision),
    Table("memories", Memory, "memories"),
    Table("memory_revisions", MemoryRevision),
    Table("audit_log", AuditLog, "audit"),
    Table("bootstrap_sessions", BootstrapSession),
    Table("access_days", AccessDay),
    Table("memory_archive", ArchivedMemory),
    Table("backup_metadata", BackupRecord),
)


# --------------------------------------------------------------------------- the source


def attach_source(config: dict[str, Any], alias: str = SOURCE) -> None:
    """Make ``config`` (a DATABASES entry) reachable as ``alias`` in this process."""
    entry = dict(config)
    connections.configure_settings({**connections.settings, alias: entry})  # fills entry's defaults in place
    connections.settings[alias] = entry


def _same_database(alias: str) -> bool:
    source, target = connections[alias].settings_dict, connection.settings_dict
    keys = ("ENGINE", "NAME", "HOST", "PORT")
    return all(str(source.get(k) or "") == str(target.get(k) or "") for k in keys)


def _preflight(source: str) -> None:
    """The target must be empty, or a part-done copy of this very store."""
    if _same_database(source):
        raise InvalidInput("Invalid input: the target database is the store itself")
    theirs = set(Memory.objects.values_list("id", flat=True))
    if theirs:
        foreign = len(theirs - set(Memory.objects.using(source).values_list("id", flat=True)))
        if foreign:
            raise Conflict(f"The target database already holds {foreign} memories this store does not have: "
                           "it is another store. Migrate into an empty database.")
    if AuditLog.objects.count() > AuditLog.objects.using(source).count():
        raise Conflict("The target database's audit log is longer than this store's: it is another store. "
                       "Migrate into an empty database.")


# --------------------------------------------------------------------------- copying


def _objects(model: type[models.Model]) -> models.Manager:
    """A model's default manager (``_default_manager`` is Django's public name for it)."""
    return model._default_manager  # noqa: SLF001


@contextlib.contextmanager
def _verbatim(model: type[models.Model]) -> Iterator[None]:
    """auto_now / auto_now_add stamp the time on insert: a copy keeps the source's."""
    fields = [f for f in model._meta.concrete_fields if getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False)]
    saved = [(f, f.auto_now, f.auto_now_add) for f in fields]
    for field in fields:
        field.auto_now = field.auto_now_add = False
    try:
        yield
    finally:
        for field, now, add in saved:
            field.auto_now, field.auto_now_add = now, add


def _pages(queryset: models.QuerySet, batch_size: int) -> Iterator[list[Any]]:
    """The rows in primary-key order, a page at a time (keyset paging: no OFFSET)."""
    last = None
    while True:
        page = list((queryset.filter(pk__gt=last) if last is not None else queryset)[:batch_size])
        if not page:
            return
        last = page[-1].pk
        yield page


def _permission_map(source: str) -> dict[int, int]:
    """Source permission id -> target permission id, by (app label, model, codename)."""
    def keyed(alias: str) -> dict[tuple[str, str, str], int]:
        rows = Permission.objects.using(alias).values_list("content_type__app_label", "content_type__model", "codename", "id")
        return {(app, model, code): pk for app, model, code, pk in rows}

    target = keyed("default")
    return {pk: target[key] for key, pk in keyed(source).items() if key in target}


class _Copier:
    def __init__(self, source: str, batch_size: int, progress: Progress | None, on_batch: OnBatch | None) -> None:
        self.source, self.batch_size = source, max(1, min(batch_size, MAX_BATCH))
        self.progress, self.on_batch = progress, on_batch
        self.at = timezone.now()
        self._permissions: dict[int, int] | None = None

    def _report(self, table: Table, done: int, total: int) -> None:
        if self.progress is not None:
            self.progress(table.label, done, total)

    def copy(self, table: Table) -> int:
        """Copy what the target lacks of ``table``; the number of rows inserted."""
        total = _objects(table.model).using(self.source).count()
        self._report(table, 0, total)
        if table.kind == "audit":
            return self._copy_audit(table, total)
        inserted = seen = 0
        with _verbatim(table.model):
            for page in _pages(_objects(table.model).using(self.source).order_by("pk"), self.batch_size):
                present = set(_objects(table.model).filter(pk__in=[row.pk for row in page])
                              .values_list("pk", flat=True))
                fresh = [row for row in page if row.pk not in present]
                with transaction.atomic():
                    inserted += self._insert(table, fresh)
                seen += len(page)
                self._committed(table, seen, total)
        return inserted

    def _committed(self, table: Table, done: int, total: int) -> None:
        self._report(table, done, total)
        if self.on_batch is not None:
            self.on_batch(table.label, done)

    def _insert(self, table: Table, rows: list[Any]) -> int:
        if not rows:
            return 0
        if table.kind == "memories":
            # indexers + feed, as any insert; the source store's memories, whatever the quotas
            funnel.insert_memories(rows, audit=None, at=self.at, quota=False)
            return len(rows)
        if table.kind == "permissions":
            if self._permissions is None:
                self._permissions = _permission_map(self.source)
            rows = [row for row in rows if row.permission_id in self._permissions]
            for row in rows:
                row.permission_id = self._permissions[row.permission_id]
        _objects(table.model).bulk_create(rows)
        return len(rows)

    def _copy_audit(self, table: Table, total: int) -> int:
        """The funnel numbers audit rows itself: resume after the rows already copied, in id order."""
        done = AuditLog.objects.count()
        rows = AuditLog.objects.using(self.source).order_by("id")
        if done:
            rows = rows.filter(id__gt=rows.values_list("id", flat=True)[done - 1])
        inserted = 0
        replacement = funnel.StoreReplacement(actor="store-migrate", at=self.at)  # only its bulk audit load
        for page in _pages(rows, self.batch_size):
            with transaction.atomic():
                replacement.load_audit(
                    funnel.AuditEntry(timestamp=a.timestamp, namespace=a.namespace, operation=a.operation,
                                      memory_id=a.memory_id, client_id=a.client_id, details=a.details)
                    for a in page)
            inserted += len(page)
            self._committed(table, done + inserted, total)
        return inserted


def _reset_sequences() -> None:
    """Rows inserted with their keys leave PostgreSQL's sequences behind: move them past."""
    sql = connection.ops.sequence_reset_sql(no_style(), [t.model for t in COPIED])
    with connection.cursor() as cursor:
        for statement in sql:
            cursor.execute(statement)


def store_copy(*, source: str = SOURCE, batch_size: int = 500, progress: Progress | None = None,
               on_batch: OnBatch | None = None) -> dict[str, int]:
    """Copy every table of :data:`COPIED` from the ``source`` alias into this store; returns the
    rows inserted per table (0 for a table a previous run finished). ``progress`` hears
    (table, rows done, rows in the source); ``on_batch`` is called after each committed batch."""
    _preflight(source)
    copier = _Copier(source, batch_size, progress, on_batch)
    inserted = {table.label: copier.copy(table) for table in COPIED}
    _reset_sequences()
    funnel.sync_indexes()  # the last batch's feed rows, if the after-commit push failed
    return inserted


# --------------------------------------------------------------------------- verification


def _canonical(value: Any) -> Any:
    if isinstance(value, bytes | memoryview):
        return bytes(value).hex()
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return value.hex
    if isinstance(value, float):
        return repr(value)
    return value


def _columns(table: Table) -> list[str]:
    skip = {"id"} if not table.keyed else set()
    if table.kind == "permissions":
        skip.add("permission_id")  # mapped onto the target's permission ids
    return [f.attname for f in table.model._meta.concrete_fields if f.attname not in skip]


def _digest(table: Table, alias: str, progress: Progress | None = None, total: int | None = None) -> str:
    """sha256 over every compared column of every row, in key order (JSON canonicalised)."""
    digest = hashlib.sha256()
    rows = _objects(table.model).using(alias).order_by("pk").values_list(*_columns(table))
    for done, row in enumerate(rows.iterator(chunk_size=2000), 1):
        digest.update(json.dumps([_canonical(v) for v in row], sort_keys=True, ensure_ascii=False, default=str).encode())
        digest.update(b"\n")
        if progress is not None and done % 2000 == 0:
            progress(f"verifying {table.label}", done, total)
    return digest.hexdigest()


def _qdrant_points(source: str) -> dict[str, Any] | None:
    """On Qdrant: every memory the target should index has its point (None on another index)."""
    index = get_vector_index()
    if index is None or index.kind != "qdrant":
        return None
    from memories.indexes.qdrant.points import collection_name

    wanted: dict[str, list[str]] = {}
    rows = Memory.objects.filter(archived=False, embedding__isnull=False, embedding_model=index.model_id)
    for memory_id, namespace, collection in rows.values_list("id", "namespace", "collection").iterator(chunk_size=2000):
        wanted.setdefault(collection_name(namespace, collection), []).append(str(memory_id))
    expected, found = sum(len(ids) for ids in wanted.values()), 0
    try:
        client = index.client()
        for name, ids in wanted.items():
            for start in range(0, len(ids), 1000):
                found += len(client.retrieve(name, ids=ids[start:start + 1000], with_payload=False, with_vectors=False))
    except Exception as exc:  # noqa: BLE001 - an unreachable Qdrant is a failed check, reported
        return {"expected": expected, "found": found, "ok": False, "error": f"qdrant at {index.location}: {exc}"}
    return {"expected": expected, "found": found, "collections": len(wanted), "ok": found == expected}


def store_verify(*, source: str = SOURCE, progress: Progress | None = None) -> dict[str, Any]:
    """Compare this store with ``source``: rows per table and a checksum over the copied columns."""
    tables: dict[str, dict[str, Any]] = {}
    for done, table in enumerate(COPIED):
        if progress is not None:
            progress("verifying", done, len(COPIED))
        count_source = _objects(table.model).using(source).count()
        count_target = _objects(table.model).count()
        entry: dict[str, Any] = {"source": count_source, "target": count_target}
        entry["checksum_source"] = _digest(table, source, progress, count_source)
        entry["checksum_target"] = _digest(table, "default", progress, count_target)
        entry["ok"] = count_source == count_target and entry["checksum_source"] == entry["checksum_target"]
        tables[table.label] = entry
    qdrant = _qdrant_points(source)
    if progress is not None:
        progress("verified", len(COPIED), len(COPIED))
    ok = all(t["ok"] for t in tables.values()) and (qdrant is None or qdrant["ok"])
    return {"ok": ok, "tables": tables, "qdrant": qdrant}


def not_copied() -> dict[str, str]:
    return dict(NOT_COPIED)
