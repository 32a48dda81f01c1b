"""SQLite WAL checkpoints off the request path.

In WAL mode SQLite copies the log back into the database file (a *checkpoint*, with an fsync)
inside whichever commit pushes the log past ``wal_autocheckpoint`` pages. With SQLite's default of
1,000 pages that was one write in about twenty on this product's write path, and that write
waited ~11 ms more (bench/search_latency.py: a threaded remember's p95). Instead, a daemon thread
in each process that opens the SQLite file checkpoints a moment after the log changes, with
``PASSIVE`` (it never waits for, nor blocks, readers and writers) on a short-lived connection of
its own; the autocheckpoint stays as a safety net at :data:`AUTOCHECKPOINT_PAGES`, for bursts
the thread has not caught up with (a bulk import) and for processes that run without it.
"""
from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
from pathlib import Path
from typing import Any

logger = logging.getLogger("bhgbrain.sqlite")

AUTOCHECKPOINT_PAGES = 10_000  # the in-commit checkpoint, now only a safety net (40 MB of log)
INTERVAL_S = 0.5  # how often the thread looks at the log's modification time


def checkpoint(path: Path | str) -> tuple[int, int, int]:
    """One PASSIVE checkpoint of the database at ``path``: (busy, log frames, frames checkpointed)."""
    uri = f"{Path(path).resolve().as_uri()}?mode=rw"  # never creates a file that is gone
    with contextlib.closing(sqlite3.connect(uri, uri=True, timeout=0.1)) as conn:
        busy, log, done = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    return int(busy), int(log), int(done)


class Checkpointer:
    """Checkpoints one database file whenever its write-ahead log has changed since the last look."""

    def __init__(self, path: Path, interval: float = INTERVAL_S) -> None:
        self.path = path
        self.wal = Path(f"{path}-wal")
        self.interval = interval
        self._seen: float | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _log_mtime(self) -> float | None:
        try:
            return self.wal.stat().st_mtime_ns
        except FileNotFoundError:
            return None

    def run_once(self) -> bool:
        """Checkpoint if the log changed since the last call; whether it did."""
        mtime = self._log_mtime()
        if mtime is None or mtime == self._seen:
            return False
        try:
            busy, log, done = checkpoint(self.path)
        except sqlite3.Error:
            logger.warning("background WAL checkpoint of %s failed; the next look retries", self.path, exc_info=True)
            return False
        if not busy and done >= log:  # all of it copied (a reader's older snapshot can hold some back)
            self._seen = mtime
        return True

    def start(self) -> None:
        if self._thread is None or not self._thread.is_alive():
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name="bhgbrain-wal-checkpoint", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    @property
    def caught_up(self) -> bool:
        """Whether the log's latest change has been checkpointed."""
        return self._seen is not None and self._seen == self._log_mtime()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.run_once()


_checkpointers: dict[str, Checkpointer] = {}
_lock = threading.Lock()


def on_connection_created(sender: Any, connection: Any, **kwargs: Any) -> None:  # noqa: ARG001 - signal API
    """``connection_created`` receiver: a file-backed SQLite connection gets its checkpoint thread."""
    from django.conf import settings

    if connection.vendor != "sqlite" or not getattr(settings, "BHGBRAIN_WAL_CHECKPOINT_THREAD", True):
        return
    name = str(connection.settings_dict.get("NAME") or "")
    if not name or name == ":memory:" or name.startswith("file:"):
        return
    with _lock:
        checkpointer = _checkpointers.get(name)
        if checkpointer is None:
            checkpointer = _checkpointers[name] = Checkpointer(Path(name))
        checkpointer.start()
