"""Rebuilds of the in-process indexes from the database, in the background.

An index with no usable snapshot (after a restore, a migration, a deleted cache folder) reads
every row from the database: at a million rows that took 112 s for the text index and 43 s for
the vectors, and the first search waited all that time. On a store of at least
``policy.background_min_rows`` rows the read now runs on a daemon thread, one index at a time,
``policy.chunk_rows`` rows per hold of the index's lock; meanwhile the index's searches raise
:class:`Rebuilding` and their callers answer from a degraded path (search/fulltext_db.py: the
database's own full-text; the vectors loaded so far, scanned exactly), noting it with
:func:`note` so the response's ``meta.degraded`` says which index is loading and how far. The
feed position is taken before the first row is read, so writes made during the rebuild are
applied right after it (memories/indexes/base.py).

Public seams: :data:`policy` (the threshold and chunk size, :func:`configured` for tests),
:func:`watching` (a listener called after every chunk, on the rebuild's thread), :func:`wait`,
:func:`progress` (what ``/health`` shows).
"""
from __future__ import annotations

import atexit
import contextlib
import contextvars
import logging
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger("bhgbrain.indexes")

BACKGROUND_MIN_ROWS = 20_000  # below it a load takes well under a second: done on the search, as before
CHUNK_ROWS = 2_000  # rows read per hold of the index's lock (tens of ms: a search waits at most that)


@dataclass
class Policy:
    """When a rebuild runs in the background, and how much it reads per hold of the lock."""

    background_min_rows: int = BACKGROUND_MIN_ROWS
    chunk_rows: int = CHUNK_ROWS


policy = Policy()


@dataclass
class Progress:
    """One rebuild of one index: rows read so far out of the rows the database had at its start."""

    index: str  # the index's snapshot kind: "vector" or "text"
    rows_total: int
    rows_loaded: int = 0
    state: str = "queued"  # queued (behind another index's rebuild), loading, done, failed, stopped
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None

    @property
    def elapsed_s(self) -> float:
        return round((self.finished or time.monotonic()) - self.started, 3)

    def as_dict(self) -> dict[str, Any]:
        return {"index": self.index, "state": self.state, "rows_loaded": self.rows_loaded,
                "rows_total": self.rows_total, "elapsed_s": self.elapsed_s}

    def end(self, state: str) -> None:
        self.state, self.finished = state, time.monotonic()


class Rebuilding(Exception):  # noqa: N818 - a state the caller answers around, not an error
    """An in-process index is reading its rows from the database in the background: the caller
    answers from its degraded path (and says so with :func:`note`)."""

    def __init__(self, progress: Progress) -> None:
        super().__init__(f"{progress.index} index rebuilding: {progress.rows_loaded}/{progress.rows_total} rows")
        self.progress = progress

    def note(self, path: str) -> None:
        """Record in the current response's ``meta.degraded`` that ``path`` answered instead."""
        note(self.progress, path)


# --- running them ----------------------------------------------------------------------------

_ONE_AT_A_TIME = threading.Lock()  # two rebuilds at once would share two cores and both take twice as long
_STOP = threading.Event()  # set at interpreter exit: rebuilds give up between chunks
_THREADS: set[threading.Thread] = set()
_THREADS_LOCK = threading.Lock()
# index -> its last rebuild (weak: an index thrown away, e.g. for another model, is no longer shown)
_LATEST: weakref.WeakKeyDictionary[object, Progress] = weakref.WeakKeyDictionary()
_LISTENERS: list[Callable[[Progress], None]] = []


def start(index: object, progress: Progress, work: Callable[[Progress], None]) -> threading.Thread:
    """Run ``work`` (which reads the ``index``'s rows, calling :func:`chunk_done` after each chunk)
    on a daemon thread, after any other index's rebuild."""
    _LATEST[index] = progress
    thread = threading.Thread(target=_run, args=(progress, work), name=f"bhgbrain-rebuild-{progress.index}",
                              daemon=True)
    with _THREADS_LOCK:
        _THREADS.add(thread)
    thread.start()
    return thread


