"""Approximate candidate search for large namespaces: one HNSW graph (usearch, int8) per partition.

A *partition* is the rows sharing a namespace, a collection and a kind (fact or thread message).
Those are the equality filters of every vector search, so a search walks only the graphs of the
partitions it may return — the filters are applied by what is in the graph, not by fetching more
and dropping the rest. Expiry, the one range filter, is checked on the graph's answers: the search
widens (4x at a time) until ``keep`` live rows are found or the graph is exhausted, so it never
returns fewer results than exist. The graphs hold int8 codes (a quarter of the float32 bytes);
the caller re-scores the returned rows exactly with its float32 vectors.

A search with ``ANN_MIN_ROWS`` candidates or more uses the graphs; a partition it searches gets
a graph once it holds ``GRAPH_MIN_ROWS`` rows, and the rows of smaller ones are all re-scored.

**A graph never changes once built.** Rows put into or dropped from its partition afterwards are
its *dirty* rows: a search re-scores the dirty rows still in the partition exactly, beside the
graph's answers (a graph answer no longer in the partition is dropped). When a partition has more
dirty rows than ``refresh_after(rows)``, a background thread copies the graph, removes the dirty
rows from the copy, adds back those still in the partition with their current vectors, and
installs the copy; rows that change meanwhile stay dirty. A first build is the same with an empty
graph and every row of the partition. Builds read vectors a chunk at a time under the caller's
lock and add them outside it, so searches go on (they take the caller's other path until a first
graph exists).

Immutable graphs are what make them cheap to persist and share: a snapshot (memories.indexes.snapshots)
saves each graph to a file outside the index's lock, and a new process maps that file read-only
(``Index.restore(view=True)``), so it searches at once without a build and processes share the
pages. An unchanged graph is hard-linked into the next snapshot instead of written again.

Builds stop at interpreter exit (between chunks, joined by an ``atexit`` hook): a thread still
inside the library when the process ends aborts it ("terminate called without an active
exception"), which killed short-lived processes (an MCP stdio session) on large stores.

Why a graph and not an IVF (k-means lists) in numpy: on the benchmark's vectors the exact top 10
is scattered over so many lists that an IVF has to scan about 70 % of the rows to find it in 98 %
of queries (docs/performance.md, "Approximate vector search").
"""
from __future__ import annotations

import atexit
import logging
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

# A search with this many candidates walks graphs. Measured at 100k (docs/performance.md): graphs
# 5.3 ms, exact scan 4.7 ms, sketch 2.4 ms; at 1M the scans take 46 ms, a graph walk 3.7 ms.
ANN_MIN_ROWS = 100_000
# A partition this large gets a graph when a large search needs it; the rows of smaller ones are
# re-scored directly (measured: a 33k-row partition scanned beside a graph cost 20 ms a search).
GRAPH_MIN_ROWS = 5_000
# Measured at 1M rows (docs/performance.md): degree 16 reached only 191/200 identical top-10
# even at expansion 512; degree 32 reaches 197/200 at 256 (199 at 1024, twice the time).
CONNECTIVITY = 32  # graph degree (usearch's M)
EXPANSION_ADD = 96  # candidate list while inserting (build time grows with it)
EXPANSION_SEARCH = 256  # candidate list while searching (a search asks for 400 rows anyway)
# Rows a search keeps of each graph, re-scored exactly: max(SHORTLIST_MIN, SHORTLIST_PER_RESULT x limit).
# Fewer per result than the sketch's 40 (memories/indexes/sketch.py): a graph's nearest rows are
# nearer the exact ones than a projection's. Measured at 1M (docs/performance.md): a hybrid search's
# 20 candidates from 400 rows gave the exact top 20 in 196/200 questions (800: 199), worst gap in
# the 20th cosine 0.001, top 10 exact 200/200 either way, the graph search 7.4 ms instead of 13.5.
SHORTLIST_MIN = 400
SHORTLIST_PER_RESULT = 20
BUILD_CHUNK = 1_024  # rows added per step of a build (about 0.5 s of one core): the exit hook waits at most this
REFRESH_MIN_DIRTY = 2_048  # a graph is refreshed once its partition has this many dirty rows,
REFRESH_DIRTY_SHARE = 0.01  # or this share of its rows if more (a 1M partition: 10k rows re-scored beside it)
_STATE_VERSION = 2
_BUILDING = threading.Lock()  # one build at a time in a process: it takes one core, serving keeps the other
_STOP = threading.Event()  # set at interpreter exit: builds give up between chunks
_THREADS: set[threading.Thread] = set()
_THREADS_LOCK = threading.Lock()

