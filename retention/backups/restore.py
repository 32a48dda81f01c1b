"""Backups, import side: replace the whole store with a ``.bhgb`` file's content, live.

Ours and the original BHGBrain's backups restore (format: bhgb_format.py); every value read
from the file goes through memories.incoming (checked, bounded, defaulted), and the store is
replaced through the write funnel (memories.funnel.replace_store): the full-text index
follows, and every process's vector index and a shared Qdrant learn of it from the change feed.
"""
from __future__ import annotations

import contextlib
import hashlib
import logging
import shutil
import sqlite3
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.utils import timezone

from bhgbrain_site.core.contracts import SUMMARY_MAX
from bhgbrain_site.core.errors import InvalidInput, NotFound
from bhgbrain_site.core.progress import Progress
from categories.models import Category, CategoryRevision
from memories import funnel, incoming
from memories.models import BootstrapSession, Collection, Memory, MemoryRevision, MemorySource, MemoryType, Operation, RetentionTier
from memories.pipeline.normalize import checksum
from retention.backups.bhgb_format import CHUNK, SUFFIX, backups_dir, read_header, work_prefix
from retention.backups.create import backup_create, model_header
from retention.models import ArchivedMemory

logger = logging.getLogger("bhgbrain.retention")

_restore_lock = threading.Lock()


@contextlib.contextmanager
def exclusive_restore() -> Iterator[None]:
    """One restore at a time: in this process (lock) and across processes (lock file); a second
    one meanwhile is refused (INVALID_INPUT)."""
    if not _restore_lock.acquire(blocking=False):
        raise InvalidInput("Backup restore already in progress")
    try:
        try:
            import fcntl
        except ImportError:  # not POSIX: the in-process lock is all there is
            yield
            return
        with (backups_dir() / ".restore.lock").open("w") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise InvalidInput("Backup restore already in progress") from None
            yield
    finally:
        _restore_lock.release()


def _resolve(path: str, allow_any_path: bool) -> Path:
    """The backup file ``path`` names, symlinks and ``..`` resolved: INVALID_INPUT for one the
    filesystem cannot even look up (``~user`` of no such user, a name too long, a symlink loop)."""
    try:
        return _resolved_backup(path, allow_any_path)
    except (OSError, RuntimeError, ValueError) as exc:  # pathlib's "~user" and symlink loops; NUL, not UTF-8
        raise InvalidInput(f"Invalid input: path: {getattr(exc, 'strerror', None) or exc}", field="path") from None


def _resolved_backup(path: str, allow_any_path: bool) -> Path:
    candidate = Path(path).expanduser()
    if not candidate.is_absolute():
        raise InvalidInput("Invalid input: path must be an absolute path to a .bhgb file", field="path")
    if candidate.suffix != SUFFIX:
        raise InvalidInput("Invalid input: path must name a .bhgb file", field="path")
    resolved = candidate.resolve()
    if not allow_any_path and resolved.parent != backups_dir().resolve():
        raise InvalidInput(
            f"Invalid input: path: restore reads backups from {backups_dir()} only; copy the file there "
            "or run `bhgbrain backup restore PATH` on the server", field="path",
        )
    if not resolved.is_file():
        raise NotFound("Backup file not found")
    return resolved


def _unpack(path: Path, work: Path) -> tuple[dict[str, Any], Path]:
    """Verify the checksum while copying the database part out of the container."""
    header = read_header(path)
    db_path, digest = work / "restore.sqlite3", hashlib.sha256()
    with path.open("rb") as src, db_path.open("wb") as out:
        src.seek(header["_offset"])
        while chunk := src.read(1 << 20):
            digest.update(chunk)
            out.write(chunk)
    if digest.hexdigest() != header["checksum"]:
        raise InvalidInput("Backup integrity check failed")
    return header, db_path


