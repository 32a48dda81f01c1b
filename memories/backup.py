"""Backups: the whole store in one ``.bhgb`` file, restored in place while the server runs.

File format (the original BHGBrain's container, so its backups restore here too)::

    [4 bytes: header length, uint32 little-endian][JSON header][SQLite database bytes]

The header holds ``version`` 1, ``memory_count``, ``checksum`` (sha256 hex of the database
bytes), ``created_at``, ``embedding_model`` and ``embedding_dimensions``; ours adds
``producer``. The database uses the original's table layout (memories, categories,
collections, audit_log, memory_revisions, memory_archive, bootstrap_sessions) plus what we
keep beyond it: each memory's ``embedding`` and ``embedding_model`` (a restore re-embeds
nothing), categories per namespace and their revisions, archived memories in full. The export is read inside one transaction, so
it is a consistent snapshot whichever database serves the store.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import struct
import tempfile
import threading
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from datetime import datetime, timezone as dt_timezone
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from bhgbrain_site.errors import InvalidInput, NotFound
from categories.models import Category, CategoryRevision
from memories.models import (
    AuditLog, BackupRecord, BootstrapSession, Collection, Memory, MemoryRevision, MemorySource, MemoryType,
    Operation, RetentionTier, VectorChange,
)
from memories.selectors import iso
from memories.vector_index import sync_after_commit
from retention.models import ArchivedMemory

FORMAT_VERSION = 1
PRODUCER = "bhgbrain-django"
SUFFIX = ".bhgb"
MAX_HEADER_BYTES = 1 << 20
CHUNK = 2000

_SCHEMA = """
CREATE TABLE memories (
    id TEXT PRIMARY KEY, namespace TEXT NOT NULL, collection TEXT NOT NULL, type TEXT NOT NULL,
    category TEXT, content TEXT NOT NULL, summary TEXT NOT NULL, tags TEXT NOT NULL, source TEXT NOT NULL,
    checksum TEXT NOT NULL, importance REAL NOT NULL, retention_tier TEXT NOT NULL, expires_at TEXT,
    decay_eligible INTEGER NOT NULL, review_due TEXT, access_count INTEGER NOT NULL, last_operation TEXT NOT NULL,
    merged_from TEXT, stale INTEGER NOT NULL, archived INTEGER NOT NULL, vector_synced INTEGER NOT NULL,
    device_id TEXT, created_at TEXT NOT NULL, updated_at TEXT NOT NULL, last_accessed TEXT,
    embedding BLOB, embedding_model TEXT NOT NULL DEFAULT ''
);
CREATE TABLE categories (
    namespace TEXT NOT NULL, name TEXT NOT NULL, slot TEXT NOT NULL, content TEXT NOT NULL,
    revision INTEGER NOT NULL, updated_at TEXT NOT NULL, PRIMARY KEY (namespace, name)
);
CREATE TABLE category_revisions (
    namespace TEXT NOT NULL, name TEXT NOT NULL, revision INTEGER NOT NULL, content TEXT NOT NULL,
    updated_at TEXT NOT NULL, updated_by TEXT NOT NULL, PRIMARY KEY (namespace, name, revision)
);
CREATE TABLE collections (
    namespace TEXT NOT NULL, name TEXT NOT NULL, embedding_model TEXT NOT NULL,
    embedding_dimensions INTEGER NOT NULL, created_at TEXT NOT NULL, PRIMARY KEY (namespace, name)
);
CREATE TABLE audit_log (
    id INTEGER PRIMARY KEY, timestamp TEXT NOT NULL, namespace TEXT NOT NULL, operation TEXT NOT NULL,
    memory_id TEXT, client_id TEXT NOT NULL, details TEXT
);
CREATE TABLE memory_revisions (
    id INTEGER PRIMARY KEY, memory_id TEXT NOT NULL, revision INTEGER NOT NULL, content TEXT NOT NULL,
    updated_at TEXT NOT NULL, updated_by TEXT NOT NULL, UNIQUE (memory_id, revision)
);
CREATE TABLE memory_archive (
    id INTEGER PRIMARY KEY, memory_id TEXT NOT NULL, summary TEXT NOT NULL, tier TEXT NOT NULL,
    namespace TEXT NOT NULL, created_at TEXT NOT NULL, expired_at TEXT NOT NULL, access_count INTEGER NOT NULL,
    tags TEXT NOT NULL, content TEXT NOT NULL, collection TEXT NOT NULL, type TEXT NOT NULL, category TEXT,
    source TEXT NOT NULL, checksum TEXT NOT NULL, importance REAL NOT NULL, last_accessed TEXT, device_id TEXT,
    embedding BLOB, embedding_model TEXT NOT NULL DEFAULT '', restored_at TEXT
);
CREATE TABLE bootstrap_sessions (
    namespace TEXT NOT NULL, section_number INTEGER NOT NULL, status TEXT NOT NULL, memory_ids TEXT NOT NULL,
    updated_at TEXT NOT NULL, PRIMARY KEY (namespace, section_number)
);
"""

_MEMORY_COLUMNS = (
    "id", "namespace", "collection", "type", "category", "content", "summary", "tags", "source", "checksum",
    "importance", "retention_tier", "expires_at", "decay_eligible", "review_due", "access_count",
    "last_operation", "merged_from", "stale", "archived", "vector_synced", "device_id", "created_at",
    "updated_at", "last_accessed", "embedding", "embedding_model",
)


@dataclass(frozen=True)
class BackupInfo:
    path: str
    size_bytes: int
    memory_count: int
    created_at: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def backups_dir() -> Path:
    path = Path(settings.BHGBRAIN_DATA_DIR) / "backups"
    path.mkdir(parents=True, exist_ok=True)
    return path


# --------------------------------------------------------------------------- create


@contextlib.contextmanager
def _snapshot() -> Iterator[None]:
    """One transaction whose reads all see the same state (PostgreSQL needs REPEATABLE READ)."""
    outermost = not connection.in_atomic_block
    with transaction.atomic():
        if connection.vendor == "postgresql" and outermost:
            with connection.cursor() as cursor:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        yield


def _bool(value: bool) -> int:
    return 1 if value else 0


def _memory_rows() -> Iterator[tuple[Any, ...]]:
    for m in Memory.objects.order_by("created_at", "id").iterator(chunk_size=CHUNK):
        yield (
            str(m.id), m.namespace, m.collection, m.type, m.category, m.content, m.summary,
            json.dumps(m.tags, ensure_ascii=False), m.source, m.checksum, m.importance, m.retention_tier,
            iso(m.expires_at), _bool(m.decay_eligible), iso(m.review_due), m.access_count, m.last_operation,
            m.merged_from, _bool(m.stale), _bool(m.archived), _bool(m.vector_synced), m.device_id,
            iso(m.created_at), iso(m.updated_at), iso(m.last_accessed),
            bytes(m.embedding) if m.embedding is not None else None, m.embedding_model,
        )


def _other_rows() -> dict[str, Iterable[tuple[Any, ...]]]:
    return {
        "categories": (
            (c.namespace, c.name, c.slot, c.content, c.revision, iso(c.updated_at)) for c in Category.objects.all()
        ),
        "category_revisions": (
            (r.category.namespace, r.category.name, r.revision, r.content, iso(r.updated_at), r.updated_by)
            for r in CategoryRevision.objects.select_related("category")
        ),
        "collections": (
            (c.namespace, c.name, c.embedding_model, c.embedding_dimensions, iso(c.created_at))
            for c in Collection.objects.all()
        ),
        "audit_log": (
            (a.id, iso(a.timestamp), a.namespace, a.operation, str(a.memory_id) if a.memory_id else None,
             a.client_id, json.dumps(a.details, ensure_ascii=False))
            for a in AuditLog.objects.order_by("id").iterator(chunk_size=CHUNK)
        ),
        "memory_revisions": (
            (r.id, str(r.memory_id), r.revision, r.content, iso(r.updated_at), r.updated_by)
            for r in MemoryRevision.objects.order_by("id")
        ),
        "bootstrap_sessions": (
            (b.namespace, b.section_number, b.status, json.dumps(b.memory_ids), iso(b.updated_at))
            for b in BootstrapSession.objects.all()
        ),
        "memory_archive": (
            (a.id, str(a.memory_id), a.summary, a.tier, a.namespace, iso(a.created_at), iso(a.expired_at),
             a.access_count, json.dumps(a.tags, ensure_ascii=False), a.content, a.collection, a.type, a.category,
             a.source, a.checksum, a.importance, iso(a.last_accessed), a.device_id,
             bytes(a.embedding) if a.embedding is not None else None, a.embedding_model, iso(a.restored_at))
            for a in ArchivedMemory.objects.order_by("id").iterator(chunk_size=CHUNK)
        ),
    }


def _insert_all(db: sqlite3.Connection, table: str, rows: Iterable[tuple[Any, ...]]) -> int:
    count, batch = 0, []
    for row in rows:
        batch.append(row)
        if len(batch) >= CHUNK:
            count += _flush(db, table, batch)
    return count + _flush(db, table, batch)


def _flush(db: sqlite3.Connection, table: str, batch: list[tuple[Any, ...]]) -> int:
    if not batch:
        return 0
    marks = ", ".join("?" * len(batch[0]))
    db.executemany(f"INSERT INTO {table} VALUES ({marks})", batch)  # noqa: S608 - table names are ours
    count = len(batch)
    batch.clear()
    return count


def _export(target: Path) -> int:
    """Write the store into a new SQLite file at ``target``; returns the number of memories."""
    db = sqlite3.connect(target)
    try:
        db.executescript(_SCHEMA)
        with _snapshot():
            memory_count = _insert_all(db, "memories", _memory_rows())
            for table, rows in _other_rows().items():
                _insert_all(db, table, rows)
        db.commit()
    finally:
        db.close()
    return memory_count


def _model_header() -> tuple[str | None, int | None]:
    from memories.embeddings import get_embedder

    embedder = get_embedder()
    return (embedder.model_id, embedder.dimensions) if embedder is not None else (None, None)


def _write_container(db_path: Path, target: Path, header: dict[str, Any]) -> None:
    """Header + database bytes, written to a temporary file and renamed (never half a backup)."""
    raw = json.dumps(header, separators=(",", ":")).encode()
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".partial-", suffix=SUFFIX)
    try:
        with os.fdopen(fd, "wb") as out, db_path.open("rb") as src:
            out.write(struct.pack("<I", len(raw)) + raw)
            while chunk := src.read(1 << 20):
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as src:
        while chunk := src.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _new_backup_path(now: datetime, label: str) -> Path:
    stamp = now.astimezone(dt_timezone.utc).strftime("%Y-%m-%dT%H-%M-%S-%f")[:-3] + "Z"
    path = backups_dir() / f"{stamp}{'-' + label if label else ''}{SUFFIX}"
    return path if not path.exists() else path.with_name(f"{path.stem}-{uuid.uuid4().hex[:6]}{SUFFIX}")


def backup_create(*, actor: str, label: str = "") -> BackupInfo:
    """Snapshot the whole store into ``<data_dir>/backups/<timestamp>.bhgb``."""
    now = timezone.now()
    target = _new_backup_path(now, label)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".export-") as work:
        db_path = Path(work) / "store.sqlite3"
        memory_count = _export(db_path)
        model, dims = _model_header()
        header = {
            "version": FORMAT_VERSION, "producer": PRODUCER, "memory_count": memory_count,
            "checksum": _sha256(db_path), "created_at": iso(now),
            "embedding_model": model, "embedding_dimensions": dims,
        }
        _write_container(db_path, target, header)
    info = BackupInfo(str(target), target.stat().st_size, memory_count, iso(now) or "")
    BackupRecord.objects.update_or_create(
        path=info.path,
        defaults={"size_bytes": info.size_bytes, "memory_count": memory_count, "checksum": header["checksum"],
                  "created_at": now},
    )
    AuditLog.objects.create(
        timestamp=now, namespace="*", operation="BACKUP", client_id=actor,
        details={"path": info.path, "memory_count": memory_count, "size_bytes": info.size_bytes},
    )
    return info


# --------------------------------------------------------------------------- list


def _read_header(path: Path) -> dict[str, Any]:
    with path.open("rb") as src:
        size_raw = src.read(4)
        if len(size_raw) != 4:
            raise InvalidInput("Not a BHGBrain backup: the file is too short")
        (size,) = struct.unpack("<I", size_raw)
        if size == 0 or size > MAX_HEADER_BYTES:
            raise InvalidInput("Not a BHGBrain backup: bad header length")
        try:
            header = json.loads(src.read(size))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise InvalidInput("Not a BHGBrain backup: the header is not JSON") from None
    if not isinstance(header, dict) or not isinstance(header.get("checksum"), str):
        raise InvalidInput("Not a BHGBrain backup: the header has no checksum")
    if header.get("version") != FORMAT_VERSION:
        raise InvalidInput(f"Unsupported backup version: {str(header.get('version'))[:20]}")
    header["_offset"] = 4 + size
    return header


def backups_list() -> list[BackupInfo]:
    """Recorded backups whose file still exists, plus any .bhgb file copied into the folder."""
    found: dict[str, BackupInfo] = {}
    for record in BackupRecord.objects.all():
        path = Path(record.path)
        if path.is_file():
            found[record.path] = BackupInfo(record.path, path.stat().st_size, record.memory_count, iso(record.created_at) or "")
    for path in backups_dir().glob(f"*{SUFFIX}"):
        if str(path) in found or path.name.startswith("."):
            continue
        try:
            header = _read_header(path)
        except (InvalidInput, OSError):
            continue
        count = header.get("memory_count")
        found[str(path)] = BackupInfo(
            str(path), path.stat().st_size, count if isinstance(count, int) else 0, str(header.get("created_at", ""))
        )
    return sorted(found.values(), key=lambda info: info.created_at, reverse=True)


# --------------------------------------------------------------------------- restore

_restore_lock = threading.Lock()


@contextlib.contextmanager
def _exclusive_restore() -> Iterator[None]:
    """One restore at a time: in this process (lock) and across processes (lock file)."""
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
    candidate = Path(path).expanduser()
    if not candidate.is_absolute():
        raise InvalidInput("Invalid input: path must be an absolute path to a .bhgb file")
    if candidate.suffix != SUFFIX:
        raise InvalidInput("Invalid input: path must name a .bhgb file")
    resolved = candidate.resolve()
    if not allow_any_path and resolved.parent != backups_dir().resolve():
        raise InvalidInput(
            f"Invalid input: restore reads backups from {backups_dir()} only; copy the file there "
            "or run `bhgbrain backup restore PATH` on the server"
        )
    if not resolved.is_file():
        raise NotFound("Backup file not found")
    return resolved


def _unpack(path: Path, work: Path) -> tuple[dict[str, Any], Path]:
    """Verify the checksum while copying the database part out of the container."""
    header = _read_header(path)
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


def _when(value: Any, default: datetime | None = None) -> datetime | None:
    if not isinstance(value, str) or not value:
        return default
    parsed = parse_datetime(value.replace("Z", "+00:00"))
    if parsed is None:
        return default
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt_timezone.utc)


def _json_list(value: Any) -> list[Any]:
    try:
        parsed = json.loads(value) if isinstance(value, str) else value
    except json.JSONDecodeError:
        return []
    return parsed if isinstance(parsed, list) else []


def choice_or(value: Any, allowed: Iterable[str], default: str) -> str:
    """``value`` if it is one of ``allowed`` (foreign data: old backups, Qdrant payloads), else ``default``."""
    return value if value in set(allowed) else default


def _memory_from(row: sqlite3.Row, now: datetime, model_id: str | None) -> Memory:
    embedding = _get(row, "embedding")
    embedding_model = _get(row, "embedding_model", "")
    tags = [t for t in _json_list(_get(row, "tags", "[]")) if isinstance(t, str)][:20]
    try:
        memory_id = uuid.UUID(str(row["id"]))
    except ValueError:
        memory_id = uuid.uuid4()
    return Memory(
        id=memory_id, namespace=str(row["namespace"])[:200], collection=str(_get(row, "collection", "general"))[:100],
        type=choice_or(_get(row, "type"), MemoryType.values, MemoryType.SEMANTIC), category=_get(row, "category"),
        content=str(row["content"]), summary=str(_get(row, "summary", ""))[:120], tags=tags,
        source=choice_or(_get(row, "source"), MemorySource.values, MemorySource.IMPORT),
        checksum=str(row["checksum"]), importance=min(1.0, max(0.0, float(_get(row, "importance", 0.5)))),
        retention_tier=choice_or(_get(row, "retention_tier"), RetentionTier.values, RetentionTier.T2),
        expires_at=_when(_get(row, "expires_at")), decay_eligible=bool(_get(row, "decay_eligible", 1)),
        review_due=_when(_get(row, "review_due")), access_count=max(0, int(_get(row, "access_count", 0))),
        last_accessed=_when(_get(row, "last_accessed")),
        last_operation=choice_or(_get(row, "last_operation"), Operation.values, Operation.ADD),
        merged_from=_get(row, "merged_from"), stale=bool(_get(row, "stale", 0)), archived=bool(_get(row, "archived", 0)),
        device_id=_get(row, "device_id"), embedding=bytes(embedding) if embedding is not None else None,
        embedding_model=embedding_model if embedding is not None else "",
        vector_synced=embedding is not None and embedding_model == model_id,
        created_at=_when(_get(row, "created_at"), now), updated_at=_when(_get(row, "updated_at"), now),
    )


def _clear_store() -> None:
    from search.fulltext import clear_all

    for model in (Memory, MemoryRevision, AuditLog, Collection, CategoryRevision, Category, BootstrapSession,
                  ArchivedMemory):
        model.objects.all().delete()
    clear_all()


def _restore_memories(db: sqlite3.Connection, now: datetime) -> tuple[int, int]:
    from search.fulltext import index_memory

    model_id, _ = _model_header()
    seen: set[tuple[str, str]] = set()
    restored = skipped = 0
    batch: list[Memory] = []
    for row in _rows(db, "memories"):
        memory = _memory_from(row, now, model_id)
        key = (memory.namespace, memory.checksum)
        if not memory.archived and key in seen:
            skipped += 1  # the original had no unique constraint: keep the first live copy
            continue
        if not memory.archived:
            seen.add(key)
        batch.append(memory)
        if len(batch) >= CHUNK:
            restored += _save_memories(batch, index_memory)
    return restored + _save_memories(batch, index_memory), skipped


def _save_memories(batch: list[Memory], index_memory: Any) -> int:
    Memory.objects.bulk_create(batch)
    for memory in batch:
        index_memory(memory)
    count = len(batch)
    batch.clear()
    return count


def _restore_others(db: sqlite3.Connection, now: datetime) -> None:
    default_ns = settings.BHGBRAIN.defaults.namespace
    categories = {}
    for row in _rows(db, "categories"):
        namespace = _get(row, "namespace", default_ns)  # the original's categories are global
        categories[(namespace, row["name"])] = Category.objects.create(
            namespace=namespace, name=row["name"], slot=_get(row, "slot", "custom"), content=row["content"],
            revision=int(_get(row, "revision", 1)), updated_at=_when(_get(row, "updated_at"), now),
        )
    CategoryRevision.objects.bulk_create(
        CategoryRevision(category=categories[(r["namespace"], r["name"])], revision=r["revision"], content=r["content"],
                         updated_at=_when(r["updated_at"], now), updated_by=r["updated_by"])
        for r in _rows(db, "category_revisions") if (r["namespace"], r["name"]) in categories
    )
    Collection.objects.bulk_create(
        Collection(namespace=r["namespace"], name=r["name"], embedding_model=r["embedding_model"],
                   embedding_dimensions=int(r["embedding_dimensions"]))
        for r in _rows(db, "collections")
    )
    AuditLog.objects.bulk_create(
        (AuditLog(timestamp=_when(r["timestamp"], now), namespace=r["namespace"], operation=r["operation"],
                  memory_id=_uuid_or_none(r["memory_id"]), client_id=r["client_id"], details=_details(r["details"]))
         for r in _rows(db, "audit_log")),
        batch_size=CHUNK,
    )
    MemoryRevision.objects.bulk_create(
        MemoryRevision(memory_id=r["memory_id"], revision=r["revision"], content=r["content"],
                       updated_at=_when(r["updated_at"], now), updated_by=r["updated_by"])
        for r in _rows(db, "memory_revisions") if _uuid_or_none(r["memory_id"])
    )
    BootstrapSession.objects.bulk_create(
        BootstrapSession(namespace=r["namespace"], section_number=r["section_number"], status=r["status"],
                         memory_ids=_json_list(r["memory_ids"]))
        for r in _rows(db, "bootstrap_sessions")
    )
    ArchivedMemory.objects.bulk_create((_archived_from(r, now) for r in _rows(db, "memory_archive")), batch_size=CHUNK)


def _archived_from(row: sqlite3.Row, now: datetime) -> ArchivedMemory:
    """Ours carry everything; the original's rows only a summary, which becomes the content."""
    from memories.normalize import checksum

    summary = str(_get(row, "summary", ""))
    content = str(_get(row, "content", summary))
    embedding = _get(row, "embedding")
    return ArchivedMemory(
        memory_id=_uuid_or_none(row["memory_id"]) or uuid.uuid4(), namespace=str(row["namespace"])[:200],
        collection=str(_get(row, "collection", "general"))[:100],
        type=choice_or(_get(row, "type"), MemoryType.values, MemoryType.SEMANTIC), category=_get(row, "category"),
        content=content, summary=summary[:120], tags=[t for t in _json_list(_get(row, "tags", "[]")) if isinstance(t, str)],
        source=choice_or(_get(row, "source"), MemorySource.values, MemorySource.IMPORT),
        checksum=str(_get(row, "checksum", checksum(content))), importance=min(1.0, max(0.0, float(_get(row, "importance", 0.5)))),
        tier=choice_or(_get(row, "tier"), RetentionTier.values, RetentionTier.T2),
        access_count=max(0, int(_get(row, "access_count", 0))), last_accessed=_when(_get(row, "last_accessed")),
        device_id=_get(row, "device_id"), embedding=bytes(embedding) if embedding is not None else None,
        embedding_model=_get(row, "embedding_model", "") if embedding is not None else "",
        created_at=_when(_get(row, "created_at"), now), expired_at=_when(_get(row, "expired_at"), now),
        restored_at=_when(_get(row, "restored_at")),
    )