PartitionKey = tuple[int, int, bool]  # (namespace code, collection code, thread message)


def shortlist_size(limit: int) -> int:
    """How many of a graph's nearest rows a search for ``limit`` results re-scores exactly."""
    return max(SHORTLIST_MIN, SHORTLIST_PER_RESULT * limit)


def available() -> bool:
    """Whether usearch is installed (without it every search takes the exact or sketch path)."""
    try:
        import usearch.index  # noqa: F401
    except ImportError:
        return False
    return True


def refresh_after(rows: int) -> int:
    """Dirty rows a partition of ``rows`` rows tolerates before its graph is refreshed."""
    return max(REFRESH_MIN_DIRTY, int(rows * REFRESH_DIRTY_SHARE))


def _distinct(rows: np.ndarray) -> np.ndarray:
    """The rows sorted, each once: ``np.unique`` without its first call's lazy import of numpy.ma
    (~70 ms on a new process's first search)."""
    rows = np.sort(rows)
    if rows.size < 2:
        return rows
    return rows[np.concatenate(([True], rows[1:] != rows[:-1]))]


def _new_graph(dimensions: int):  # noqa: ANN202 - usearch.index.Index, imported lazily
    from usearch.index import Index

    return Index(ndim=dimensions, metric="cos", dtype="i8", connectivity=CONNECTIVITY,
                 expansion_add=EXPANSION_ADD, expansion_search=EXPANSION_SEARCH)


def _view_graph(path: Path, dimensions: int):  # noqa: ANN202
    """The graph saved at ``path``, memory-mapped read-only (ValueError when it is not one of ours)."""
    from usearch.index import Index

    graph = Index.restore(str(path), view=True)
    if graph is None or graph.ndim != dimensions:
        raise ValueError(f"{path.name} is not a {dimensions}-dimension graph")
    graph.expansion_search = EXPANSION_SEARCH  # not part of the file
    graph.saved_at = path  # the file it maps: linked, not rewritten, by the next snapshot
    graph.mapped = True
    return graph


def save_graph(graph: object, path: Path) -> None:
    """Write ``graph`` to ``path``; a graph already in a file (opened from, or saved to, a
    snapshot) is hard-linked from it instead (graphs never change once built)."""
    source = getattr(graph, "saved_at", None)
    if source is not None:
        try:
            os.link(source, path)
        except OSError:
            pass  # removed meanwhile, or another file system: write it
        else:
            return
    graph.save(str(path))  # type: ignore[attr-defined]



def _stop_builds() -> None:
    """At interpreter exit: let running builds finish their chunk and end."""
    _STOP.set()
    with _THREADS_LOCK:
        threads = list(_THREADS)
    for thread in threads:
        thread.join(timeout=30)


atexit.register(_stop_builds)


@dataclass
class _Partition:
    rows: int = 0  # rows of the caller in this partition
    graph: object | None = None  # usearch Index, immutable once installed (see the module docstring)
    dirty: set[int] = field(default_factory=set)  # rows put or dropped since the graph was built
    building: set[int] | None = None  # while a build runs: rows changed since it started
    _dirty_rows: np.ndarray | None = None  # ``dirty`` as an array, until it changes

    def touch(self, row: int) -> None:
        if self.graph is not None:
            self.dirty.add(row)
            self._dirty_rows = None
        if self.building is not None:
            self.building.add(row)

    def dirty_rows(self) -> np.ndarray:
        if self._dirty_rows is None:
            self._dirty_rows = np.fromiter(self.dirty, dtype=np.int64, count=len(self.dirty))
        return self._dirty_rows

    def install(self, graph: object, dirty: set[int]) -> None:
        self.graph, self.dirty, self._dirty_rows = graph, dirty, None


@dataclass
class AnnCapture:
    """What a snapshot keeps of the index: plain arrays, and the graphs to save as files."""

    arrays: dict[str, np.ndarray]
    graphs: dict[str, object]  # file name -> graph


