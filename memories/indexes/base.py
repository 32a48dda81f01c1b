"""The lifecycle both in-process indexes share: the embedded vector index (memories/indexes/embedded.py)
and the BM25 text index (search/bm25/text_index.py).

Each loads its rows lazily on the first search (or opens this store's last snapshot,
memories/indexes/snapshots.py, and replays only the change feed after it), replays the feed
(memories/indexes/feed.py) before every search so writes of other processes are seen, throws
itself away after a failure that may have left it half-changed (the next search reloads it),
and has its state copied for a snapshot under its lock. On a large store a load from the database
runs in the background while searches are answered around it (memories/indexes/rebuilds.py). That lifecycle is written once here;
an engine implements only what differs: how its rows are read, fetched, dropped and captured.
"""
from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Iterator
from typing import Any, ClassVar

from django.db import DatabaseError

from memories.indexes import rebuilds, snapshots
from memories.indexes.eligible import EligibleRows
from memories.indexes.feed import FeedReader, discarded_on_failure, expiries_of, split_expiries
from memories.models import Memory
from memories.quotas import usage


class InProcessIndex:
    """An index held in this process's memory and kept current from the change feed. Every method
    that reads or changes the rows holds ``_lock`` (re-entrant: hooks run under the caller's hold)."""

    snapshot_kind: ClassVar[str]  # the snapshot's (and its writer thread's) name: "vector", "text"
    label: ClassVar[str]  # how log lines name the index
    snapshot_meta: ClassVar[tuple[str, ...]] = ()  # manifest keys a usable snapshot must hold
    snapshot_writable: ClassVar[frozenset[str]] = frozenset()  # arrays mapped copy-on-write (written in place)

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._loaded = False
        self._feed = FeedReader()
        self._keeper = snapshots.Keeper(self.snapshot_kind)
        self._applied: set[int] = set()  # change ids this process already applied itself (upserts)
        self._eligible = EligibleRows()
        self._version = 0  # bumped by every row written or dropped: the cached eligible rows depend on it
        self.loaded_from: str | None = None  # "database" or "snapshot", once loaded
        self._rebuild: rebuilds.Progress | None = None  # the background read from the database under way

    # --- engine hooks ------------------------------------------------------------------------

    def _reset(self) -> None:
        """Empty rows (at init, before a load, after a failure); an engine extends it with its arrays."""
        self._version += 1
        self._eligible.clear()

    def _load_rows(self, chunk: int) -> Iterator[int]:
        """Read every indexed row from the database into the empty index, about ``chunk`` rows at a
        time, yielding the rows read after each chunk (the lock is held only while it reads one)."""
        raise NotImplementedError

    def _row_total(self) -> int:
        """About how many rows a load from the database reads: the live memories, as the quota
        counters keep them (memories/quotas/usage.py). Asked on the search that starts a rebuild,
        before it can be answered around it: a count of the memories took 1.06 s of that search
        at a million rows on a cold PostgreSQL (counting the engine's own rows read every row's
        blob, 0.3-0.8 s at 100k). Counted when the counters say the store is small: a database
        migrated without their triggers holds none, and a large store must not load on the search."""
        kept = usage.live_total()
        if kept >= rebuilds.policy.background_min_rows:
            return kept
        return Memory.objects.filter(archived=False).count()

    def _ready(self) -> None:
        """Just loaded (``loaded_from`` says how): start any work ahead of the first searches."""

    def _snapshot_params(self) -> dict[str, object]:
        """The parameters a snapshot must have been written with to be usable."""
        raise NotImplementedError

    def _adopt(self, snapshot: snapshots.Capture) -> bool:
        """Take the rows of an opened snapshot; False (nothing taken) when its arrays disagree."""
        raise NotImplementedError

    def _capture(self) -> snapshots.Capture | None:
        """A consistent copy of the rows and their feed position, or None when there is none now."""
        raise NotImplementedError

    def _needs_rebuild(self) -> bool:
        """Whether a load from the database is cheaper than going on (too many dead rows)."""
        return False

    def _fetch(self, memory_ids: set[uuid.UUID]) -> Any:
        """The indexed state of these changed memories, read in one go (a DatabaseError rewinds the feed)."""
        raise NotImplementedError

    def _apply_fetched(self, memory_ids: set[uuid.UUID], fetched: Any) -> None:
        """Write or drop each of these memories from what ``_fetch`` read."""
        raise NotImplementedError

    def _drop(self, memory_id: str) -> None:
        """The memory is no longer searchable here (forgotten, archived, expired away)."""
        raise NotImplementedError

    def _move_expiry(self, memory_id: str, until: float) -> None:
        """Only the memory's expiry changed (``live_until``): adjust its row, if it holds one."""
        raise NotImplementedError

    # --- lifecycle, written once -------------------------------------------------------------

    def _load(self) -> None:
        """Every row from the database, now, the feed position taken first (a write during the load
        is replayed after it)."""
        self._discard()  # a load that failed half-way may have left rows behind
        self._feed.start()
        for _ in self._load_rows(rebuilds.policy.chunk_rows):
            pass
        self._loaded_from_database()

    def _loaded_from_database(self) -> None:
        self._loaded, self.loaded_from = True, "database"
        self._keeper.loaded()
        self._ready()

    def _from_database(self) -> None:
        """Read every row from the database: now on a small store, else in the background (searches
        meanwhile raise ``Rebuilding`` and are answered around it). Lock held."""
        total = self._row_total()
        if total < rebuilds.policy.background_min_rows:
            self._load()
            return
        self._discard()
        self._feed.start()  # before the first row is read: writes during the rebuild are replayed after it
        self._rebuild = rebuilds.Progress(self.snapshot_kind, total)
        rebuilds.start(self, self._rebuild, self._rebuild_rows)

    def _rebuild_rows(self, progress: rebuilds.Progress) -> None:
        """On the rebuild's thread: read the rows a chunk per hold of the lock, then catch up on the
        feed; stop if the index was discarded or reloaded meanwhile (it is no longer ``_rebuild``)."""
        rebuilds.before_reading(progress)
        with self._lock:
            reading = self._load_rows(rebuilds.policy.chunk_rows)
        before = 0
        while True:
            with self._lock:
                if self._rebuild is not progress:
                    progress.end("stopped")
                    return
                try:
                    loaded = next(reading, None)
                except BaseException:
                    self._discard()  # a half-read chunk, or a lost connection: the next search starts over
                    raise
                if loaded is None:
                    self._rebuild, progress.rows_total = None, progress.rows_loaded  # the estimate was the live rows
                    self._loaded_from_database()
                    progress.end("done")
                    with rebuilds.partial_answers():
                        self._catch_up()  # the writes made while it read (a feed reset starts another rebuild)
                    return
            if not rebuilds.chunk_done(progress, loaded - before):
                with self._lock:
                    self._discard()
                progress.end("stopped")
                return
            before = loaded

    def _while_rebuilding(self) -> None:
        """A search meets the background rebuild: it raises ``Rebuilding`` unless the caller takes
        the rows read so far (``rebuilds.partial_answers``)."""
        if self._rebuild is not None and not rebuilds.partial_wanted():
            raise rebuilds.Rebuilding(self._rebuild)

    def _discard(self) -> None:
        """Fresh, empty rows (nothing shares a buffer with a failed search); the next search reloads.
        A rebuild under way stops at its next chunk."""
        self._loaded = False
        self._rebuild = None
        self._applied.clear()
        self._reset()

    def _open_snapshot(self) -> bool:
        """Take the rows from this store's snapshot (the feed after it is replayed next)."""
        snapshot = snapshots.read(self.snapshot_kind, self._snapshot_params(), self.snapshot_meta, self.snapshot_writable)
        if snapshot is None or not self._adopt(snapshot):
            return False
        self._feed.resume(snapshot.position.change_id, snapshot.position.memory_id, snapshot.position.pending)
        self._loaded, self.loaded_from = True, "snapshot"
        self._keeper.opened(0)
        self._ready()
        return True

    def _discarded_on_failure(self) -> contextlib.AbstractContextManager[None]:
        """Around work that may leave the rows half-changed (feed.discarded_on_failure)."""
        return discarded_on_failure(self._discard, self.label)

    def _catch_up(self) -> None:
        """Replay the feed; a failure half-way through a change throws the rows away. Lock held."""
        with self._discarded_on_failure():
            self._follow_feed()

    def _follow_feed(self) -> None:
        """Load (from a snapshot when there is one) on first use, then apply the feed's new rows.
        While a rebuild reads the rows in the background: ``_while_rebuilding``."""
        if self._rebuild is None:
            self._follow_feed_loaded()
        self._while_rebuilding()

    def _follow_feed_loaded(self) -> None:
        if self._loaded and self._needs_rebuild():
            self._from_database()
            return
        if not self._loaded and not self._open_snapshot():
            self._from_database()
            return
        changes = self._feed.read()
        if changes is None:  # a store-wide reset, or too many changes to fetch one by one
            self._from_database()
        elif changes:
            self._apply_changes(changes)

    def _apply_changes(self, changes: list[tuple[int, uuid.UUID, str]]) -> None:
        ids, expiries = split_expiries(changes, self._applied)
        self._applied.difference_update(change_id for change_id, _, _ in changes)
        if not ids and not expiries:
            return
        try:
            fetched = self._fetch(ids)
            moved = expiries_of(expiries)
        except DatabaseError:
            self._feed.rewind()  # nothing applied yet: read them again next time
            raise
        self._apply_fetched(ids, fetched)
        for memory_id in expiries:
            if memory_id in moved:
                self._move_expiry(str(memory_id), moved[memory_id])
            else:
                self._drop(str(memory_id))  # gone or archived meanwhile
        self._keeper.note(len(ids) + len(expiries))

    def _applied_here(self, change_id: int | None) -> None:
        """This process wrote the change itself: replaying it from the feed would redo the work."""
        if change_id is not None and change_id > self._feed.last_change:
            self._applied.add(change_id)

    # --- snapshots ---------------------------------------------------------------------------

    def _capturable(self) -> bool:
        """Loaded, at a feed position whose row is known (a rewound reader's is not)."""
        return self._loaded and not (self._feed.last_change and self._feed.last_memory_id is None)

    def _feed_position(self) -> snapshots.FeedPosition:
        return snapshots.FeedPosition(self._feed.last_change, self._feed.last_memory_id, self._feed.pending)

    def _snapshot_when_due(self) -> None:
        """Start the background snapshot write if enough changed (lock held: every search asks)."""
        self._keeper.maybe_start(self._capture)

    # --- public seams ------------------------------------------------------------------------

    def catch_up(self) -> None:
        """Load on first use, then replay the change feed now (every search does this first)."""
        with self._lock:
            self._catch_up()

    def stop_rebuild(self) -> None:
        """Stop a background rebuild under way at its next chunk (the index is being thrown away)."""
        with self._lock:
            if self._rebuild is not None:
                self._discard()

    def reload(self) -> None:
        """Read every row from the database again now, as a feed reset does (no snapshot is opened)."""
        with self._lock:
            self._load()

    def capture(self) -> snapshots.Capture | None:
        """The state a snapshot write takes (None when there is nothing consistent to take now)."""
        return self._capture()

    def save_snapshot(self) -> bool:
        """Write the snapshot now, on this thread (the background writer does the same)."""
        return self._keeper.save_now(self._capture)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Hold the index's lock: no search, catch-up, capture or background step runs meanwhile."""
        with self._lock:
            yield

    @property
    def loaded(self) -> bool:
        """Whether the rows were read (from the database or a snapshot; they are on the first search)."""
        return self._loaded

    @property
    def rebuilding(self) -> rebuilds.Progress | None:
        """The background rebuild from the database under way (None: none)."""
        return self._rebuild

    @property
    def feed(self) -> FeedReader:
        """This index's position in the change feed."""
        return self._feed

    @property
    def snapshot_keeper(self) -> snapshots.Keeper:
        """When this index writes its snapshot (its background thread, for tests to wait on)."""
        return self._keeper

    @property
    def eligible(self) -> EligibleRows:
        """The rows a search may return, cached per kind of search (memories/indexes/eligible.py)."""
        return self._eligible

    @property
    def version(self) -> int:
        """Bumped by every row written or dropped (not by an expiry moved in place): the eligible
        rows cached per kind of search are computed again after it changes."""
        return self._version
