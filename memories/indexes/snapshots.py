"""Persisted snapshots of the in-process indexes (the embedded vector index, the BM25 text index).

A new process (an MCP stdio session is one per client) would otherwise rebuild both indexes
from the database. Instead it opens the last snapshot — numpy arrays memory-mapped
copy-on-write, so processes share the pages and only rows that change are copied into RAM —
and replays the change feed after the position the snapshot reflects.

Layout, under ``<data_dir>/index-snapshots/``, for one index of one store (the name carries a
hash of the database's identity, so two stores never share a snapshot):

- ``<name>.json`` — the manifest: format version, the index's parameters (model id and
  dimensions, or the analyzer version and BM25 constants), the feed position, when it was
  captured, the database's birth stamp, and each file's size and sha256;
- ``<name>.<token>/`` — the array files (``.npy``) and text files the manifest names.

A snapshot is written into a fresh directory, each file fsynced, the directory renamed, then the
manifest replaced atomically (``os.replace``); older directories are removed afterwards (a
process that has them mapped keeps its pages). Nothing is trusted blindly: a manifest of another
version or parameters, a file whose size or checksum differs, or a feed position the feed can
no longer continue from is rejected with a log line, and the index is rebuilt from the database.
A file is hashed again when opened unless it is still the very file the writer hashed (its
*seal*: device, inode, size, modification time); a stdio server hashes the files ahead, while it
starts (memories/indexes/snapshot_digests.py, which explains seals and what they cannot see).
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from django.db import connection
from django.db.migrations.recorder import MigrationRecorder
from django.db.models import Min

from bhgbrain_site.core.shared_cache import store_key
from memories.indexes import snapshot_digests
from memories.indexes.feed import RELOAD_AFTER_IDLE
from memories.models import ChangeFeedEntry

logger = logging.getLogger("bhgbrain.search")

FORMAT_VERSION = 1
WRITE_AFTER_CHANGES = 2_000  # applied changes that make a new snapshot worth writing
WRITE_AFTER_SECONDS = 600.0  # or this long after the last one, when anything changed at all
CAPTURE_ATTEMPTS = 3  # copies of an index's state tried in a row by one background write


@dataclass(frozen=True)
class FeedPosition:
    """The last change-feed row an index reflects, and that row's memory id (it identifies the
    row: a recreated database reuses ids, never the same random memory id)."""

    change_id: int
    memory_id: str | None
    pending: frozenset[int] = frozenset()  # transactions that may still commit rows below it (feed_cursor)


@dataclass
class Capture:
    """An index's state: copied under its lock and written to disk outside it, or opened from disk."""

    arrays: dict[str, np.ndarray]
    texts: dict[str, list[str]]
    meta: dict[str, Any]
    position: FeedPosition
    # Other files, by name with their suffix: written by the callable when capturing (outside the
    # index's lock), and the checked path when opening.
    files: dict[str, Callable[[Path], None]] = field(default_factory=dict)
    paths: dict[str, Path] = field(default_factory=dict)
    # Told the snapshot's final directory once it is in place (files written there may be linked).
    written: Callable[[Path], None] | None = None
    folder: Path | None = None  # opened: the directory of its files (``<stem>.npy`` for each array)
    # Arrays computed from the copies when writing, outside the index's lock (a sort of a million ids).
    derived: dict[str, Callable[[], np.ndarray]] = field(default_factory=dict)


def enabled() -> bool:
    from django.conf import settings

    return bool(settings.BHGBRAIN.index_snapshots)


def directory() -> Path:
    from django.conf import settings

    return Path(settings.BHGBRAIN_DATA_DIR) / snapshot_digests.DIRECTORY_NAME


def snapshot_name(kind: str) -> str:
    """``kind`` plus the database's identity (engine, host, port, name)."""
    return f"{kind}-{store_key(connection.settings_dict)}"


def store_birth() -> str:
    """When this database's first migration ran: a database recreated at the same path differs."""
    born = MigrationRecorder(connection).migration_qs.aggregate(first=Min("applied"))["first"]
    return born.isoformat() if born is not None else ""


# --- writing ---------------------------------------------------------------------------------

