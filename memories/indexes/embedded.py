"""Vector index interface and the embedded (in-process) implementation.

The DB is the only store: each process's embedded index loads the stored float32
vectors lazily and replays the ``ChangeFeedEntry`` feed before every search, so writes
made by other processes (server, scheduler, CLI) are seen without any shared memory.

Scores are exact cosines. A search over at least ``SKETCH_MIN_ROWS`` candidate vectors first
scans a *sketch* (the vectors centred and projected on their top principal axes, a third as
many as the model's dimensions: a third of the bytes, and the scan is memory-bound), keeps a shortlist
of the best, and re-scores only those exactly. Centring does not change a query's ranking
(q·(x-μ) = q·x - q·μ, the same shift for every x), so only the discarded minor axes can
reorder candidates; bench/search_latency.py measures how often the top 10 scores still equal
the exact scan's (docs/operations.md).

A new process opens the last persisted snapshot of the index (memories.indexes.snapshots: the arrays
memory-mapped copy-on-write, shared between processes) and replays only the feed after it;
snapshots are written in the background after a full load and as changes accumulate.

A search with at least ``ann.ANN_MIN_ROWS`` candidates instead walks HNSW graphs
(``memories/indexes/hnsw.py``, when usearch is installed), one per partition (namespace, collection, fact
or thread message) it may return from, takes every row of the small partitions, and re-scores
that union exactly.
"""
from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np
from django.db import DatabaseError

from memories.embeddings import from_bytes, get_embedder
from memories.indexes import hnsw, snapshots
from memories.indexes.eligible import Eligible, EligibleRows
from memories.indexes.feed import FeedReader, discarded_on_failure, expiries_of, let_waiters_in, split_expiries
from memories.indexes.file_rows import FileRows
from memories.indexes.row_ids import RowIds, id_order, opened_ids, rebase_ids
from memories.indexes.vectors import StoredPoint, VectorHit, VectorIndex, live_until, until_of
from memories.models import Memory

SKETCH_MIN_ROWS = 20_000  # below this many candidates the exact scan takes a few ms anyway
SKETCH_RATIO = 3  # sketch dimensions = model dimensions // SKETCH_RATIO (384 -> 128)
SKETCH_MIN_DIMS = 64
SKETCH_SAMPLE = 20_000  # rows the projection is fitted on
SHORTLIST_MIN = 400  # re-scored exactly: max(SHORTLIST_MIN, SHORTLIST_PER_RESULT x limit)
SHORTLIST_PER_RESULT = 40


@dataclass(frozen=True)
class Projection:
    mean: np.ndarray  # (dims,)
    basis: np.ndarray  # (dims, k), orthonormal columns
    fitted_rows: int

    def apply(self, vectors: np.ndarray) -> np.ndarray:
        return ((vectors - self.mean) @ self.basis).astype(np.float32, copy=False)


def fit_projection(vectors: np.ndarray, dims: int, fitted_rows: int) -> Projection:
    """Top principal axes of the centred vectors (eigenvectors of their scatter matrix)."""
    mean = vectors.mean(axis=0, dtype=np.float64)
    centred = vectors.astype(np.float64) - mean
    _, eigenvectors = np.linalg.eigh(centred.T @ centred)  # ascending eigenvalues
    basis = np.ascontiguousarray(eigenvectors[:, ::-1][:, :dims], dtype=np.float32)
    return Projection(mean.astype(np.float32), basis, fitted_rows)