class AnnIndex:
    """HNSW graphs over the caller's rows, one per partition (see the module docstring).

    ``lock`` is the caller's lock: every method is called with it held, and the background
    builder takes it to read vectors and to install a finished graph. ``vectors(rows)`` returns
    a copy of the given rows' float32 vectors (called with the lock held).
    """

    def __init__(self, dimensions: int, lock: threading.RLock,
                 vectors: Callable[[np.ndarray], np.ndarray], installed: Callable[[], None] | None = None) -> None:
        self.dimensions = dimensions
        self._lock = lock
        self._vectors = vectors
        self._installed = installed  # called (lock held) when a build installs a graph: worth saving
        self._keys: dict[PartitionKey, int] = {}
        self._parts: list[_Partition] = []
        self._part_of = np.full(0, -1, dtype=np.int32)  # row -> partition (-1: none)
        self._generation = 0  # bumped by reset(): a running build of an older generation gives up
        self._threads: list[threading.Thread] = []

    # ------------------------------------------------------------------ rows

    def _pid(self, key: PartitionKey) -> int:
        pid = self._keys.get(key)
        if pid is None:
            pid = self._keys[key] = len(self._parts)
            self._parts.append(_Partition())
        return pid

    def put(self, row: int, key: PartitionKey, *, moved: bool = True) -> None:
        """The row is now in partition ``key`` (``moved``: its vector or partition may have
        changed; False when only its expiry did, which the graph does not hold). Its vector is
        read through ``vectors`` when a graph is (re)built."""
        pid = self._pid(key)
        if row >= self._part_of.size:
            grown = np.full(max(row + 1, self._part_of.size * 3 // 2, 1024), -1, dtype=np.int32)
            grown[: self._part_of.size] = self._part_of
            self._part_of = grown
        if not moved and int(self._part_of[row]) == pid:
            return
        self.drop(row)
        self._part_of[row] = pid
        part = self._parts[pid]
        part.rows += 1
        part.touch(row)

    def assign(self, rows: np.ndarray, namespaces: np.ndarray, collections: np.ndarray, threaded: np.ndarray) -> None:
        """Start over with these rows in their partitions (the codes and flag of each row, indexed
        by row): the caller took its rows from elsewhere than ``put`` (a snapshot without graphs).
        Graphs are built on demand, as after puts."""
        self.reset()
        if rows.size == 0:
            return
        # one integer per (namespace, collection, kind): codes are small non-negative counters
        combined = (namespaces[rows].astype(np.int64) << 32) | (collections[rows].astype(np.int64) << 1) \
            | threaded[rows].astype(np.int64)
        keys, inverse, counts = np.unique(combined, return_inverse=True, return_counts=True)
        pids = np.empty(keys.size, dtype=np.int32)
        for index, key in enumerate(keys.tolist()):
            pid = pids[index] = self._pid((key >> 32, (key >> 1) & 0x7FFFFFFF, bool(key & 1)))
            self._parts[pid].rows = int(counts[index])
        self._part_of = np.full(max(int(rows.max()) + 1, 1024), -1, dtype=np.int32)
        self._part_of[rows] = pids[inverse.reshape(-1)]

    def drop(self, row: int) -> None:
        """The row is gone (or about to be put elsewhere)."""
        if row >= self._part_of.size or self._part_of[row] < 0:
            return
        part = self._parts[int(self._part_of[row])]
        self._part_of[row] = -1
        part.rows -= 1
        part.touch(row)

    def reset(self) -> None:
        """Forget every row and graph (the caller renumbers its rows)."""
        self._generation += 1
        self._keys.clear()
        self._parts.clear()
        self._part_of = np.full(0, -1, dtype=np.int32)

    # ------------------------------------------------------------------ search

    def partitions(self, namespace: int, collection: int | None, facts_only: bool) -> list[int]:
        """The partitions a search with these filters may return rows from."""
        return [
            pid for (ns, coll, threaded), pid in self._keys.items()
            if ns == namespace and (collection is None or coll == collection) and not (facts_only and threaded)
            and self._parts[pid].rows
        ]

    def shortlist(self, query: np.ndarray, pids: Iterable[int], allowed: np.ndarray, candidates: np.ndarray,
                  keep: int) -> np.ndarray | None:
        """Up to ``keep`` allowed rows per searched graph nearest the query, with the allowed dirty
        rows of those partitions and every allowed row of the small ones; None when a large
        partition has no graph yet (one is being built)."""
        pids = list(pids)
        missing = [pid for pid in pids if self._parts[pid].graph is None and self._parts[pid].rows >= GRAPH_MIN_ROWS]
        if missing:
            for pid in missing:
                self._start_build(pid)
            return None
        found: list[np.ndarray] = []
        small: list[int] = []
        for pid in pids:
            part = self._parts[pid]
            if part.graph is None:
                small.append(pid)
                continue
            found.append(self._graph_search(part.graph, pid, query, allowed, keep))
            dirty = part.dirty_rows()
            if dirty.size:
                found.append(self._allowed_in(dirty, pid, allowed))
            if len(part.dirty) > refresh_after(part.rows):
                self._start_build(pid)
        if small:  # scanned exactly: few rows by definition
            found.append(candidates[np.isin(self._part_of[candidates], small)])
        return _distinct(np.concatenate(found)) if found else np.zeros(0, dtype=np.int64)

    def _graph_search(self, graph: object, pid: int, query: np.ndarray, allowed: np.ndarray, keep: int) -> np.ndarray:
        count = keep
        while True:
            rows = np.asarray(graph.search(query, count=count, threads=1).keys, dtype=np.int64)  # type: ignore[attr-defined]
            live = self._allowed_in(rows, pid, allowed)  # dirty rows are added by the caller
            if live.size >= keep or rows.size < count:  # enough, or the graph has no more rows
                return live[:keep]
            count *= 4

    def _allowed_in(self, rows: np.ndarray, pid: int, allowed: np.ndarray) -> np.ndarray:
        """Those of ``rows`` the search allows that are (still) in partition ``pid``."""
        rows = rows[rows < min(allowed.size, self._part_of.size)]
        return rows[allowed[rows] & (self._part_of[rows] == pid)]

    # ------------------------------------------------------------------ building

    def _start_build(self, pid: int) -> None:
        part = self._parts[pid]
        if part.building is not None or _STOP.is_set():
            return
        part.building = set()
        thread = threading.Thread(target=self._build, args=(pid, self._generation), name=f"ann-build-{pid}",
                                  daemon=True)
        self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        with _THREADS_LOCK:
            _THREADS.add(thread)
        thread.start()

    def _build(self, pid: int, generation: int) -> None:
        try:
            while not _BUILDING.acquire(timeout=0.2):
                if _STOP.is_set():
                    return
            try:
                self._build_graph(pid, generation)
            finally:
                _BUILDING.release()
        except Exception:  # a failed build leaves the partition as it was; logged, retried later
            log.exception("building the vector graph of partition %d failed", pid)
        finally:
            with self._lock:
                if generation == self._generation and self._parts[pid].building is not None:
                    self._parts[pid].building = None  # given up: the next search starts another
            with _THREADS_LOCK:
                _THREADS.discard(threading.current_thread())

    def _build_graph(self, pid: int, generation: int) -> None:
        """Copy the partition's graph (or start an empty one), bring it up to date, install it."""
        with self._lock:
            if generation != self._generation:
                return
            base = self._parts[pid].graph
            todo = np.flatnonzero(self._part_of == pid) if base is None else self._parts[pid].dirty_rows().copy()
        graph = _new_graph(self.dimensions) if base is None else base.copy()  # type: ignore[attr-defined]
        graph.expansion_search = EXPANSION_SEARCH
        if base is not None and todo.size:  # their entries may be stale: removed, and added back if still here
            present = todo[np.asarray(graph.contains(todo), dtype=bool).reshape(-1)]
            if present.size:
                graph.remove(present)
        for start in range(0, todo.size, BUILD_CHUNK):
            with self._lock:
                if generation != self._generation or _STOP.is_set():
                    return
                chunk = todo[start:start + BUILD_CHUNK]
                chunk = chunk[self._part_of[chunk] == pid]  # rows gone since are in part.building
                vectors = self._vectors(chunk) if chunk.size else None
            if vectors is not None:
                graph.add(chunk, vectors, threads=1)  # outside the lock: searches go on meanwhile
        with self._lock:
            if generation != self._generation:
                return
            part = self._parts[pid]
            part.install(graph, part.building or set())  # what changed meanwhile stays dirty
            part.building = None
            if self._installed is not None:
                self._installed()

    def wait(self) -> None:
        """Block until the builds started so far have finished (tests, benchmarks)."""
        for thread in list(self._threads):
            thread.join()

    def dirty_rows(self) -> set[int]:
        """Rows changed since their partition's graph was built (applied at its next refresh)."""
        return set().union(*(part.dirty for part in self._parts))

    def graph(self, pid: int) -> object | None:
        """Partition ``pid``'s graph (None: not built)."""
        return self._parts[pid].graph

    def start_builds(self) -> None:
        """Start every partition's graph build now, not on its first search (benchmarks)."""
        for pid in range(len(self._parts)):
            self._start_build(pid)

    def graphs(self) -> int:
        """How many partitions have a graph."""
        return sum(part.graph is not None for part in self._parts)

    def dirty(self) -> int:
        """Rows re-scored beside the graphs, over all partitions."""
        return sum(len(part.dirty) for part in self._parts if part.graph is not None)

    # ------------------------------------------------------------------ persistence

    def capture(self) -> AnnCapture:
        """The row -> partition map, the keys, each graph's dirty rows, and the graphs themselves
        (immutable: a snapshot writer saves them outside the lock). Call with the lock held."""
        dirty = [np.stack([np.full(len(part.dirty), pid, dtype=np.int64), part.dirty_rows()], axis=1)
                 for pid, part in enumerate(self._parts) if part.graph is not None and part.dirty]
        arrays = {
            "version": np.array([_STATE_VERSION], dtype=np.int64),
            "part_of": self._part_of.copy(),
            "keys": np.array(list(self._keys), dtype=np.int64).reshape(-1, 3),
            "dirty": np.concatenate(dirty) if dirty else np.zeros((0, 2), dtype=np.int64),
        }
        graphs = {f"graph_{pid}.usearch": part.graph for pid, part in enumerate(self._parts) if part.graph is not None}
        return AnnCapture(arrays, graphs)

    def saved_in(self, graphs: dict[str, object], folder: Path) -> None:
        """The snapshot holding ``graphs`` (by file name) is in place at ``folder``: the next
        snapshot links them from there (``save_graph`` wrote them into the writer's unfinished
        directory), and a graph built in this process's memory is swapped for the saved file,
        mapped (the same graph: its memory becomes shared file pages)."""
        for name, graph in graphs.items():
            graph.saved_at = folder / name  # type: ignore[attr-defined]
        for name, graph in graphs.items():
            if getattr(graph, "mapped", False):
                continue
            try:
                view = _view_graph(folder / name, self.dimensions)
            except (ValueError, RuntimeError, OSError) as exc:  # removed by a newer snapshot: keep it
                log.debug("graph %s stays in memory: %s", name, exc)
                continue
            with self._lock:
                for part in self._parts:
                    if part.graph is graph:
                        part.graph = view

    @classmethod
    def opened(cls, arrays: dict[str, np.ndarray], files: dict[str, Path], dimensions: int, lock: threading.RLock,
               vectors: Callable[[np.ndarray], np.ndarray], installed: Callable[[], None] | None = None) -> AnnIndex:
        """The index ``capture()`` described, its graphs mapped from ``files`` (ValueError when
        the pieces do not fit together)."""
        if int(arrays["version"][0]) != _STATE_VERSION:
            raise ValueError("unknown ANN state version")
        index = cls(dimensions, lock, vectors, installed)
        for ns, coll, threaded in np.asarray(arrays["keys"], dtype=np.int64).reshape(-1, 3):
            index._pid((int(ns), int(coll), bool(threaded)))
        index._part_of = np.asarray(arrays["part_of"], dtype=np.int32).copy()
        counts = np.bincount(index._part_of[index._part_of >= 0], minlength=len(index._parts))
        if counts.size != len(index._parts):
            raise ValueError("ANN state refers to unknown partitions")
        dirty = np.asarray(arrays["dirty"], dtype=np.int64).reshape(-1, 2)
        for pid, part in enumerate(index._parts):
            part.rows = int(counts[pid])
            path = files.get(f"graph_{pid}.usearch")
            if path is not None:
                graph = _view_graph(path, dimensions)
                if len(graph) > index._part_of.size:
                    raise ValueError(f"ANN graph {pid} holds more rows than the index")
                part.install(graph, set(dirty[dirty[:, 0] == pid, 1].tolist()))
        if (dirty[:, 0] >= len(index._parts)).any() or (dirty[:, 1] >= index._part_of.size).any() or \
                any(part.dirty and part.graph is None for part in index._parts):
            raise ValueError("ANN state has dirty rows the index cannot hold")
        return index
