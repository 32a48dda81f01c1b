"""SQLite upkeep off the request path: WAL checkpoints and the query planner's statistics.

In WAL mode SQLite copies the log back into the database file (a *checkpoint*, with an fsync)
inside whichever commit pushes the log past ``wal_autocheckpoint`` pages. With SQLite's default of
1,000 pages that was one write in about twenty on this product's write path, and that write
waited ~11 ms more (bench/search_latency.py: a threaded remember's p95). Instead, a daemon thread
in each process that opens the SQLite file checkpoints a moment after the log changes, with
``PASSIVE`` (it never waits for, nor blocks, readers and writers) on a short-lived connection of
its own; the autocheckpoint stays as a safety net at :data:`AUTOCHECKPOINT_PAGES`, for bursts
the thread has not caught up with (a bulk import) and for processes that run without it.

The same thread keeps the planner's statistics (``ANALYZE``, sampled with ``analysis_limit``:
~60 ms at 100k memories) current: once the memories table has grown by a quarter since the last
analysis (its largest rowid, read from the index in O(log n)). Without statistics SQLite picked
a full-table index for counts that a small partial index answers (the dashboard's backlog count:
~1 s instead of 0.1 ms at 100k memories).
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
ANALYZE_GROWTH = 1.25  # re-analyse once the memories table has grown by this factor
ANALYZE_ROWS = 1000  # rows the sampled ANALYZE reads per index


def checkpoint(path: Path | str) -> tuple[int, int, int]:
    """One PASSIVE checkpoint of the database at ``path``: (busy, log frames, frames checkpointed)."""
    with contextlib.closing(_connect(path, 0.1)) as conn:
        busy, log, done = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    return int(busy), int(log), int(done)


def _connect(path: Path | str, timeout: float) -> sqlite3.Connection:
    uri = f"{Path(path).resolve().as_uri()}?mode=rw"  # never creates a file that is gone
    return sqlite3.connect(uri, uri=True, timeout=timeout)


def table_size_hint(path: Path | str, table: str = "memories") -> int:
    """The largest rowid of ``table`` (a cheap upper bound of its row count; 0 if it is missing)."""
    with contextlib.closing(_connect(path, 0.1)) as conn:
        try:
            return int(conn.execute(f'SELECT coalesce(max(rowid), 0) FROM "{table}"').fetchone()[0])  # noqa: S608
        except sqlite3.OperationalError:  # not migrated yet
            return 0


def analysed_rows(path: Path | str, table: str = "memories") -> int | None:
    """The rows ``table`` had at its last ANALYZE, by any process (the largest of its indexes'
    counts in ``sqlite_stat1``); None if it was never analysed."""
    with contextlib.closing(_connect(path, 0.1)) as conn:
        try:
            stats = conn.execute("SELECT stat FROM sqlite_stat1 WHERE tbl = ?", [table]).fetchall()
        except sqlite3.OperationalError:  # no sqlite_stat1: never analysed
            return None
    counts = [int(stat.split()[0]) for (stat,) in stats if stat and stat.split()[0].isdigit()]
    return max(counts) if counts else None


def analyze(path: Path | str) -> None:
    """Sampled ANALYZE of the whole database (the planner's statistics)."""
    with contextlib.closing(_connect(path, 5.0)) as conn:
        conn.execute(f"PRAGMA analysis_limit={ANALYZE_ROWS}")
        conn.execute("ANALYZE")
        conn.commit()


class Checkpointer:
    """Checkpoints one database file whenever its write-ahead log has changed since the last look."""

    def __init__(self, path: Path, interval: float = INTERVAL_S) -> None:
        self.path = path
        self.wal = Path(f"{path}-wal")
        self.interval = interval
        self._seen: float | None = None
        self.analyzed_at_size: int | None = None
        self._failing = False
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
        if mtime is None or mtime == self._seen or not self.path.exists():  # gone: a test's database, removed
            return False
        try:
            busy, log, done = checkpoint(self.path)
        except sqlite3.OperationalError as exc:
            if any(word in str(exc) for word in ("locked", "busy", "unable to open")):  # a lock, or gone: later
                return False
            self._failed()
            return False
        except sqlite3.Error:
            self._failed()
            return False
        if self._failing:
            self._failing = False
            logger.warning("background WAL checkpoint of %s works again", self.path)
        if not busy and done >= log:  # all of it copied (a reader's older snapshot can hold some back)
            self._seen = mtime
        return True

    def _failed(self) -> None:
        """Log a failure once per streak: a full or read-only disk fails every look (twice a second)."""
        if not self._failing:
            logger.warning("background WAL checkpoint of %s failed; it retries quietly until it works", self.path, exc_info=True)
        self._failing = True

    def analyze_if_grown(self) -> bool:
        """ANALYZE when the memories table has grown by ANALYZE_GROWTH since the last analysis
        (this process's, or the one the database records: a new process, such as each MCP stdio
        session, does not analyse again a store whose statistics still hold, and on a cold store
        of millions of rows that ANALYZE held the write lock long enough to fail its first writes
        with "database is locked"); whether it ran."""
        try:
            if self.analyzed_at_size is None:
                self.analyzed_at_size = analysed_rows(self.path)
            size = table_size_hint(self.path)
            if not size or (self.analyzed_at_size is not None and size < self.analyzed_at_size * ANALYZE_GROWTH):
                return False
            analyze(self.path)
        except sqlite3.OperationalError:  # busy or locked: the next look retries
            return False
        self.analyzed_at_size = size
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
            if self.run_once() or self.analyzed_at_size is None:
                self.analyze_if_grown()


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