def _run(progress: Progress, work: Callable[[Progress], None]) -> None:
    from django.db import connection

    try:
        with _ONE_AT_A_TIME:
            progress.state = "loading"
            progress.started = time.monotonic()  # the time queued is not the rebuild's
            work(progress)
    except Exception:  # noqa: BLE001 - the index was discarded: its next search starts a new rebuild
        progress.end("failed")
        logger.exception("%s index rebuild failed", progress.index)
    finally:
        connection.close()  # this thread's own connection
        with _THREADS_LOCK:
            _THREADS.discard(threading.current_thread())


def chunk_done(progress: Progress, rows: int) -> bool:
    """Count a chunk read (called outside the index's lock); False when the rebuild must stop now
    (interpreter exit)."""
    progress.rows_loaded += rows
    for listener in list(_LISTENERS):
        listener(progress)
    return not _STOP.is_set()


def wait(timeout: float | None = None) -> bool:
    """Wait for the rebuilds under way (and any they queue); False if one is still running."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        with _THREADS_LOCK:
            threads = list(_THREADS)
        if not threads:
            return True
        for thread in threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        if deadline is not None and time.monotonic() >= deadline:
            with _THREADS_LOCK:
                return not _THREADS


def progress() -> list[dict[str, Any]]:
    """Each index's last rebuild in this process (under way or finished): what ``/health`` shows."""
    return sorted((latest.as_dict() for latest in list(_LATEST.values())), key=lambda entry: entry["index"])


def _stop_all() -> None:
    _STOP.set()
    with _THREADS_LOCK:
        threads = list(_THREADS)
    for thread in threads:
        thread.join(timeout=5)


atexit.register(_stop_all)


# --- seams for tests and benchmarks -----------------------------------------------------------


@contextlib.contextmanager
def configured(*, background_min_rows: int | None = None, chunk_rows: int | None = None) -> Iterator[Policy]:
    """Change the policy for the duration (tests rebuild small stores in the background)."""
    saved = Policy(policy.background_min_rows, policy.chunk_rows)
    if background_min_rows is not None:
        policy.background_min_rows = background_min_rows
    if chunk_rows is not None:
        policy.chunk_rows = chunk_rows
    try:
        yield policy
    finally:
        policy.background_min_rows, policy.chunk_rows = saved.background_min_rows, saved.chunk_rows


@contextlib.contextmanager
def watching(listener: Callable[[Progress], None]) -> Iterator[None]:
    """Call ``listener`` after every chunk a rebuild reads, on the rebuild's thread, outside the
    index's lock (a test may block it there to search mid-rebuild)."""
    _LISTENERS.append(listener)
    try:
        yield
    finally:
        _LISTENERS.remove(listener)


# --- degraded answers ---------------------------------------------------------------------------

_PARTIAL: contextvars.ContextVar[bool] = contextvars.ContextVar("bhgbrain_partial_answers", default=False)
_NOTES: contextvars.ContextVar[list[dict[str, Any]] | None] = contextvars.ContextVar("bhgbrain_degraded", default=None)


@contextlib.contextmanager
def partial_answers() -> Iterator[None]:
    """Within it, an index being rebuilt answers from the rows it has read so far instead of
    raising :class:`Rebuilding`."""
    token = _PARTIAL.set(True)
    try:
        yield
    finally:
        _PARTIAL.reset(token)


def partial_wanted() -> bool:
    return _PARTIAL.get()


@contextlib.contextmanager
def collecting() -> Iterator[list[dict[str, Any]]]:
    """Collect the degraded answers given inside (one entry per index): a response's ``meta.degraded``."""
    notes: list[dict[str, Any]] = []
    token = _NOTES.set(notes)
    try:
        yield notes
    finally:
        _NOTES.reset(token)


def note(progress: Progress, path: str) -> None:
    """An index being rebuilt was answered around by ``path``; kept if someone is collecting."""
    notes = _NOTES.get()
    if notes is not None and not any(n["index"] == progress.index for n in notes):
        notes.append({**progress.as_dict(), "path": path})
