"""The checksums of index snapshot files, optionally computed ahead of their use.

Opening a snapshot checks every file against the sha256 its manifest records
(memories/indexes/snapshots.py): on a 100k store that is ~225 MB to hash, ≈0.2 s on the path of a new
process's first search. A stdio MCP server knows where the snapshots are as soon as it has read
its config, while it still has the MCP SDK to import and Django to set up (≈1.5 s holding the
GIL), so it hashes them then, on a thread (hashlib and file reads release the GIL, so this runs
on another core): ``verify_ahead``. ``sha256`` then takes a digest computed ahead if the file is
still the very same one — device, inode, size, modification and change times equal to those
when it was hashed, unchanged while it was hashed — and hashes the file itself otherwise. A
digest computed ahead is used once; a later open hashes again. Nothing here needs Django.

What is checked is unchanged: the bytes of the file are hashed and compared with the manifest
before the index uses it; only when they are hashed moves (by a second or so, in this process).
Snapshot files are never modified in place (each snapshot is written into a new directory), so
a file that changes in between is a new file (another inode) or carries new times, and is
hashed again.

**Sealed files.** Hashing is what made a new process's first search slow on a large store: a
million memories are ~2.5 GB of snapshot files, ~2.5 s of sha256 on this machine. The writer
hashes each file it wrote (reading it back after fsync) and records beside the digest the file's
*seal*: device, inode, size and modification time, taken before and after that hash and equal.
An opener that finds the very same file (same seal) knows its bytes are the ones hashed: a write
through any system call, or a replacement, gives the file a new modification time or inode. The
file is hashed again whenever its seal differs (a copied or restored data directory, any write).
What a seal cannot see is the same file changed with its modification time put back by hand
(``touch -d``), or bits rotting on the disk under it — the database file beside it has no
checksum against those either. The kernel stamps modification times from a clock that ticks
every few milliseconds, so a write in the same tick as the writer's own last one would leave the
time unchanged: a file whose time is not at least ``SEAL_MARGIN_NS`` older than its seal is not
sealed (small files, cheap to hash anyway).
"""
from __future__ import annotations

import hashlib
import json
import logging
import mmap
import os
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import BinaryIO

logger = logging.getLogger("bhgbrain.search")

DIRECTORY_NAME = "index-snapshots"  # under the data dir

Identity = tuple[int, int, int, int, int]  # device, inode, size, mtime_ns, ctime_ns
Seal = list[int]  # device, inode, size, mtime_ns: as a manifest stores it (JSON)
SEAL_MARGIN_NS = 50_000_000  # a seal is only taken on a file last written this long before

_ahead: dict[str, Future[tuple[Identity, str] | None]] = {}
_ahead_lock = threading.Lock()


def _identity(stat: os.stat_result) -> Identity:
    return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)


def _digest(handle: BinaryIO) -> str:
    """sha256 of an open file, mapped and hashed in one call: hashlib holds no GIL for all of it
    (reading in chunks takes the GIL back per chunk, which slows the thread importing meanwhile)."""
    if os.fstat(handle.fileno()).st_size == 0:
        return hashlib.sha256(b"").hexdigest()
    with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        return hashlib.sha256(mapped).hexdigest()


def file_sha256(path: Path) -> str:
    """The file's sha256, hashed now."""
    with path.open("rb") as handle:
        return _digest(handle)


def _seal_of(stat: os.stat_result) -> Seal:
    # Not the change time: linking an unchanged graph into the next snapshot, and removing the old
    # snapshot's link, change it without changing a byte.
    return list(_identity(stat)[:4])


def sealed_sha256(path: Path) -> tuple[str, Seal | None]:
    """A file just written (and fsynced) by the snapshot writer: its sha256, and its seal, or None
    when the file changed while being hashed or was written too recently to be sealed."""
    hashed = _hashed(path)  # the same identity before and after the hash, or None
    if hashed is None:
        return file_sha256(path), None
    identity, digest = hashed
    if time.time_ns() - identity[3] < SEAL_MARGIN_NS:
        return digest, None
    return digest, list(identity[:4])


def current_seal(path: Path) -> Seal | None:
    """What the file's seal would be now (None when it is gone)."""
    try:
        return _seal_of(path.stat())
    except OSError:
        return None


def is_sealed(path: Path, seal: object) -> bool:
    """Whether ``path`` is still the very file the writer hashed (``seal`` from its manifest)."""
    return isinstance(seal, list) and len(seal) == 4 and current_seal(path) == seal


def _hashed(path: Path) -> tuple[Identity, str] | None:
    """The file's identity and digest, or None if it changed while being hashed (or is gone)."""
    try:
        with path.open("rb") as handle:
            before = _identity(os.fstat(handle.fileno()))
            digest = _digest(handle)
            after = _identity(os.fstat(handle.fileno()))
    except (OSError, ValueError):
        return None
    return (before, digest) if before == after else None


def sha256(path: Path) -> str:
    """The file's sha256: the one ``verify_ahead`` computed (waiting for it if it is being
    computed) when the file is still the same, else hashed now."""
    with _ahead_lock:
        pending = _ahead.pop(str(path), None)
    if pending is not None:
        found = pending.result()
        try:
            current = _identity(path.stat())
        except OSError:
            current = None
        if found is not None and found[0] == current:
            return found[1]
    return file_sha256(path)


def _manifest_files(root: Path) -> list[Path]:
    """The files the snapshot manifests under ``root`` name and that an opener will hash (not
    sealed), largest first."""
    files: list[Path] = []
    for manifest_path in sorted(root.glob("*.json")):
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
            folder = root / str(manifest["directory"])
            files.extend(folder / str(name) for name, entry in manifest["files"].items()
                         if not is_sealed(folder / str(name), entry.get("seal")))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # opening it will reject it, with the reason logged
    sizes = {}
    for path in files:
        try:
            sizes[path] = path.stat().st_size
        except OSError:
            continue
    return sorted(sizes, key=sizes.__getitem__, reverse=True)


def verify_ahead(root: Path) -> threading.Thread | None:
    """Hash the files of the snapshots under ``root`` on a daemon thread, for ``sha256`` to
    use; None when there are none."""
    files = _manifest_files(root) if root.is_dir() else []
    if not files:
        return None
    futures: dict[Path, Future[tuple[Identity, str] | None]] = {path: Future() for path in files}
    with _ahead_lock:
        for path, future in futures.items():
            _ahead[str(path)] = future

    def run() -> None:
        for path, future in futures.items():
            try:
                future.set_result(_hashed(path))
            except BaseException as exc:  # noqa: BLE001 - a waiting opener hashes the file itself
                future.set_result(None)
                logger.debug("hashing %s ahead failed: %s", path, exc)

    thread = threading.Thread(target=run, name="snapshot-verify-ahead", daemon=True)
    thread.start()
    return thread


def forget_ahead() -> None:
    """Drop digests computed ahead and not used (tests; a process that will not open snapshots)."""
    with _ahead_lock:
        _ahead.clear()
