"""The ``.bhgb`` backup format, shared by export (create.py) and import (restore.py).

File format (the original BHGBrain's container, so its backups restore here too)::

    [4 bytes: header length, uint32 little-endian][JSON header][SQLite database bytes]

The header holds ``version`` 1, ``memory_count``, ``checksum`` (sha256 hex of the database
bytes), ``created_at``, ``embedding_model`` and ``embedding_dimensions``; ours adds
``producer``. The database uses the original's table layout (memories, categories,
collections, audit_log, memory_revisions, memory_archive, bootstrap_sessions) plus what we
keep beyond it: each memory's ``embedding`` and ``embedding_model`` (a restore re-embeds
nothing), its conversation fields (``thread speaker occurred_at message_id``) and event fields
(``event_at valid_until status``), its place in time (``valid_from superseded_by fact_key``:
a fact's versions and their validity, issue 42), categories per namespace and their revisions,
archived memories in full.

A restore keeps every fact chain: ``superseded_by`` follows a memory whose id the restore changes
(a duplicate the original's store could hold is dropped for its first copy; an id that is not a
UUID gets a new one). A backup without these columns (the original BHGBrain's, or ours before
them) loads with ``valid_from`` = ``occurred_at`` or ``created_at``, every memory current.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import socket
import struct
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

from bhgbrain_site.core.errors import InvalidInput
from memories.selectors import iso
from retention.models import BackupRecord

FORMAT_VERSION = 1
PRODUCER = "bhgbrain-django"
SUFFIX = ".bhgb"
MAX_HEADER_BYTES = 1 << 20
CHUNK = 2000

SCHEMA = """
CREATE TABLE memories (
    id TEXT PRIMARY KEY, namespace TEXT NOT NULL, collection TEXT NOT NULL, type TEXT NOT NULL,
    category TEXT, content TEXT NOT NULL, summary TEXT NOT NULL, tags TEXT NOT NULL, source TEXT NOT NULL,
    checksum TEXT NOT NULL, importance REAL NOT NULL, retention_tier TEXT NOT NULL, expires_at TEXT,
    decay_eligible INTEGER NOT NULL, review_due TEXT, access_count INTEGER NOT NULL, last_operation TEXT NOT NULL,
    merged_from TEXT, stale INTEGER NOT NULL, archived INTEGER NOT NULL, vector_synced INTEGER NOT NULL,
    device_id TEXT, created_at TEXT NOT NULL, updated_at TEXT NOT NULL, last_accessed TEXT,
    embedding BLOB, embedding_model TEXT NOT NULL DEFAULT '',
    thread TEXT, speaker TEXT, occurred_at TEXT, message_id TEXT, event_at TEXT, valid_until TEXT, status TEXT,
    valid_from TEXT, superseded_by TEXT, fact_key TEXT
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
    embedding BLOB, embedding_model TEXT NOT NULL DEFAULT '', restored_at TEXT,
    thread TEXT, speaker TEXT, occurred_at TEXT, message_id TEXT, event_at TEXT, valid_until TEXT, status TEXT,
    valid_from TEXT, superseded_by TEXT, fact_key TEXT
);
CREATE TABLE bootstrap_sessions (
    namespace TEXT NOT NULL, section_number INTEGER NOT NULL, status TEXT NOT NULL, memory_ids TEXT NOT NULL,
    updated_at TEXT NOT NULL, PRIMARY KEY (namespace, section_number)
);
"""

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


# --------------------------------------------------------------------------- work files

logger = logging.getLogger("bhgbrain.backups")
HOST = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname())[:64] or "host"
LEFTOVER = re.compile(r"^\.(export|partial|restore)-(?:(\d+)@([A-Za-z0-9._-]+)~)?")
UNOWNED_AFTER_S = 24 * 3600  # a work file of another host, or of an older release, untouched this long


def work_prefix(kind: str) -> str:
    """The name prefix of a backup's work file or folder (``export``, ``partial``, ``restore``):
    it names this process and host, so a later backup or ``gc`` can tell a killed one's leftovers
    from a running one's."""
    return f".{kind}-{os.getpid()}@{HOST}~"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def _last_touched(path: Path) -> float:
    stamps = [path.stat().st_mtime]
    if path.is_dir():
        stamps += [child.stat().st_mtime for child in path.rglob("*")]
    return max(stamps)


def _abandoned(path: Path, now: float) -> bool:
    match = LEFTOVER.match(path.name)
    if match is None:
        return False
    pid, host = match.group(2), match.group(3)
    if pid is not None and host == HOST:
        return int(pid) != os.getpid() and not _pid_alive(int(pid))
    return now - _last_touched(path) > UNOWNED_AFTER_S


def leftovers_remove(*, now: float | None = None) -> list[str]:
    """Remove the work files and folders that a killed ``backup create`` or restore left in the
    backups folder: this host's whose process is gone, and any untouched for a day (another
    host's, or written before their names carried a process). A running backup's are kept.
    Returns the names removed."""
    removed, now = [], now or time.time()
    for path in backups_dir().glob(".*"):
        try:
            if not _abandoned(path, now):
                continue
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()
        except FileNotFoundError:  # its owner finished meanwhile
            continue
        removed.append(path.name)
    if removed:
        logger.info("removed %d backup work files left by a stopped backup: %s", len(removed), ", ".join(sorted(removed)))
    return removed


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as src:
        while chunk := src.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def read_header(path: Path) -> dict[str, Any]:
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
            header = read_header(path)
        except (InvalidInput, OSError):
            continue
        count = header.get("memory_count")
        found[str(path)] = BackupInfo(
            str(path), path.stat().st_size, count if isinstance(count, int) else 0, str(header.get("created_at", ""))
        )
    return sorted(found.values(), key=lambda info: info.created_at, reverse=True)