class EmbeddedVectorIndex:
    """Cosine search with numpy over rows filtered by namespace, collection and expiry."""

    kind = "embedded"  # the config's vector_index value
    shared = False

    _GROW = 1024

    def __init__(self, model_id: str, dimensions: int) -> None:
        self.model_id = model_id
        self.dimensions = dimensions
        self._lock = threading.RLock()
        self._loaded = False
        self._feed = FeedReader()
        self._applied: set[int] = set()  # change ids this process already applied itself
        self._projection: Projection | None = None
        self._sketch_dims = dimensions // SKETCH_RATIO
        self._keeper = snapshots.Keeper("vector")
        self._dirty: set[int] | None = None  # rows written while a snapshot capture copies the vectors
        self._version = 0  # bumped by every row written or dropped: the cached eligible rows depend on it
        self._eligible = EligibleRows()
        self._since_capture: set[int] | None = None  # rows written since the last capture (see _written)
        self.loaded_from: str | None = None  # "database" or "snapshot", once loaded
        self._ann = hnsw.AnnIndex(dimensions, self._lock, self._vectors_of, self._graph_installed) if hnsw.available() else None
        self._reset_arrays()

    def _reset_arrays(self) -> None:
        self._row_ids = RowIds()  # row <-> memory id (a free row has none)
        self._free_rows: list[int] | None = []  # None: not built yet (see _free)
        self._live_rows = 0
        self._matrix = np.zeros((0, self.dimensions), dtype=np.float32)
        self._ns = np.zeros(0, dtype=np.int32)
        self._coll = np.zeros(0, dtype=np.int32)
        self._threaded = np.zeros(0, dtype=np.bool_)
        self._live = np.zeros(0, dtype=np.float64)
        self._sketch = np.zeros((0, self._sketch_dims), dtype=np.float32)
        self._files: dict[str, FileRows] = {}  # "matrix"/"sketch" -> its rows read from the snapshot file
        self._codes: dict[str, int] = {}
        self._top = 0
        self._version += 1
        self._eligible.clear()
        if self._ann is not None:
            self._ann.reset()

    def _graph_installed(self) -> None:
        """A graph build finished (minutes of a core at a million rows): save it soon, so the next
        process maps it instead of building it again."""
        self._keeper.soon(self._capture)

    @property
    def _free(self) -> list[int]:
        """Rows free for new vectors, the lowest last (built on the first write after a snapshot
        was opened: a search needs none of them)."""
        if self._free_rows is None:
            with self._lock:
                if self._free_rows is None:
                    self._free_rows = self._row_ids.free_rows()
        return self._free_rows

    def _vectors_of(self, rows: np.ndarray) -> np.ndarray:
        """A copy of these rows' vectors (the graph builder reads them a chunk at a time, and every
        exact re-score): read from the snapshot file when the matrix is mapped from one, so the
        pages a search touches do not stay in this process (memories/indexes/file_rows.py)."""
        reader = self._file("matrix", self._matrix)
        return self._matrix[rows] if reader is None else reader.take(rows)

    def _block(self, key: str, array: np.ndarray, start: int, stop: int) -> np.ndarray:
        """``array[start:stop]`` (``key``: "matrix" or "sketch"): read from the snapshot file like
        ``_vectors_of``, or a view when the array is not mapped from one (the callers copy it)."""
        reader = self._file(key, array)
        return array[start:stop] if reader is None else reader.block(start, stop)

    def _file(self, key: str, array: np.ndarray) -> FileRows | None:
        """The file reader of ``array`` while it is still the mapped array of that name."""
        reader = self._files.get(key)
        return reader if reader is not None and reader.array is array else None

    def _map_files(self, folder: Path, arrays: dict[str, np.ndarray]) -> None:
        """Read these arrays' rows, just mapped from ``<folder>/<key>.npy``, from their files from now on."""
        for key, array in arrays.items():
            reader = FileRows.of(array, folder / f"{key}.npy")
            if reader is None:
                self._files.pop(key, None)
            else:
                self._files[key] = reader

    def _wrote(self, key: str, array: np.ndarray, rows: int | np.ndarray) -> None:
        """Rows of a mapped array were written through the mapping: only it holds them now."""
        reader = self._file(key, array)
        if reader is not None:
            reader.mark(rows)

    def _code(self, key: str) -> int:
        return self._codes.setdefault(key, len(self._codes))

    def _grow(self) -> None:
        extra = max(self._GROW, len(self._row_ids) // 2)
        self._matrix = np.vstack([self._matrix, np.zeros((extra, self.dimensions), dtype=np.float32)])
        self._ns = np.concatenate([self._ns, np.full(extra, -1, dtype=np.int32)])
        self._coll = np.concatenate([self._coll, np.full(extra, -1, dtype=np.int32)])
        self._threaded = np.concatenate([self._threaded, np.zeros(extra, dtype=np.bool_)])
        self._live = np.concatenate([self._live, np.zeros(extra, dtype=np.float64)])
        if self._projection is not None:
            self._sketch = np.vstack([self._sketch, np.zeros((extra, self._sketch_dims), dtype=np.float32)])
        free, start = self._free, len(self._row_ids)  # built (if it was not) before the new rows exist
        self._row_ids.extend(extra)
        free.extend(range(len(self._row_ids) - 1, start - 1, -1))
        if self._files:  # the arrays were mapped from a snapshot and are private copies now
            self._files.clear()  # the readers held the old mappings (every page the copy read)
            self._keeper.soon(self._capture)  # a snapshot of the grown arrays, then mapped (_written)

    def _put(self, memory_id: str, vector: np.ndarray, namespace: str, collection: str, until: float,
             threaded: bool = False) -> None:
        row = self._row_ids.row(memory_id)
        moved = row is None or not np.array_equal(self._vectors_of(np.array([row]))[0], vector)
        if not moved and self._ns[row] == self._code("n:" + namespace) and \
                self._coll[row] == self._code("c:" + collection) and self._threaded[row] == threaded:
            self._eligible.set_expiry(self._live, row, until)  # e.g. a new tier: nothing this index holds but the expiry
            return
        self._version += 1
        if row is None:
            self._live_rows += 1
            if not self._free:
                self._grow()
            row = self._free.pop()
            self._top = max(self._top, row + 1)
            self._row_ids.set(row, memory_id)
        self._matrix[row] = vector
        self._wrote("matrix", self._matrix, row)
        if self._dirty is not None:
            self._dirty.add(row)
        if self._since_capture is not None:
            self._since_capture.add(row)
        if self._projection is not None:
            self._sketch[row] = self._projection.apply(vector)
            self._wrote("sketch", self._sketch, row)
        self._ns[row] = self._code("n:" + namespace)
        self._coll[row] = self._code("c:" + collection)
        self._threaded[row] = threaded
        self._live[row] = until
        if self._ann is not None:
            self._ann.put(row, (int(self._ns[row]), int(self._coll[row]), threaded), moved=moved)

    def _drop(self, memory_id: str) -> None:
        row = self._row_ids.row(memory_id)
        if row is not None:
            self._version += 1
            self._live_rows -= 1
            self._row_ids.set(row, None)
            self._ns[row] = -1
            self._free.append(row)
            if self._ann is not None:
                self._ann.drop(row)

    def _indexable(self, memory: Memory) -> bool:
        return (
            not memory.archived
            and memory.embedding is not None
            and memory.embedding_model == self.model_id
        )

    def _put_memory(self, memory: Memory) -> None:
        if self._indexable(memory):
            vector = from_bytes(memory.embedding)
            if vector.shape[0] == self.dimensions:
                self._put(str(memory.id), vector, memory.namespace, memory.collection, live_until(memory),
                          bool(memory.thread))
                return
        self._drop(str(memory.id))

    _FIELDS = ("id", "namespace", "collection", "expires_at", "decay_eligible", "archived", "embedding", "embedding_model",
               "thread")

    def _load(self) -> None:
        self._discard()  # a load that failed half-way may have left rows behind
        self._feed.start()
        rows = Memory.objects.filter(archived=False, embedding_model=self.model_id, embedding__isnull=False)
        fields = ("id", "namespace", "collection", "expires_at", "decay_eligible", "embedding", "thread")
        self._reserve(rows.count())
        # Streamed: holding every row's blob at once would double the peak memory of the load.
        for memory_id, namespace, collection, expires_at, decay_eligible, blob, thread in rows.values_list(
            *fields
        ).iterator(chunk_size=2000):
            vector = from_bytes(blob)
            if vector.shape[0] == self.dimensions:
                self._put(str(memory_id), vector, namespace, collection, until_of(decay_eligible, expires_at),
                          bool(thread))
        self._loaded, self.loaded_from = True, "database"
        used = self._ns[: self._top]
        if np.bincount(used[used >= 0]).max(initial=0) >= SKETCH_MIN_ROWS:
            self._fit_projection()  # now, not on the first large search: the snapshot written next carries it
        self._keeper.loaded()

    def _reserve(self, count: int) -> None:
        """Grow once to the needed size (+10 %) instead of doubling step by step."""
        missing = count - len(self._free)
        if missing > 0:
            saved, self._GROW = self._GROW, int(missing * 1.1) + 1
            try:
                self._grow()
            finally:
                self._GROW = saved

    def _catch_up(self) -> None:
        """Replay the feed; a failure half-way through a change throws the rows away (reloaded next time)."""
        with discarded_on_failure(self._discard, "vector index"):
            self._apply_feed()

    def _discard(self) -> None:
        self._loaded = False
        self._reset_arrays()
        self._applied.clear()
        self._projection = None

    def _apply_feed(self) -> None:
        if not self._loaded and not self._open_snapshot():
            self._load()
            return
        changes = self._feed.read()
        if changes is None:
            self._load()
            return
        if not changes:
            return
        ids, expiries = split_expiries(changes, self._applied)
        self._applied.difference_update(change_id for change_id, _, _ in changes)
        if not ids and not expiries:
            return
        try:
            found = {m.id: m for m in Memory.objects.filter(id__in=ids).only(*self._FIELDS)} if ids else {}
            moved = expiries_of(expiries)
        except DatabaseError:
            self._feed.rewind(changes)  # nothing applied yet: read them again next time
            raise
        for memory_id in ids:
            memory = found.get(memory_id)
            if memory is None:
                self._drop(str(memory_id))
            else:
                self._put_memory(memory)
        for memory_id in expiries:
            if memory_id not in moved:
                self._drop(str(memory_id))
                continue
            row = self._row_ids.row(str(memory_id))
            if row is not None:  # not held: not searchable (archived, no vector), and still is not
                self._eligible.set_expiry(self._live, row, moved[memory_id])
        self._keeper.note(len(ids) + len(expiries))

    # Rows are written in place (copy-on-write pages); the projection is only ever replaced.
    _WRITABLE = frozenset({"matrix", "ns", "coll", "threaded", "live", "sketch"})

    def _snapshot_params(self) -> dict[str, object]:
        return {"index": "embedded-vector", "model_id": self.model_id, "dimensions": self.dimensions,
                "sketch_dims": self._sketch_dims}

    def _open_snapshot(self) -> bool:
        """Take the rows from this store's snapshot (the caller replays the feed after it)."""
        snapshot = snapshots.read("vector", self._snapshot_params(), ("codes", "top"), self._WRITABLE)
        if snapshot is None:
            return False
        arrays, ids = snapshot.arrays, opened_ids(snapshot)
        columns = ("matrix", "ns", "coll", "threaded", "live")
        if any(arrays.get(key) is None or len(arrays[key]) != len(ids.base) for key in columns) or \
                arrays["matrix"].shape[1:] != (self.dimensions,):
            snapshots.logger.warning("vector index: snapshot arrays disagree in length, loading from the database")
            return False
        self._reset_arrays()
        self._matrix, self._ns, self._coll, self._threaded, self._live = (arrays[key] for key in columns)
        self._row_ids = ids.row_ids()
        self._free_rows = None  # built on the first write: a search needs none
        self._live_rows = int(np.count_nonzero(self._ns >= 0))  # a free row's is -1 (its id is not read)
        self._codes = {str(key): int(code) for key, code in snapshot.meta["codes"].items()}
        self._top = int(snapshot.meta["top"])
        if self._ann is not None:  # the rows came from the snapshot, not through _put
            self._ann = self._opened_graphs(snapshot, self._ann)
        if {"sketch", "mean", "basis"} <= arrays.keys() and len(arrays["sketch"]) == len(ids.base):
            self._projection = Projection(arrays["mean"], arrays["basis"], int(snapshot.meta.get("fitted_rows", 0)))
            self._sketch = arrays["sketch"]
        if snapshot.folder is not None:
            self._map_files(snapshot.folder, {"matrix": self._matrix, "sketch": self._sketch})
        self._feed.resume(snapshot.position.change_id, snapshot.position.memory_id)
        self._loaded, self.loaded_from = True, "snapshot"
        self._keeper.opened(0)
        return True

    def _opened_graphs(self, snapshot: snapshots.Capture, current: hnsw.AnnIndex) -> hnsw.AnnIndex:
        """The snapshot's HNSW graphs, mapped from its files; without them (or when they do not
        fit) ``current`` with the rows assigned to their partitions (graphs built when needed)."""
        arrays = {key[4:]: value for key, value in snapshot.arrays.items() if key.startswith("ann_")}
        if arrays:
            try:
                return hnsw.AnnIndex.opened(arrays, snapshot.paths, self.dimensions, self._lock, self._vectors_of,
                                           self._graph_installed)
            except (ValueError, KeyError, RuntimeError) as exc:
                snapshots.logger.warning("vector index: snapshot graphs unusable (%s), rebuilding them", exc)
        current.assign(np.flatnonzero(self._ns[: self._top] >= 0), self._ns, self._coll, self._threaded)
        return current

    _CAPTURE_ROWS = 8192  # rows of the vectors (and sketch) copied per hold of the lock

    def _capture(self) -> snapshots.Capture | None:
        """A copy of the rows and their feed position. The vectors and the sketch are copied a
        chunk per hold of the lock, so searches go on in between; rows written meanwhile are noted
        (``_dirty``) and copied again at the end, under the hold that also takes the small arrays
        and the feed position, so they all agree. None when there is nothing consistent to take
        (not loaded, or the arrays were replaced meanwhile: grown, refitted, reloaded)."""
        with self._lock:
            if not self._capturable() or self._dirty is not None:  # not loaded, or a capture runs already
                return None
            big = {"matrix": self._matrix, **({"sketch": self._sketch} if self._projection is not None else {})}
            copies = {key: np.empty(array.shape, dtype=array.dtype) for key, array in big.items()}
            self._dirty = set()
        try:
            for start in range(0, len(big["matrix"]), self._CAPTURE_ROWS):
                with self._lock:
                    if not self._holds(big):
                        return None
                    for key, array in big.items():
                        copies[key][start:start + self._CAPTURE_ROWS] = self._block(key, array, start,
                                                                                    start + self._CAPTURE_ROWS)
                let_waiters_in()
            with self._lock:
                if not self._holds(big) or not self._capturable():
                    return None
                dirty = np.fromiter(self._dirty, dtype=np.int64, count=len(self._dirty))
                for key, array in big.items():
                    copies[key][dirty] = array[dirty]
                self._since_capture = set()
                return self._captured(copies, big)
        finally:
            with self._lock:
                self._dirty = None

    def _capturable(self) -> bool:
        """Loaded, at a feed position whose row is known."""
        return self._loaded and not (self._feed.last_change and self._feed.last_memory_id is None)

    def _holds(self, big: dict[str, np.ndarray]) -> bool:
        """Whether the index still holds the arrays a capture is copying."""
        return self._matrix is big["matrix"] and (self._sketch is big["sketch"] if "sketch" in big else self._projection is None)

    def _captured(self, copies: dict[str, np.ndarray], big: dict[str, np.ndarray]) -> snapshots.Capture:
        arrays = {"matrix": copies["matrix"], "ns": self._ns.copy(), "coll": self._coll.copy(),
                  "threaded": self._threaded.copy(), "live": self._live.copy()}
        meta: dict[str, object] = {**self._snapshot_params(), "codes": dict(self._codes), "top": self._top}
        if self._projection is not None:
            arrays |= {"sketch": copies["sketch"], "mean": self._projection.mean, "basis": self._projection.basis}
            meta["fitted_rows"] = self._projection.fitted_rows
        files: dict[str, Callable[[Path], None]] = {}
        graphs: dict[str, object] = {}
        if self._ann is not None:  # the graphs never change: saved after the lock is released
            captured = self._ann.capture()
            arrays |= {f"ann_{key}": value for key, value in captured.arrays.items()}
            graphs = captured.graphs
            files = {name: functools.partial(hnsw.save_graph, graph) for name, graph in graphs.items()}
        arrays["ids"] = ids = self._row_ids.capture()
        position = snapshots.FeedPosition(self._feed.last_change, self._feed.last_memory_id)
        return snapshots.Capture(arrays, {}, meta, position, files=files, derived={"id_order": functools.partial(id_order, ids)},
                                 written=functools.partial(self._written, big, graphs, self._row_ids.token))

    def _written(self, big: dict[str, np.ndarray], graphs: dict[str, object], ids_token: object, folder: Path) -> None:
        """A snapshot of this index is in place at ``folder``: its vectors (and sketch) and graphs
        replace the copies this process holds in its own memory, mapped copy-on-write like an
        opened snapshot's (a process that loaded a million rows from the database drops ~2 GB of
        private memory for shared file pages; one that opened a snapshot drops the pages its
        writes copied). Rows written since the capture are copied over.
        Skipped when the arrays were replaced meanwhile (grown, refitted, reloaded)."""
        if self._ann is not None:
            self._ann.saved_in(graphs, folder)
        rebase_ids(self._lock, self._row_ids, ids_token, folder)
        mapped: dict[str, np.ndarray] = {}
        for key in big:
            try:
                mapped[key] = np.asarray(np.load(folder / f"{key}.npy", mmap_mode="c", allow_pickle=False))
            except (OSError, ValueError):
                return  # removed by a newer snapshot already: keep the copies
        with self._lock:
            if not self._holds(big) or self._since_capture is None or \
                    any(mapped[key].shape != array.shape for key, array in big.items()):
                return
            rows = np.fromiter(self._since_capture, dtype=np.int64, count=len(self._since_capture))
            for key, array in big.items():
                mapped[key][rows] = array[rows]
            self._matrix = mapped["matrix"]
            if "sketch" in mapped:
                self._sketch = mapped["sketch"]
            self._map_files(folder, mapped)
            for key, array in mapped.items():
                self._wrote(key, array, rows)
            self._since_capture = None

    def save_snapshot(self) -> bool:
        """Write the snapshot now, on this thread (the background writer does the same)."""
        return self._keeper.save_now(self._capture)

    def upsert(self, memory: Memory, *, change_id: int | None = None) -> None:
        with self._lock:
            if self._loaded:
                self._put_memory(memory)
                if change_id is not None and change_id > self._feed.last_change:
                    self._applied.add(change_id)

    def delete(self, memory_id: str) -> None:
        with self._lock:
            self._drop(str(memory_id))

    def search(
        self, vector: np.ndarray, *, namespace: str, collection: str | None, limit: int, now: datetime,
        facts_only: bool = False, exact: bool = False,
    ) -> list[VectorHit]:
        """Best ``limit`` live vectors (``facts_only``: no thread messages); ``exact`` skips the
        sketch (what the sketch is measured against)."""
        with self._lock:
            self._catch_up()
            self._keeper.maybe_start(self._capture)
            ns_code = self._codes.get("n:" + namespace)
            if ns_code is None:
                return []
            rows = self._high_water()
            coll_code = None if collection is None else self._codes.get("c:" + collection, -2)
            eligible = self._eligible_rows(ns_code, coll_code, facts_only, rows, now.timestamp())
            mask, candidates = eligible.mask, eligible.rows()
            if candidates.size == 0:
                return []
            query = np.asarray(vector, dtype=np.float32)
            shortlist = None
            if not exact and candidates.size >= hnsw.ANN_MIN_ROWS and self._ann is not None:
                pids = self._ann.partitions(ns_code, coll_code, facts_only)
                keep = max(SHORTLIST_MIN, SHORTLIST_PER_RESULT * limit)
                shortlist = self._ann.shortlist(query, pids, mask, candidates, keep)
            if shortlist is not None:  # the graphs' best rows (and the small partitions'), re-scored exactly
                candidates = shortlist
                if candidates.size == 0:
                    return []
                scores = self._vectors_of(candidates) @ query
            elif not exact and candidates.size >= SKETCH_MIN_ROWS and self._fit_projection():
                candidates = self._shortlist(query, candidates, rows, limit)
                scores = self._vectors_of(candidates) @ query
            elif candidates.size * 4 >= rows:  # most rows qualify: one product over the contiguous block, no copy
                scores = (self._matrix[:rows] @ query)[candidates]
            else:  # a small namespace in a large store: gather only its rows
                scores = self._vectors_of(candidates) @ query
            top = min(limit, scores.size)
            best = np.argpartition(-scores, top - 1)[:top]
            best = best[np.argsort(-scores[best], kind="stable")]
            return [VectorHit(self._row_ids.get(int(candidates[i])) or "", float(scores[i])) for i in best]

    def _eligible_rows(self, ns_code: int, coll_code: int | None, facts_only: bool, rows: int,
                       now: float) -> Eligible:
        """The rows a search may return (in the namespace and collection, unexpired at ``now``,
        facts only if asked), as a mask and as row numbers: reused until a row is written or
        dropped, or one of them expires (at a million rows, computing them took a few ms of
        every search)."""
        def select() -> np.ndarray:
            mask = self._ns[:rows] == ns_code
            if coll_code is not None:
                mask &= self._coll[:rows] == coll_code
            if facts_only:
                mask &= ~self._threaded[:rows]
            return mask

        return self._eligible.get((ns_code, coll_code, facts_only), (self._version, rows), now, self._live[:rows], select)

    def _shortlist(self, query: np.ndarray, candidates: np.ndarray, rows: int, limit: int) -> np.ndarray:
        """The candidates whose sketch scores best: the only ones scored exactly."""
        assert self._projection is not None
        projected = self._projection.basis.T @ query
        if candidates.size * 4 >= rows:
            approx = (self._sketch[:rows] @ projected)[candidates]
        else:
            approx = self._sketch[candidates] @ projected
        keep = max(SHORTLIST_MIN, SHORTLIST_PER_RESULT * limit)
        if keep >= candidates.size:
            return candidates
        return candidates[np.argpartition(-approx, keep - 1)[:keep]]

    def _fit_projection(self) -> bool:
        """Fit the sketch's projection (again once the index has doubled); False when not worth it."""
        if self._sketch_dims < SKETCH_MIN_DIMS:
            return False
        live = self._live_rows
        if self._projection is not None and live < 2 * self._projection.fitted_rows:
            return True
        used = np.flatnonzero(self._ns[: self._top] >= 0)
        if used.size < SKETCH_MIN_ROWS:
            return self._projection is not None
        sample = np.random.default_rng(0).choice(used, size=min(SKETCH_SAMPLE, used.size), replace=False)
        projection = fit_projection(self._vectors_of(np.sort(sample)), self._sketch_dims, fitted_rows=live)
        sketch = np.zeros((len(self._row_ids), self._sketch_dims), dtype=np.float32)
        for start in range(0, self._top, 16_384):  # in chunks: no full-size temporary
            stop = min(start + 16_384, self._top)
            sketch[start:stop] = projection.apply(self._block("matrix", self._matrix, start, stop))
        self._projection, self._sketch = projection, sketch
        return True

    def sync(self) -> int:
        """Replay the change feed now (searches do it anyway)."""
        with self._lock:
            if self._loaded:
                self._catch_up()
        return 0

    def _high_water(self) -> int:
        """Every row ever used is below this index (freed rows are masked out by ns = -1)."""
        return self._top

    def size(self) -> int:
        with self._lock:
            self._catch_up()
            return self._live_rows

    def health(self) -> tuple[str, str]:
        source = " from a snapshot" if self.loaded_from == "snapshot" else ""
        state = f"{self._live_rows} vectors loaded{source}" if self._loaded else "loads on first search"
        sketch = ", sketch prefilter" if self._projection is not None else ""
        graphs = f", {self._ann.graphs()} HNSW graph(s)" if self._ann is not None and self._ann.graphs() else ""
        return "healthy", f"embedded cosine ({state}{sketch}{graphs})"


    def close(self) -> None:
        """Nothing to release: the rows live in this process's memory."""

    def remote_memories(self, memory_ids: list[str], namespace: str) -> list[Memory]:
        return []  # every vector here came from this store's own rows

    def scan(self) -> Iterator[tuple[str, Iterator[StoredPoint]]]:
        return iter(())

    @property
    def loaded(self) -> bool:
        """Whether the vectors were read from the database (they are on the first search)."""
        return self._loaded

    @property
    def ann(self) -> hnsw.AnnIndex | None:
        """The HNSW graphs of the large partitions (None without usearch)."""
        return self._ann

    @property
    def feed(self) -> FeedReader:
        """This index's position in the change feed."""
        return self._feed

    @property
    def snapshot_keeper(self) -> snapshots.Keeper:
        """When this index writes its snapshot (its background thread, for tests to wait on)."""
        return self._keeper


_index: VectorIndex | None = None
_index_lock = threading.Lock()


def get_vector_index() -> VectorIndex | None:
    """The configured index for the current embedder, or None in degraded mode."""
    global _index
    from django.conf import settings

    embedder = get_embedder()
    if embedder is None:
        return None
    with _index_lock:
        wanted = settings.BHGBRAIN.vector_index
        if _index is None or _index.model_id != embedder.model_id or _index.kind != wanted:
            if _index is not None:
                _index.close()
            _index = _build(wanted, embedder.model_id, embedder.dimensions)
        return _index


def _build(kind: str, model_id: str, dimensions: int) -> VectorIndex:
    from django.conf import settings

    if kind == "qdrant":
        from memories.indexes.qdrant import QdrantVectorIndex

        return QdrantVectorIndex(settings.BHGBRAIN.qdrant, model_id, dimensions)
    return EmbeddedVectorIndex(model_id, dimensions)


def reset_vector_index() -> None:
    global _index
    with _index_lock:
        if _index is not None:
            _index.close()
        _index = None
