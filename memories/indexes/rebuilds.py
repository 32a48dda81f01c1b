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

A rebuild gives way to the searches answered around it (:func:`answering_around`): between two
chunks it pauses while one is under way, so the search has a core and the GIL to itself. At a
million rows on two vCPUs, a degraded full-text search beside a running text rebuild (and another
process building vector graphs) took 5.5 s instead of 0.3 s alone. The pauses are bounded
(``policy.give_way_s`` plus ``policy.give_way_share`` of the rebuild's time so far), so searches
without end delay a rebuild by at most that share. The first read waits too (:func:`before_reading`):
it is the heaviest, and the search that started the rebuild is being answered from the same tables.

Public seams: :data:`policy` (the threshold, chunk size and pauses, :func:`configured` for tests),
:func:`watching` (a listener called after every chunk, on the rebuild's thread), :func:`wait`,
:func:`progress` (what ``/health`` shows).
"""
from __future__ import annotations

import atexit
import contextlib
import contextvars
import dataclasses
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
GIVE_WAY_S = 2.0  # a rebuild pauses for searches answered around it this long in all,
GIVE_WAY_SHARE = 0.5  # plus this share of its own time so far
STARTER_GRACE_S = 0.05  # a rebuild waits this long at most for the search that started it to begin its answer


@dataclass
class Policy:
    """When a rebuild runs in the background, and how much it reads per hold of the lock."""

    background_min_rows: int = BACKGROUND_MIN_ROWS
    chunk_rows: int = CHUNK_ROWS
    give_way_s: float = GIVE_WAY_S
    give_way_share: float = GIVE_WAY_SHARE


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
    paused_s: float = 0.0  # time given way to searches answered around it
    between_chunks_s: float = 0.0  # of which between chunks (the first read's wait is not in the pauses' budget)

    @property
    def elapsed_s(self) -> float:
        return round((self.finished or time.monotonic()) - self.started, 3)

    def as_dict(self) -> dict[str, Any]:
        return {"index": self.index, "state": self.state, "rows_loaded": self.rows_loaded,
                "rows_total": self.rows_total, "elapsed_s": self.elapsed_s, "paused_s": round(self.paused_s, 3)}

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
    """Count a chunk read (called outside the index's lock) and give way to the searches answered
    around a rebuild meanwhile; False when the rebuild must stop now (interpreter exit)."""
    progress.rows_loaded += rows
    for listener in list(_LISTENERS):
        listener(progress)
    _give_way(progress)
    return not _STOP.is_set()


# --- giving way to the searches answered around a rebuild --------------------------------------

_ANSWERING = 0  # searches answered around a rebuild, under way now
_ANSWERING_LOCK = threading.Lock()
_NONE_ANSWERING = threading.Event()
_NONE_ANSWERING.set()
_SOME_ANSWERING = threading.Event()  # the mirror of _NONE_ANSWERING, for the first read to wait on


@contextlib.contextmanager
def answering_around() -> Iterator[None]:
    """A search answered around a rebuild (its degraded path): rebuilds pause between chunks until
    it ends."""
    global _ANSWERING
    with _ANSWERING_LOCK:
        _ANSWERING += 1
        _NONE_ANSWERING.clear()
        _SOME_ANSWERING.set()
    try:
        yield
    finally:
        with _ANSWERING_LOCK:
            _ANSWERING -= 1
            if _ANSWERING == 0:
                _SOME_ANSWERING.clear()
                _NONE_ANSWERING.set()


def before_reading(progress: Progress) -> None:
    """Called by a rebuild before its first read. The search that started it is about to be answered
    around it, from the same tables (its degraded path), while the first read is the heaviest (on
    PostgreSQL the whole result arrives at once: both tables read, 2.6 s of a first search at a
    million rows on a cold cache): that read waits for the answer, up to ``policy.give_way_s``,
    apart from the budget of the pauses between chunks. The search begins its answer as soon as
    it leaves the index's lock; a rebuild that no search answers around (its starter took the
    rows read so far) waits ``STARTER_GRACE_S`` for nothing."""
    if not _SOME_ANSWERING.wait(STARTER_GRACE_S) or _STOP.is_set():
        return
    started = time.monotonic()
    _NONE_ANSWERING.wait(policy.give_way_s)
    progress.paused_s += time.monotonic() - started


def _give_way(progress: Progress) -> None:
    """Pause while a search is answered around a rebuild, within the rebuild's budget of pauses."""
    if _NONE_ANSWERING.is_set() or _STOP.is_set():
        return
    running = time.monotonic() - progress.started - progress.paused_s
    budget = policy.give_way_s + policy.give_way_share * running - progress.between_chunks_s
    if budget <= 0:
        return
    started = time.monotonic()
    _NONE_ANSWERING.wait(budget)
    paused = time.monotonic() - started
    progress.paused_s += paused
    progress.between_chunks_s += paused


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
    _NONE_ANSWERING.set()  # a rebuild pausing for a search stops now
    _SOME_ANSWERING.set()  # and one waiting for its starter's answer
    with _THREADS_LOCK:
        threads = list(_THREADS)
    for thread in threads:
        thread.join(timeout=5)


atexit.register(_stop_all)


# --- seams for tests and benchmarks -----------------------------------------------------------


@contextlib.contextmanager
def configured(*, background_min_rows: int | None = None, chunk_rows: int | None = None,
               give_way_s: float | None = None, give_way_share: float | None = None) -> Iterator[Policy]:
    """Change the policy for the duration (tests rebuild small stores in the background)."""
    saved = dataclasses.replace(policy)
    changes = {"background_min_rows": background_min_rows, "chunk_rows": chunk_rows, "give_way_s": give_way_s,
               "give_way_share": give_way_share}
    for name, value in changes.items():
        if value is not None:
            setattr(policy, name, value)
    try:
        yield policy
    finally:
        for name in changes:
            setattr(policy, name, getattr(saved, name))


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
