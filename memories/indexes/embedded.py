"""Vector index interface and the embedded (in-process) implementation.

The DB is the only store: each process's embedded index loads the stored float32
vectors lazily and replays the ``ChangeFeedEntry`` feed before every search, so writes
made by other processes (server, scheduler, CLI) are seen without any shared memory
(the lifecycle it shares with the text index: memories/indexes/base.py).

Scores are exact cosines. A search over at least ``sketch.SKETCH_MIN_ROWS`` candidate vectors
first scans a *sketch* of them (memories/indexes/sketch.py), keeps a shortlist of the best, and
re-scores only those exactly. The rows themselves live in memories/indexes/vector_rows.py.

A new process opens the last persisted snapshot of the index (memories.indexes.snapshots: the arrays
memory-mapped copy-on-write, shared between processes) and replays only the feed after it;
snapshots are written in the background after a full load and as changes accumulate.

A search with at least ``ann.ANN_MIN_ROWS`` candidates instead walks HNSW graphs
(``memories/indexes/hnsw.py``, when usearch is installed), one per partition (namespace, collection, fact
or thread message) it may return from, takes every row of the small partitions, and re-scores
that union exactly.
"""
from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Hashable, Iterator
from datetime import datetime

import numpy as np
from django.db.models import QuerySet

from memories.embeddings import from_bytes, get_embedder
from memories.indexes import hnsw, sketch, snapshots
from memories.indexes.base import InProcessIndex
from memories.indexes.eligible import Eligible
from memories.indexes.partitions import Versions, partition_of, partitions, rows_in
from memories.indexes.row_ids import RowIds, opened_ids
from memories.indexes.vector_capture import VectorCapture
from memories.indexes.vector_rows import VectorRows
from memories.indexes.vectors import StoredPoint, VectorHit, VectorIndex, live_until, until_of
from memories.models import Memory

_FIELDS = ("id", "namespace", "collection", "expires_at", "decay_eligible", "archived", "embedding", "embedding_model",
           "thread", "superseded_by")