def _uuid_or_none(value: Any) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value)) if value else None
    except ValueError:
        return None


def _details(value: Any) -> dict[str, Any]:
    try:
        parsed = json.loads(value) if isinstance(value, str) else value
    except json.JSONDecodeError:
        return {"text": str(value)[:1000]}
    return parsed if isinstance(parsed, dict) else {"value": parsed}


def backup_restore(*, path: str, actor: str, allow_any_path: bool = False) -> dict[str, Any]:
    """Replace the whole store with a backup's content, live (no restart).

    The current store is saved first as a ``pre-restore`` backup, so a restore can be undone.
    Memories whose vectors came with the backup (and match the current model) are searchable
    at once; the others are embedded by the scheduled ``vector_sync`` and are full-text
    searchable meanwhile.
    """
    source = _resolve(path, allow_any_path)
    with _exclusive_restore(), tempfile.TemporaryDirectory(dir=backups_dir(), prefix=".restore-") as work:
        header, db_path = _unpack(source, Path(work))
        db = _open_backup_db(db_path)
        try:
            previous = backup_create(actor=actor, label="pre-restore")
            now = timezone.now()
            with transaction.atomic():
                before = set(Memory.objects.values_list("id", flat=True))
                _clear_store()
                restored, skipped = _restore_memories(db, now)
                _restore_others(db, now)
                # DELETE rows only for memories this store had and the backup lacks (a shared Qdrant
                # keeps other devices' points), then a reset: every index reloads / re-upserts.
                removed = before - set(Memory.objects.values_list("id", flat=True))
                VectorChange.objects.bulk_create(
                    (VectorChange(memory_id=m, op=VectorChange.Op.DELETE) for m in removed), batch_size=CHUNK)
                VectorChange.objects.create(memory_id=uuid.UUID(int=0), op=VectorChange.Op.RESET)
                sync_after_commit()
                AuditLog.objects.create(
                    timestamp=now, namespace="*", operation="RESTORE", client_id=actor,
                    details={"path": str(source), "memory_count": restored, "duplicates_skipped": skipped,
                             "previous_backup": previous.path, "producer": header.get("producer", "bhgbrain")},
                )
        finally:
            db.close()
    pending = Memory.objects.filter(vector_synced=False, archived=False).count()
    return {
        "memory_count": restored, "activated": True, "previous_backup": previous.path,
        "duplicates_skipped": skipped, "vectors_pending": pending,
    }
