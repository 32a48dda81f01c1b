"""Backups, export side: the whole store in one ``.bhgb`` file (format: bhgb_format.py).

The export is read inside one transaction, so it is a consistent snapshot whichever database
serves the store.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import sqlite3
import struct
import tempfile
import uuid
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from bhgbrain_site.core.progress import Progress
from categories.models import Category, CategoryRevision
from memories import funnel
from memories.embeddings import get_embedder
from memories.models import AuditLog, BootstrapSession, Collection, Memory, MemoryRevision
from memories.selectors import iso
from retention.backups.bhgb_format import (
    CHUNK,
    FORMAT_VERSION,
    PRODUCER,
    SCHEMA,
    SUFFIX,
    BackupInfo,
    backups_dir,
    leftovers_remove,
    sha256_of,
    work_prefix,
)
from retention.models import ArchivedMemory, BackupRecord

logger = logging.getLogger("bhgbrain.retention")


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
            bytes(m.embedding) if m.embedding is not None else None, m.embedding_model, *_conversation(m),
        )


def _conversation(m: Memory | ArchivedMemory) -> tuple[Any, ...]:
    return (m.thread, m.speaker, iso(m.occurred_at), m.message_id, iso(m.event_at), iso(m.valid_until), m.status,
            iso(m.valid_from), str(m.superseded_by) if m.superseded_by else None, m.fact_key)


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
             bytes(a.embedding) if a.embedding is not None else None, a.embedding_model, iso(a.restored_at),
             *_conversation(a))
            for a in ArchivedMemory.objects.order_by("id").iterator(chunk_size=CHUNK)
        ),
    }


def _insert_all(db: sqlite3.Connection, table: str, rows: Iterable[tuple[Any, ...]],
                report: Callable[[int], None] | None = None) -> int:
    """Insert ``rows`` in batches; ``report`` hears the running count after each batch."""
    count, batch = 0, []
    for row in rows:
        batch.append(row)
        if len(batch) >= CHUNK:
            count += _flush(db, table, batch)
            if report is not None:
                report(count)
    count += _flush(db, table, batch)
    if report is not None:
        report(count)
    return count


def _flush(db: sqlite3.Connection, table: str, batch: list[tuple[Any, ...]]) -> int:
    if not batch:
        return 0
    marks = ", ".join("?" * len(batch[0]))
    db.executemany(f"INSERT INTO {table} VALUES ({marks})", batch)  # noqa: S608 - table names are ours
    count = len(batch)
    batch.clear()
    return count


def _memory_counter(progress: Progress | None) -> Callable[[int], None] | None:
    """Reports ("memories", exported, total) to ``progress`` (inside the snapshot: total is its count)."""
    if progress is None:
        return None
    total = Memory.objects.count()
    progress("memories", 0, total)
    return lambda done: progress("memories", done, total)


def _export(target: Path, progress: Progress | None) -> int:
    """Write the store into a new SQLite file at ``target``; returns the number of memories."""
    db = sqlite3.connect(target)
    try:
        db.executescript(SCHEMA)
        with _snapshot():
            memory_count = _insert_all(db, "memories", _memory_rows(), _memory_counter(progress))
            for table, rows in _other_rows().items():
                _insert_all(db, table, rows)
        db.commit()
    finally:
        db.close()
    return memory_count


def model_header() -> tuple[str | None, int | None]:
    """The configured embedding model and its dimensions (None, None in degraded mode)."""
    embedder = get_embedder()
    return (embedder.model_id, embedder.dimensions) if embedder is not None else (None, None)


def _write_container(db_path: Path, target: Path, header: dict[str, Any]) -> None:
    """Header + database bytes, written to a temporary file and renamed (never half a backup)."""
    raw = json.dumps(header, separators=(",", ":")).encode()
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=work_prefix("partial"), suffix=SUFFIX)
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


def _new_backup_path(now: datetime, label: str) -> Path:
    stamp = now.astimezone(UTC).strftime("%Y-%m-%dT%H-%M-%S-%f")[:-3] + "Z"
    path = backups_dir() / f"{stamp}{'-' + label if label else ''}{SUFFIX}"
    return path if not path.exists() else path.with_name(f"{path.stem}-{uuid.uuid4().hex[:6]}{SUFFIX}")


def backup_create(*, actor: str, label: str = "", progress: Progress | None = None) -> BackupInfo:
    """Snapshot the whole store into ``<data_dir>/backups/<timestamp>.bhgb``; ``progress``
    hears ("memories", exported, total) as the memories are written."""
    now = timezone.now()
    leftovers_remove()  # what a killed backup left behind
    target = _new_backup_path(now, label)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=work_prefix("export")) as work:
        db_path = Path(work) / "store.sqlite3"
        memory_count = _export(db_path, progress)
        model, dims = model_header()
        header = {
            "version": FORMAT_VERSION, "producer": PRODUCER, "memory_count": memory_count,
            "checksum": sha256_of(db_path), "created_at": iso(now),
            "embedding_model": model, "embedding_dimensions": dims,
        }
        _write_container(db_path, target, header)
    info = BackupInfo(str(target), target.stat().st_size, memory_count, iso(now) or "")
    BackupRecord.objects.update_or_create(
        path=info.path,
        defaults={"size_bytes": info.size_bytes, "memory_count": memory_count, "checksum": header["checksum"],
                  "created_at": now},
    )
    funnel.record_audit(operation="BACKUP", actor=actor, namespace="*", at=now,
                        details={"path": info.path, "memory_count": memory_count, "size_bytes": info.size_bytes})
    logger.info("backup created: %s (%d memories, %d bytes)", target.name, memory_count, info.size_bytes)
    return info