def _open_backup_db(db_path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    db.row_factory = sqlite3.Row
    try:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError:
        db.close()
        raise InvalidInput("Not a BHGBrain backup: the payload is not an SQLite database") from None
    if "memories" not in tables:
        db.close()
        raise InvalidInput("Not a BHGBrain backup: it has no memories table")
    return db


def _rows(db: sqlite3.Connection, table: str) -> Iterator[sqlite3.Row]:
    exists = db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", [table]).fetchone()
    if exists:
        yield from db.execute(f"SELECT * FROM {table}")  # noqa: S608 - table names are ours


def _get(row: sqlite3.Row, key: str, default: Any = None) -> Any:
    return row[key] if key in row.keys() and row[key] is not None else default


@dataclass
class IdPlan:
    """The id each of a backup's memories gets in the store, decided before any is loaded, so a
    fact's ``superseded_by`` can follow its successor wherever that row comes: a UUID keeps its
    own, any other id a new one; a second live copy of a fact (the original had no unique
    constraint) is dropped and its id leads to the first copy's."""

    ids: dict[str, uuid.UUID] = field(default_factory=dict)
    dropped: dict[str, uuid.UUID] = field(default_factory=dict)

    def successor(self, raw: Any, own: uuid.UUID) -> uuid.UUID | None:
        """The store's id of the successor named ``raw`` (one outside the memories table, an archived
        version, keeps its id); None for none, or for a copy of the memory itself."""
        if not raw:
            return None
        text = str(raw)
        found = self.ids.get(text) or self.dropped.get(text) or incoming.uuid_or_none(text)
        return found if found != own else None


def _unique_key(row: sqlite3.Row) -> tuple[str, ...] | None:
    """What the store's unique constraints let only one live memory hold: a message id; a
    thread's words (without a message id); a current fact's words. None: nothing."""
    namespace = incoming.namespace(row["namespace"])
    if _get(row, "message_id"):
        return ("message", namespace, str(row["message_id"]))
    if bool(_get(row, "archived", 0)):
        return None
    if _get(row, "thread"):
        return ("thread", namespace, str(row["thread"]), str(row["checksum"]))
    return None if _get(row, "superseded_by") else ("fact", namespace, str(row["checksum"]))


def _id_plan(db: sqlite3.Connection) -> IdPlan:
    plan, first = IdPlan(), {}
    for row in _rows(db, "memories"):
        raw, key = str(row["id"]), _unique_key(row)
        new = incoming.uuid_or_none(raw) or uuid.uuid4()
        if key is not None and key in first:
            plan.dropped[raw] = first[key]
            continue
        if key is not None:
            first[key] = new
        plan.ids[raw] = new
    return plan


def _temporal(row: sqlite3.Row, own: uuid.UUID, plan: IdPlan, now: datetime) -> dict[str, Any]:
    """A fact's place in time (memories.incoming.validity; absent from the original's backups:
    valid from its occurrence or creation, current, no key), its successor's id as the store has it."""
    fields = incoming.validity(lambda key: _get(row, key))
    fields["valid_from"] = (fields["valid_from"] or incoming.when(_get(row, "occurred_at"))
                            or incoming.when(_get(row, "created_at"), now))
    fields["superseded_by"] = plan.successor(_get(row, "superseded_by"), own)
    return fields


def _memory_from(row: sqlite3.Row, now: datetime, model_id: str | None, plan: IdPlan) -> Memory:
    embedding = _get(row, "embedding")
    embedding_model = _get(row, "embedding_model", "")
    own = plan.ids[str(row["id"])]
    return Memory(
        id=own, namespace=incoming.namespace(row["namespace"]),
        collection=incoming.collection(_get(row, "collection")),
        type=incoming.choice_or(_get(row, "type"), MemoryType.values, MemoryType.SEMANTIC), category=_get(row, "category"),
        content=str(row["content"]), summary=str(_get(row, "summary", ""))[:SUMMARY_MAX], tags=incoming.tags(_get(row, "tags", "[]")),
        source=incoming.choice_or(_get(row, "source"), MemorySource.values, MemorySource.IMPORT),
        checksum=str(row["checksum"]), importance=incoming.unit_interval(_get(row, "importance", 0.5)),
        retention_tier=incoming.choice_or(_get(row, "retention_tier"), RetentionTier.values, RetentionTier.T2),
        expires_at=incoming.when(_get(row, "expires_at")), decay_eligible=bool(_get(row, "decay_eligible", 1)),
        review_due=incoming.when(_get(row, "review_due")), access_count=incoming.count(_get(row, "access_count", 0)),
        last_accessed=incoming.when(_get(row, "last_accessed")),
        last_operation=incoming.choice_or(_get(row, "last_operation"), Operation.values, Operation.ADD),
        merged_from=_get(row, "merged_from"), stale=bool(_get(row, "stale", 0)), archived=bool(_get(row, "archived", 0)),
        device_id=_get(row, "device_id"), embedding=bytes(embedding) if embedding is not None else None,
        embedding_model=embedding_model if embedding is not None else "",
        vector_synced=embedding is not None and embedding_model == model_id,
        created_at=incoming.when(_get(row, "created_at"), now), updated_at=incoming.when(_get(row, "updated_at"), now),
        **{**incoming.conversation(lambda key: _get(row, key)), **_temporal(row, own, plan, now)},
    )


def _clear_others() -> None:
    """What the store holds beside the memories and the audit log (the funnel clears those)."""
    for model in (MemoryRevision, Collection, CategoryRevision, Category, BootstrapSession, ArchivedMemory):
        model.objects.all().delete()


def _restore_memories(db: sqlite3.Connection, store: funnel.StoreReplacement, plan: IdPlan, now: datetime,
                      report: Callable[[int], None]) -> tuple[int, int]:
    model_id, _ = model_header()
    restored = skipped = 0
    batch: list[Memory] = []
    current_keys: set[tuple[str, str]] = set()
    for row in _rows(db, "memories"):
        if str(row["id"]) in plan.dropped:
            skipped += 1  # the original had no unique constraint: keep the first live copy
            continue
        memory = _memory_from(row, now, model_id, plan)
        _one_current_per_key(memory, current_keys)
        batch.append(memory)
        if len(batch) >= CHUNK:
            restored += _load(store, batch)
            report(restored)
    restored += _load(store, batch)
    report(restored)
    return restored, skipped


def _one_current_per_key(memory: Memory, seen: set[tuple[str, str]]) -> None:
    """A file holding two current facts of one key (written by hand, or by a store whose
    constraint was missing) keeps the key on the first only (uniq_current_fact_key)."""
    if memory.archived or memory.superseded_by is not None or not memory.fact_key:
        return
    slot = (memory.namespace, memory.fact_key)
    if slot in seen:
        logger.warning("backup restore: memory %s drops key %r, held by another current fact", memory.id, memory.fact_key)
        memory.fact_key = None
    seen.add(slot)


def _load(store: funnel.StoreReplacement, batch: list[Memory]) -> int:
    store.load(batch)
    count = len(batch)
    batch.clear()
    return count


def _restore_categories(db: sqlite3.Connection, now: datetime) -> None:
    default_ns = settings.BHGBRAIN.defaults.namespace
    categories = {}
    for row in _rows(db, "categories"):
        namespace = _get(row, "namespace", default_ns)  # the original's categories are global
        categories[(namespace, row["name"])] = Category.objects.create(
            namespace=namespace, name=row["name"], slot=_get(row, "slot", "custom"), content=row["content"],
            revision=int(_get(row, "revision", 1)), updated_at=incoming.when(_get(row, "updated_at"), now),
        )
    CategoryRevision.objects.bulk_create(
        CategoryRevision(category=categories[(r["namespace"], r["name"])], revision=r["revision"], content=r["content"],
                         updated_at=incoming.when(r["updated_at"], now), updated_by=r["updated_by"])
        for r in _rows(db, "category_revisions") if (r["namespace"], r["name"]) in categories
    )


def _audit_entries(db: sqlite3.Connection, now: datetime) -> Iterator[funnel.AuditEntry]:
    for r in _rows(db, "audit_log"):
        yield funnel.AuditEntry(
            timestamp=incoming.when(r["timestamp"], now) or now, namespace=r["namespace"], operation=r["operation"],
            memory_id=incoming.uuid_or_none(r["memory_id"]), client_id=r["client_id"], details=incoming.json_object(r["details"]))


def _restore_others(db: sqlite3.Connection, store: funnel.StoreReplacement, plan: IdPlan, now: datetime) -> None:
    _restore_categories(db, now)
    Collection.objects.bulk_create(
        Collection(namespace=r["namespace"], name=r["name"], embedding_model=r["embedding_model"],
                   embedding_dimensions=int(r["embedding_dimensions"]))
        for r in _rows(db, "collections")
    )
    store.load_audit(_audit_entries(db, now))
    MemoryRevision.objects.bulk_create(
        MemoryRevision(memory_id=r["memory_id"], revision=r["revision"], content=r["content"],
                       updated_at=incoming.when(r["updated_at"], now), updated_by=r["updated_by"])
        for r in _rows(db, "memory_revisions") if incoming.uuid_or_none(r["memory_id"])
    )
    BootstrapSession.objects.bulk_create(
        BootstrapSession(namespace=r["namespace"], section_number=r["section_number"], status=r["status"],
                         memory_ids=incoming.json_list(r["memory_ids"]))
        for r in _rows(db, "bootstrap_sessions")
    )
    ArchivedMemory.objects.bulk_create((_archived_from(r, plan, now) for r in _rows(db, "memory_archive")),
                                       batch_size=CHUNK)


def _archived_from(row: sqlite3.Row, plan: IdPlan, now: datetime) -> ArchivedMemory:
    """Ours carry everything; the original's rows only a summary, which becomes the content."""
    summary = str(_get(row, "summary", ""))
    content = str(_get(row, "content", summary))
    embedding = _get(row, "embedding")
    own = incoming.uuid_or_none(row["memory_id"]) or uuid.uuid4()
    return ArchivedMemory(
        memory_id=own, namespace=incoming.namespace(row["namespace"]),
        collection=incoming.collection(_get(row, "collection")),
        type=incoming.choice_or(_get(row, "type"), MemoryType.values, MemoryType.SEMANTIC), category=_get(row, "category"),
        content=content, summary=summary[:SUMMARY_MAX], tags=incoming.tags(_get(row, "tags", "[]")),
        source=incoming.choice_or(_get(row, "source"), MemorySource.values, MemorySource.IMPORT),
        checksum=str(_get(row, "checksum", checksum(content))), importance=incoming.unit_interval(_get(row, "importance", 0.5)),
        tier=incoming.choice_or(_get(row, "tier"), RetentionTier.values, RetentionTier.T2),
        access_count=incoming.count(_get(row, "access_count", 0)), last_accessed=incoming.when(_get(row, "last_accessed")),
        device_id=_get(row, "device_id"), embedding=bytes(embedding) if embedding is not None else None,
        embedding_model=_get(row, "embedding_model", "") if embedding is not None else "",
        created_at=incoming.when(_get(row, "created_at"), now), expired_at=incoming.when(_get(row, "expired_at"), now),
        restored_at=incoming.when(_get(row, "restored_at")),
        **{**incoming.conversation(lambda key: _get(row, key)), **_temporal(row, own, plan, now)},
    )


def _replace_store(db: sqlite3.Connection, source: Path, header: dict[str, Any], previous: str,
                   actor: str, progress: Progress | None) -> tuple[int, int]:
    """The store becomes the backup's, in one transaction: (memories restored, duplicates skipped)."""
    now = timezone.now()
    total = header.get("memory_count") if isinstance(header.get("memory_count"), int) else None

    def report(done: int) -> None:
        if progress is not None:
            progress("restoring memories", done, total)

    with funnel.replace_store(actor=actor, at=now) as store:
        store.clear()
        _clear_others()
        plan = _id_plan(db)
        restored, skipped = _restore_memories(db, store, plan, now, report)
        _restore_others(db, store, plan, now)
        store.audit = funnel.Audit("RESTORE", actor, {
            "path": str(source), "memory_count": restored, "duplicates_skipped": skipped,
            "previous_backup": previous, "producer": header.get("producer", "bhgbrain")})
    return restored, skipped


def _stage(progress: Progress | None, stage: str) -> Progress | None:
    """``progress`` with every report renamed to ``stage``."""
    if progress is None:
        return None
    return lambda _stage, done, total: progress(stage, done, total)


def backup_restore(*, path: str, actor: str, allow_any_path: bool = False,
                   progress: Progress | None = None) -> dict[str, Any]:
    """Replace the whole store with a backup's content, live (no restart).

    The current store is saved first as a ``pre-restore`` backup, so a restore can be undone.
    Memories whose vectors came with the backup (and match the current model) are searchable
    at once; the others are embedded by the scheduled ``vector_sync`` and are full-text
    searchable meanwhile. ``allow_any_path``: read a file outside <data_dir>/backups (the CLI,
    which runs on the server as its owner). ``progress`` hears the pre-restore backup
    ("saving the current store", ...) then ("restoring memories", restored, total).
    """
    source = _resolve(path, allow_any_path)
    with exclusive_restore():
        _remove_abandoned_work()
        return _restore_from(source, actor, progress)


def _remove_abandoned_work() -> None:
    """The working folders of restores killed before they could tidy up (each holds a copy of a
    backup's database): no restore runs but this one, so none is in use."""
    for abandoned in backups_dir().glob(".restore-*"):
        shutil.rmtree(abandoned, ignore_errors=True)


def _restore_from(source: Path, actor: str, progress: Progress | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(dir=backups_dir(), prefix=work_prefix("restore")) as work:
        header, db_path = _unpack(source, Path(work))
        db = _open_backup_db(db_path)
        try:
            previous = backup_create(actor=actor, label="pre-restore", progress=_stage(progress, "saving the current store"))
            restored, skipped = _replace_store(db, source, header, previous.path, actor, progress)
        finally:
            db.close()
    pending = Memory.objects.filter(vector_synced=False, archived=False).count()
    logger.info("backup restored: %s (%d memories, %d duplicates skipped; the previous store saved as %s)",
                source.name, restored, skipped, Path(previous.path).name)
    return {
        "memory_count": restored, "activated": True, "previous_backup": previous.path,
        "duplicates_skipped": skipped, "vectors_pending": pending,
    }