class EmbeddedVectorIndex(VectorCapture, InProcessIndex):
    """Cosine search with numpy over rows filtered by namespace, collection and expiry."""

    kind = "embedded"  # the config's vector_index value
    shared = False
    snapshot_kind, label = "vector", "vector index"
    snapshot_meta = ("codes", "top")
    # Rows are written in place (copy-on-write pages); the projection is only ever replaced.
    snapshot_writable = frozenset({"matrix", "ns", "coll", "threaded", "live", "sketch"})

    def __init__(self, model_id: str, dimensions: int) -> None:
        self.model_id = model_id
        self.dimensions = dimensions
        self._rows = VectorRows(dimensions, dimensions // sketch.SKETCH_RATIO, self._snapshot_soon)
        self._ann: hnsw.AnnIndex | None = None
        super().__init__()
        self._ann = hnsw.AnnIndex(dimensions, self._lock, self._rows.vectors_of, self._snapshot_soon) if hnsw.available() else None
        self._reset()

    def _reset(self) -> None:
        super()._reset()
        self._rows.reset()
        if self._ann is not None:
            self._ann.reset()

    def _snapshot_soon(self) -> None:
        """The arrays outgrew their snapshot's files, or a graph build finished (minutes of a core at
        a million rows): save soon, so the next process maps it instead of building it again."""
        self._keeper.soon(self._capture)

    # --- rows --------------------------------------------------------------------------------

    def _put(self, memory_id: str, vector: np.ndarray, namespace: str, collection: str, until: float,
             threaded: bool = False) -> None:
        rows = self._rows
        row = rows.ids.row(memory_id)
        ns, coll = rows.code("n:" + namespace), rows.code("c:" + collection)
        moved = row is None or not np.array_equal(rows.vectors_of(np.array([row]))[0], vector)
        if not moved and rows.same_row(row, ns, coll, threaded):  # type: ignore[arg-type]
            self._eligible.set_expiry(rows.live, row, until)  # e.g. a new tier: nothing this index holds but the expiry
            return
        before = (self._version, rows.top)
        self._version += 1
        if row is None:
            row = rows.allocate(memory_id)
        rows.write(row, vector, ns, coll, threaded, until)
        self._eligible.row_changed(row, before, (self._version, rows.top), rows.top, until, self._fits(row))
        if self._ann is not None:
            self._ann.put(row, (ns, coll, threaded), moved=moved)

    def _drop(self, memory_id: str) -> None:
        before = (self._version, self._rows.top)
        row = self._rows.release(memory_id)
        if row is not None:
            self._version += 1
            self._eligible.row_changed(row, before, (self._version, self._rows.top), self._rows.top, None,
                                       self._fits(row))
            if self._ann is not None:
                self._ann.drop(row)

    def _fits(self, row: int) -> Callable[[Hashable], bool]:
        """Whether ``row`` is one a kind of search selects (expiry aside): ``_selected`` over that row."""
        return lambda kind: bool(self._selected(kind, row, row + 1)[0])  # type: ignore[arg-type]

    def _selected(self, kind: tuple[tuple[int, ...], int | None, bool], start: int, stop: int) -> np.ndarray:
        """A mask of rows ``start:stop`` in the namespaces and collection of ``kind`` (facts only if
        asked): what a kind of search may return, expiry aside."""
        rows, (ns_codes, coll_code, facts_only) = self._rows, kind
        mask = rows_in(rows.ns[start:stop], ns_codes)
        if coll_code is not None:
            mask &= rows.coll[start:stop] == coll_code
        if facts_only:
            mask &= ~rows.threaded[start:stop]
        return mask

    def _move_expiry(self, memory_id: str, until: float) -> None:
        row = self._rows.ids.row(memory_id)
        if row is not None:  # not held: not searchable (archived, no vector), and still is not
            self._eligible.set_expiry(self._rows.live, row, until)

    def _put_memory(self, memory: Memory) -> None:
        if not memory.archived and memory.embedding is not None and memory.embedding_model == self.model_id:
            vector = from_bytes(memory.embedding)
            if vector.shape[0] == self.dimensions:
                self._put(str(memory.id), vector, partition_of(memory.namespace, memory.superseded_by),
                          memory.collection, live_until(memory), bool(memory.thread))
                return
        self._drop(str(memory.id))

    # --- lifecycle hooks (memories/indexes/base.py) ----------------------------------------

    def _indexed_rows(self) -> QuerySet[Memory]:
        return Memory.objects.filter(archived=False, embedding_model=self.model_id, embedding__isnull=False)

    def _load_rows(self, chunk: int) -> Iterator[int]:
        rows = self._indexed_rows()
        fields = ("id", "namespace", "collection", "expires_at", "decay_eligible", "embedding", "thread", "superseded_by")
        self._rows.reserve(rows.count())
        read = 0
        # Streamed: holding every row's blob at once would double the peak memory of the load.
        for memory_id, namespace, collection, expires_at, decay_eligible, blob, thread, successor in rows.values_list(
            *fields
        ).iterator(chunk_size=2000):
            vector = from_bytes(blob)
            if vector.shape[0] == self.dimensions:
                self._put(str(memory_id), vector, partition_of(namespace, successor), collection,
                          until_of(decay_eligible, expires_at), bool(thread))
            read += 1
            if read % chunk == 0:
                yield read
        yield read

    def _ready(self) -> None:
        if self.loaded_from == "database" and self._rows.largest_partition() >= sketch.SKETCH_MIN_ROWS:
            self._rows.fit_sketch()  # now, not on the first large search: the snapshot written next carries it

    def _fetch(self, memory_ids: set[uuid.UUID]) -> dict[uuid.UUID, Memory]:
        return {m.id: m for m in Memory.objects.filter(id__in=memory_ids).only(*_FIELDS)} if memory_ids else {}

    def _apply_fetched(self, memory_ids: set[uuid.UUID], fetched: dict[uuid.UUID, Memory]) -> None:
        for memory_id in memory_ids:
            memory = fetched.get(memory_id)
            if memory is None:
                self._drop(str(memory_id))
            else:
                self._put_memory(memory)

    def _snapshot_params(self) -> dict[str, object]:
        return {"index": "embedded-vector", "model_id": self.model_id, "dimensions": self.dimensions,
                "sketch_dims": self._rows.sketch_dims, "partitions": "superseded"}

    def _adopt(self, snapshot: snapshots.Capture) -> bool:
        ids = opened_ids(snapshot)
        if not self._rows.fits(snapshot.arrays, len(ids.base)):
            snapshots.logger.warning("vector index: snapshot arrays disagree in length, loading from the database")
            return False
        self._reset()
        self._rows.open(snapshot.arrays, ids, snapshot.meta, snapshot.folder)
        if self._ann is not None:  # the rows came from the snapshot, not through _put
            self._ann = self._opened_graphs(snapshot, self._ann)
        return True

    def _opened_graphs(self, snapshot: snapshots.Capture, current: hnsw.AnnIndex) -> hnsw.AnnIndex:
        """The snapshot's HNSW graphs, mapped from its files; without them (or when they do not
        fit) ``current`` with the rows assigned to their partitions (graphs built when needed)."""
        arrays = {key[4:]: value for key, value in snapshot.arrays.items() if key.startswith("ann_")}
        if arrays:
            try:
                return hnsw.AnnIndex.opened(arrays, snapshot.paths, self.dimensions, self._lock, self._rows.vectors_of,
                                            self._snapshot_soon)
            except (ValueError, KeyError, RuntimeError) as exc:
                snapshots.logger.warning("vector index: snapshot graphs unusable (%s), rebuilding them", exc)
        rows = self._rows
        current.assign(rows.used(), rows.ns, rows.coll, rows.threaded)
        return current

    # --- the VectorIndex interface -----------------------------------------------------------

    def upsert(self, memory: Memory, *, change_id: int | None = None) -> None:
        with self._lock:
            if self._loaded:
                self._put_memory(memory)
                self._applied_here(change_id)

    def delete(self, memory_id: str) -> None:
        with self._lock:
            self._drop(str(memory_id))

    def search(
        self, vector: np.ndarray, *, namespace: str, collection: str | None, limit: int, now: datetime,
        facts_only: bool = False, exact: bool = False, versions: Versions = "current",
    ) -> list[VectorHit]:
        """Best ``limit`` live vectors (``facts_only``: no thread messages); ``exact`` skips the
        sketch (what the sketch is measured against); ``versions``: the namespace's current facts,
        its superseded ones, or both (memories/indexes/partitions.py)."""
        self._while_rebuilding()  # before the lock: no wait for the rebuild's chunk under way
        with self._lock:
            self._catch_up()
            self._snapshot_when_due()
            rows = self._rows
            found = (rows.codes.get("n:" + name) for name in partitions(namespace, versions))
            ns_codes = tuple(code for code in found if code is not None)
            if not ns_codes:
                return []
            top = rows.top
            coll_code = None if collection is None else rows.codes.get("c:" + collection, -2)
            eligible = self._eligible_rows(ns_codes, coll_code, facts_only, top, now.timestamp())
            mask, candidates = eligible.mask, eligible.rows()
            if candidates.size == 0:
                return []
            query = np.asarray(vector, dtype=np.float32)
            shortlist = None
            if not exact and candidates.size >= hnsw.ANN_MIN_ROWS and self._ann is not None:
                pids = [pid for code in ns_codes for pid in self._ann.partitions(code, coll_code, facts_only)]
                shortlist = self._ann.shortlist(query, pids, mask, candidates, hnsw.shortlist_size(limit))
            if shortlist is not None:  # the graphs' best rows (and the small partitions'), re-scored exactly
                candidates = shortlist
                if candidates.size == 0:
                    return []
                scores = rows.vectors_of(candidates) @ query
            elif not exact and candidates.size >= sketch.SKETCH_MIN_ROWS and rows.fit_sketch():
                assert rows.projection is not None
                candidates = sketch.shortlist(rows.projection, rows.sketch, query, candidates, top, limit)
                scores = rows.vectors_of(candidates) @ query
            elif candidates.size * 4 >= top:  # most rows qualify: one product over the contiguous block, no copy
                scores = (rows.matrix[:top] @ query)[candidates]
            else:  # a small namespace in a large store: gather only its rows
                scores = rows.vectors_of(candidates) @ query
            best = min(limit, scores.size)
            order = np.argpartition(-scores, best - 1)[:best]
            order = order[np.argsort(-scores[order], kind="stable")]
            return [VectorHit(rows.ids.get(int(candidates[i])) or "", float(scores[i])) for i in order]

    def _eligible_rows(self, ns_codes: tuple[int, ...], coll_code: int | None, facts_only: bool, top: int,
                       now: float) -> Eligible:
        """The rows a search may return (in the namespace and collection, unexpired at ``now``,
        facts only if asked), as a mask and as row numbers: reused until a row is written or
        dropped, or one of them expires (at a million rows, computing them took a few ms of
        every search)."""
        kind = (ns_codes, coll_code, facts_only)
        return self._eligible.get(kind, (self._version, top), now, self._rows.live[:top],
                                  lambda: self._selected(kind, 0, top))

    def sync(self) -> int:
        """Replay the change feed now (searches do it anyway)."""
        with self._lock:
            if self._loaded:
                self._catch_up()
        return 0

    def size(self) -> int:
        with self._lock:
            self._catch_up()
            return self._rows.live_rows

    def health(self) -> tuple[str, str]:
        source = " from a snapshot" if self.loaded_from == "snapshot" else ""
        state = f"{self._rows.live_rows} vectors loaded{source}" if self._loaded else "loads on first search"
        if self._rebuild is not None:
            state = f"rebuilding from the database: {self._rebuild.rows_loaded}/{self._rebuild.rows_total} rows"
        prefilter = ", sketch prefilter" if self._rows.projection is not None else ""
        graphs = f", {self._ann.graphs()} HNSW graph(s)" if self._ann is not None and self._ann.graphs() else ""
        return "healthy" if self._rebuild is None else "degraded", f"embedded cosine ({state}{prefilter}{graphs})"

    def close(self) -> None:
        """Nothing to release (the rows live in this process's memory); a rebuild under way stops."""
        self.stop_rebuild()

    def remote_memories(self, memory_ids: list[str], namespace: str) -> list[Memory]:
        return []  # every vector here came from this store's own rows

    def scan(self) -> Iterator[tuple[str, Iterator[StoredPoint]]]:
        return iter(())

    # --- seams for tests and benchmarks ------------------------------------------------------

    def put_vector(self, memory_id: str, vector: np.ndarray, *, namespace: str, collection: str,
                   until: float = float("inf"), threaded: bool = False) -> None:
        """Write one row directly, as a load does (no database: tests and benchmarks fill large
        indexes this way, then ``mark_loaded``)."""
        with self._lock:
            self._put(memory_id, vector, namespace, collection, until, threaded)

    def mark_loaded(self) -> None:
        """Treat the rows put directly as loaded (the change feed is still read before a search)."""
        with self._lock:
            self._loaded = True

    def reserve(self, count: int) -> None:
        """Make room for ``count`` rows now, as a write past the last free row does (a load reserves
        its rows up front)."""
        with self._lock:
            self._rows.reserve(count)

    @property
    def rows(self) -> VectorRows:
        """The row storage, for tests and benchmarks to read (writes go through the index)."""
        return self._rows

    @property
    def row_ids(self) -> RowIds:
        """Row <-> memory id of the rows held (a free row has none)."""
        return self._rows.ids

    @property
    def ann(self) -> hnsw.AnnIndex | None:
        """The HNSW graphs of the large partitions (None without usearch)."""
        return self._ann


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