def _fsynced(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sealed_digests(manifest: dict[str, Any] | None) -> dict[tuple[int, ...], str]:
    """The digests of the sealed files of the snapshot on disk, by seal: a file linked from it
    into the next one (an unchanged graph) is the same inode, so its digest is not recomputed."""
    entries = manifest.get("files", {}) if isinstance(manifest, dict) else {}
    return {tuple(entry["seal"]): str(entry.get("sha256")) for entry in entries.values()
            if isinstance(entry, dict) and isinstance(entry.get("seal"), list)}


def _write_files(target: Path, capture: Capture, known: dict[tuple[int, ...], str]) -> dict[str, dict[str, Any]]:
    files: dict[str, dict[str, Any]] = {}
    derived = {key: make() for key, make in capture.derived.items()}
    for key, array in {**capture.arrays, **derived}.items():
        path = target / f"{key}.npy"
        np.save(path, np.ascontiguousarray(array), allow_pickle=False)
        files[path.name] = {"shape": list(array.shape), "dtype": array.dtype.str}
    for key, lines in capture.texts.items():
        path = target / f"{key}.txt"
        path.write_text("\n".join(lines), encoding="utf-8")
        files[path.name] = {"lines": len(lines)}
    for name, writer in capture.files.items():
        writer(target / name)
        files[name] = {}
    for name, entry in files.items():
        path = target / name
        _fsynced(path)
        entry["bytes"] = path.stat().st_size
        now = snapshot_digests.current_seal(path)
        if now is not None and tuple(now) in known:  # linked from the last snapshot, already hashed
            entry["sha256"], entry["seal"] = known[tuple(now)], now
            continue
        entry["sha256"], seal = snapshot_digests.sealed_sha256(path)
        if seal is not None:
            entry["seal"] = seal
    return files


@contextlib.contextmanager
def _writer_lock(root: Path, name: str) -> Iterator[bool]:
    """One writer per snapshot across processes; a busy lock means another one is writing now."""
    with (root / f"{name}.lock").open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _manifest(root: Path, name: str) -> dict[str, Any] | None:
    try:
        return json.loads((root / f"{name}.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def write(root: Path, name: str, capture: Capture, birth: str) -> bool:
    """Write ``capture`` atomically; False when another writer holds the lock or the snapshot on
    disk is already newer."""
    root.mkdir(parents=True, exist_ok=True)
    with _writer_lock(root, name) as mine:
        if not mine:
            return False
        current = _manifest(root, name)
        if current is not None and current.get("store_birth") == birth and \
                current.get("position", {}).get("change_id", -1) > capture.position.change_id:
            return False  # a process further along the feed wrote it
        _remove_unfinished(root, name)
        token = uuid.uuid4().hex[:12]
        work = root / f"{name}.{token}.tmp"
        work.mkdir()
        try:
            files = _write_files(work, capture, _sealed_digests(current))
            final = root / f"{name}.{token}"
            work.rename(final)
        except BaseException:
            shutil.rmtree(work, ignore_errors=True)
            raise
        if capture.written is not None:
            capture.written(final)
        manifest = {
            "format": FORMAT_VERSION, "meta": capture.meta, "directory": final.name, "files": files,
            "position": {"change_id": capture.position.change_id, "memory_id": capture.position.memory_id,
                         "pending": sorted(capture.position.pending)},
            "captured_at": time.time(), "store_birth": birth,
        }
        staged = root / f"{name}.json.{token}.tmp"
        staged.write_text(json.dumps(manifest), encoding="utf-8")
        _fsynced(staged)
        os.replace(staged, root / f"{name}.json")
        _fsynced(root)
        _remove_others(root, name, keep=final.name)
    return True


def _remove_unfinished(root: Path, name: str) -> None:
    """Directories of writers that were cut off (a process ending mid-write: an MCP client closes a
    short stdio session): with the writer lock held, no other writer is at work in them."""
    for path in root.glob(f"{name}.*.tmp"):
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)


def _remove_others(root: Path, name: str, keep: str) -> None:
    """Older snapshot directories and a crashed writer's leftovers (we hold the writer lock)."""
    for path in root.glob(f"{name}.*"):
        if path.is_dir() and path.name != keep:
            shutil.rmtree(path, ignore_errors=True)
        elif path.name.startswith(f"{name}.json.") and path.name.endswith(".tmp"):
            path.unlink(missing_ok=True)


# --- reading ---------------------------------------------------------------------------------

class Rejected(Exception):
    """Why a snapshot on disk is not used (logged; the index is rebuilt from the database)."""


def _check_manifest(manifest: dict[str, Any] | None, expect: dict[str, Any], required: tuple[str, ...]) -> None:
    if manifest is None:
        raise Rejected("no readable manifest")
    if manifest.get("format") != FORMAT_VERSION:
        raise Rejected(f"format {manifest.get('format')}, this version reads {FORMAT_VERSION}")
    meta = manifest.get("meta", {})
    for key, wanted in expect.items():
        if meta.get(key) != wanted:
            raise Rejected(f"{key} is {meta.get(key)!r}, the index wants {wanted!r}")
    missing = [key for key in required if key not in meta]
    if missing or not isinstance(manifest.get("files"), dict) or not isinstance(manifest.get("position"), dict):
        raise Rejected(f"the manifest lacks {', '.join(missing) or 'its files or position'}")


def _open_file(path: Path, entry: dict[str, Any], mmap_mode: str) -> np.ndarray | list[str] | Path:
    if not path.is_file() or path.stat().st_size != entry.get("bytes"):
        raise Rejected(f"{path.name} is missing or has the wrong size")
    if not snapshot_digests.is_sealed(path, entry.get("seal")) and \
            snapshot_digests.sha256(path) != entry.get("sha256"):  # computed ahead when it could be
        raise Rejected(f"{path.name} fails its checksum")
    if path.suffix == ".txt":
        text = path.read_text(encoding="utf-8")
        lines = text.split("\n") if entry.get("lines") else []
        if len(lines) != entry.get("lines"):
            raise Rejected(f"{path.name} has {len(lines)} lines, not {entry.get('lines')}")
        return lines
    if path.suffix != ".npy":
        return path  # the caller's own format: checked here, opened by the caller
    try:
        array = np.load(path, mmap_mode=mmap_mode, allow_pickle=False)  # type: ignore[call-overload]
    except ValueError as exc:
        raise Rejected(f"{path.name} is not a readable array ({exc})") from None
    if list(array.shape) != entry.get("shape") or array.dtype.str != entry.get("dtype"):
        raise Rejected(f"{path.name} has shape {array.shape} {array.dtype.str}, the manifest says otherwise")
    return np.asarray(array)  # a plain ndarray over the same mapped pages


def _open(root: Path, name: str, expect: dict[str, Any], required: tuple[str, ...], writable: frozenset[str]) -> Capture:
    manifest = _manifest(root, name)
    _check_manifest(manifest, expect, required)
    assert manifest is not None
    folder = root / str(manifest.get("directory", ""))
    arrays: dict[str, np.ndarray] = {}
    texts: dict[str, list[str]] = {}
    paths: dict[str, Path] = {}
    for file_name, entry in manifest.get("files", {}).items():
        stem = file_name.rsplit(".", 1)[0]
        # Copy-on-write where the index writes rows in place; read-only (shared, never copied) elsewhere.
        opened = _open_file(folder / file_name, entry, "c" if stem in writable else "r")
        if isinstance(opened, Path):
            paths[file_name] = opened
        elif isinstance(opened, list):
            texts[stem] = opened
        else:
            arrays[stem] = opened
    position = manifest.get("position", {})
    _check_position(FeedPosition(int(position.get("change_id", -1)), position.get("memory_id")),
                    float(manifest.get("captured_at", 0.0)), str(manifest.get("store_birth")))
    pending = frozenset(int(xid) for xid in position.get("pending", ()))
    return Capture(arrays, texts, manifest["meta"], FeedPosition(int(position["change_id"]), position.get("memory_id"), pending),
                   paths=paths, folder=folder)


def _check_position(position: FeedPosition, captured_at: float, birth: str) -> None:
    """The feed must still hold every change after ``position`` of this very database."""
    if time.time() - captured_at > RELOAD_AFTER_IDLE:
        raise Rejected("captured longer ago than the feed is kept")
    if birth != store_birth():
        raise Rejected("written for another database at this path")
    if position.change_id < 0:
        raise Rejected("no feed position")
    if position.change_id > 0:
        found = ChangeFeedEntry.objects.filter(id=position.change_id).values_list("memory_id", flat=True).first()
        if found is not None:
            if str(found) != position.memory_id:
                raise Rejected("its feed position names another change")
            return  # the feed still holds its row, so nothing after it was pruned
    oldest = ChangeFeedEntry.objects.order_by("id").values_list("id", flat=True).first()
    if oldest is not None and oldest != position.change_id + 1:
        # Older rows go first, so its own row being gone while the feed starts earlier means
        # another database, and starting later means the rows right after it were pruned.
        raise Rejected("the feed no longer continues from its position")


def read(kind: str, expect: dict[str, Any], required: tuple[str, ...] = (),
         writable: frozenset[str] = frozenset()) -> Capture | None:
    """The valid snapshot of this store's ``kind`` index, or None (missing or rejected, logged).
    ``expect``: meta values it must have; ``required``: meta keys it must hold."""
    if not enabled():
        return None
    root, name = directory(), snapshot_name(kind)
    if not (root / f"{name}.json").exists():
        logger.info("%s index: no snapshot at %s, loading from the database", kind, root)
        return None
    for attempt in range(2):  # a writer may replace it between reading the manifest and its files
        try:
            snapshot = _open(root, name, expect, required, writable)
        except (OSError, ValueError, KeyError, TypeError, EOFError):
            # Past its checksums yet unreadable (a writer's bug, a hand-edited manifest): rebuild,
            # or every search would fail on it again.
            logger.warning("%s index: snapshot %s unreadable, loading from the database", kind, name, exc_info=True)
            return None
        except Rejected as exc:
            if attempt == 0 and "missing" in str(exc):
                continue
            logger.warning("%s index: snapshot %s rejected (%s), loading from the database", kind, name, exc)
            return None
        logger.info("%s index: opened snapshot %s at feed position %d", kind, name, snapshot.position.change_id)
        return snapshot
    return None


# --- when to write ---------------------------------------------------------------------------

_writers: set[threading.Thread] = set()  # background writes under way in this process


def finish_writes(timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for the background snapshot writes under way (a process
    about to exit: a short stdio session would otherwise never leave a snapshot for the next);
    False if one is still writing (it is then cut off, and its half-written directory removed
    by the next writer)."""
    deadline = time.monotonic() + timeout
    for thread in list(_writers):
        thread.join(max(0.0, deadline - time.monotonic()))
    return not any(thread.is_alive() for thread in list(_writers))


class Keeper:
    """Decides when an index writes a snapshot and writes it on a daemon thread, never on a
    request: the index's state is copied under its lock by ``capture``, written outside it."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.pending = 0
        self.written_at = time.monotonic()
        self.thread: threading.Thread | None = None
        self._target: tuple[Path, str, str] | None = None

    def loaded(self) -> None:
        """After a full load from the database: write one soon."""
        self.pending = WRITE_AFTER_CHANGES
        self._target = None

    def opened(self, tail: int) -> None:
        """After opening a snapshot and replaying ``tail`` changes."""
        self.pending = tail
        self.written_at = time.monotonic()

    def note(self, changes: int) -> None:
        self.pending += changes

    def soon(self, capture: Callable[[], Capture | None]) -> None:
        """Something costly to redo changed (a graph was built): write now, on the background
        thread, if where to write is known already, else on the next search. Index lock held."""
        self.pending = max(self.pending, WRITE_AFTER_CHANGES)
        if self._target is not None:
            self.maybe_start(capture)

    def due(self) -> bool:
        if self.pending <= 0 or not enabled() or (self.thread is not None and self.thread.is_alive()):
            return False
        return self.pending >= WRITE_AFTER_CHANGES or time.monotonic() - self.written_at >= WRITE_AFTER_SECONDS

    def target(self) -> tuple[Path, str, str]:
        """Where to write (resolved on the request's thread: it needs the database)."""
        if self._target is None:
            self._target = (directory(), snapshot_name(self.kind), store_birth())
        return self._target

    def maybe_start(self, capture: Callable[[], Capture | None]) -> None:
        """Start the background write when due; call with the index's lock held."""
        if not self.due():
            return
        target = self.target()
        self.pending, self.written_at = 0, time.monotonic()
        self.thread = threading.Thread(target=self._run, args=(capture, target), daemon=True,
                                       name=f"{self.kind}-snapshot")
        _writers.add(self.thread)
        self.thread.start()

    def save_now(self, capture: Callable[[], Capture | None]) -> bool:
        """Write the snapshot on this thread (what the background writer does); False if nothing was written."""
        state = capture()
        if state is None:
            return False
        root, name, birth = self.target()
        return write(root, name, state, birth)

    @staticmethod
    def _captured(capture: Callable[[], Capture | None]) -> Capture | None:
        """The index's state; taken again right away when the index replaced its arrays while it
        was being copied (the first search after a load fits the vector sketch: waiting for the
        next search would leave a short session, an MCP stdio client's, without a snapshot)."""
        for _ in range(CAPTURE_ATTEMPTS):
            state = capture()
            if state is not None:
                return state
        return None

    def _run(self, capture: Callable[[], Capture | None], target: tuple[Path, str, str]) -> None:
        root, name, birth = target
        try:
            state = self._captured(capture)
            if state is None:
                self.pending = max(self.pending, WRITE_AFTER_CHANGES)  # changed shape meanwhile: the next search retries
            else:
                started = time.monotonic()
                if write(root, name, state, birth):
                    logger.info("%s index: snapshot written at feed position %d in %.2f s", self.kind,
                                state.position.change_id, time.monotonic() - started)
        except Exception:  # a full disk must not take the server down; the next load rebuilds
            logger.warning("%s index: writing its snapshot failed", self.kind, exc_info=True)
        finally:
            _writers.discard(threading.current_thread())
