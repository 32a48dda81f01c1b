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
A graph is built in a background thread (searches meanwhile take the caller's other path),
reading the vectors a chunk at a time under the caller's lock and replaying the rows that
changed while it was being built. Afterwards rows are added and
removed one at a time, as the caller's ``put``/``drop`` happen. A graph that has lost as many rows
as it holds is rebuilt the same way.

Why a graph and not an IVF (k-means lists) in numpy: on the benchmark's vectors the exact top 10
is scattered over so many lists that an IVF has to scan about 70 % of the rows to find it in 98 %
of queries (docs/performance.md, "Approximate vector search").

``state()`` and ``from_state()`` carry everything (the graphs serialised as uint8 arrays, the
row-to-partition map), so a persisted snapshot spares a new process the build.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass

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
BUILD_CHUNK = 8_192  # rows copied under the lock per step of a build
_STATE_VERSION = 1
_BUILDING = threading.Lock()  # one build at a time in a process: it takes one core, serving keeps the other

PartitionKey = tuple[int, int, bool]  # (namespace code, collection code, thread message)


def available() -> bool:
    """Whether usearch is installed (without it every search takes the exact or sketch path)."""
    try:
        import usearch.index  # noqa: F401
    except ImportError:
        return False
    return True


def _new_graph(dimensions: int):  # noqa: ANN202 - usearch.index.Index, imported lazily
    from usearch.index import Index

    return Index(ndim=dimensions, metric="cos", dtype="i8", connectivity=CONNECTIVITY,
                 expansion_add=EXPANSION_ADD, expansion_search=EXPANSION_SEARCH)


@dataclass
class _Partition:
    rows: int = 0  # rows of the caller in this partition
    graph: object | None = None  # usearch Index over exactly those rows, once built
    removed: int = 0  # rows removed from the graph since it was built
    building: set[int] | None = None  # while a build runs: rows changed since it started


class AnnIndex:
    """HNSW graphs over the caller's rows, one per partition (see the module docstring).

    ``lock`` is the caller's lock: every method is called with it held, and the background
    builder takes it to read vectors and to install a finished graph. ``vectors(rows)`` returns
    a copy of the given rows' float32 vectors (called with the lock held).
    """

    def __init__(self, dimensions: int, lock: threading.RLock,
                 vectors: Callable[[np.ndarray], np.ndarray]) -> None:
        self.dimensions = dimensions
        self._lock = lock
        self._vectors = vectors
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

    def put(self, row: int, vector: np.ndarray, key: PartitionKey, *, moved: bool = True) -> None:
        """The row now holds ``vector`` in partition ``key`` (``moved``: its vector or partition
        may have changed; False when only its expiry did, which the graph does not hold)."""
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
        if part.building is not None:
            part.building.add(row)
        if part.graph is not None:
            part.graph.add(row, np.asarray(vector, dtype=np.float32))

    def assign(self, rows: np.ndarray, namespaces: np.ndarray, collections: np.ndarray, threaded: np.ndarray) -> None:
        """Start over with these rows in their partitions (the codes and flag of each row, indexed
        by row): the caller took its rows from elsewhere than ``put`` (a snapshot it opened).
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
        if part.building is not None:
            part.building.add(row)
        if part.graph is not None:
            part.graph.remove(row)
            part.removed += 1
            if part.removed > max(part.rows, GRAPH_MIN_ROWS):  # the graph is mostly holes: rebuild it
                part.graph, part.removed = None, 0

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
        """Up to ``keep`` allowed rows per searched graph nearest the query, plus every allowed row
        of the small partitions; None when a large partition has no graph yet (one is being built)."""
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
            if part.graph is not None:
                found.append(self._graph_search(part.graph, query, allowed, keep))
            else:
                small.append(pid)
        if small:  # scanned exactly: few rows by definition
            found.append(candidates[np.isin(self._part_of[candidates], small)])
        return np.concatenate(found) if found else np.zeros(0, dtype=np.int64)

    def _graph_search(self, graph: object, query: np.ndarray, allowed: np.ndarray, keep: int) -> np.ndarray:
        count = keep
        while True:
            rows = np.asarray(graph.search(query, count=count, threads=1).keys, dtype=np.int64)  # type: ignore[attr-defined]
            live = rows[allowed[rows]]
            if live.size >= keep or rows.size < count:  # enough, or the graph has no more rows
                return live[:keep]
            count *= 4

    # ------------------------------------------------------------------ building

    def _start_build(self, pid: int) -> None:
        part = self._parts[pid]
        if part.building is not None:
            return
        part.building = set()
        thread = threading.Thread(target=self._build, args=(pid, self._generation), name=f"ann-build-{pid}",
                                  daemon=True)
        self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def _build(self, pid: int, generation: int) -> None:
        try:
            with _BUILDING:
                self._build_graph(pid, generation)
        except Exception:  # a failed build leaves the partition on the exact path; logged, retried later
            log.exception("building the vector graph of partition %d failed", pid)
            with self._lock:
                if generation == self._generation:
                    self._parts[pid].building = None

    def _build_graph(self, pid: int, generation: int) -> None:
        with self._lock:
            rows = np.flatnonzero(self._part_of == pid)
        graph = _new_graph(self.dimensions)
        for start in range(0, rows.size, BUILD_CHUNK):
            with self._lock:
                if generation != self._generation:
                    return
                chunk = rows[start:start + BUILD_CHUNK]
                chunk = chunk[self._part_of[chunk] == pid]  # rows gone since are in part.building
                vectors = self._vectors(chunk)
            graph.add(chunk, vectors, threads=1)  # outside the lock: searches go on meanwhile
        with self._lock:
            if generation != self._generation:
                return
            part = self._parts[pid]
            self._replay(graph, pid, part.building or set())
            part.graph, part.building, part.removed = graph, None, 0

    def _replay(self, graph: object, pid: int, changed: set[int]) -> None:
        """Bring a graph built from a moving index up to date with the rows changed meanwhile."""
        rows = np.fromiter(changed, dtype=np.int64, count=len(changed))
        present = rows[np.asarray(graph.contains(rows), dtype=bool).reshape(-1)] if rows.size else rows  # type: ignore[attr-defined]
        if present.size:
            graph.remove(present)  # type: ignore[attr-defined]
        current = rows[self._part_of[rows] == pid] if rows.size else rows
        if current.size:
            graph.add(current, self._vectors(current), threads=1)  # type: ignore[attr-defined]

    def wait(self) -> None:
        """Block until the builds started so far have finished (tests, benchmarks)."""
        for thread in list(self._threads):
            thread.join()

    def graphs(self) -> int:
        """How many partitions have a graph."""
        return sum(part.graph is not None for part in self._parts)

    # ------------------------------------------------------------------ persistence

    def state(self) -> dict[str, np.ndarray]:
        """Everything as plain arrays: the row -> partition map, the keys, and each graph serialised."""
        state: dict[str, np.ndarray] = {
            "version": np.array([_STATE_VERSION], dtype=np.int64),
            "part_of": self._part_of.copy(),
            "keys": np.array([[ns, coll, int(threaded)] for ns, coll, threaded in self._keys], dtype=np.int64).reshape(-1, 3),
        }
        for (ns, coll, threaded), pid in self._keys.items():
            graph = self._parts[pid].graph
            if graph is not None:
                state[f"graph_{pid}"] = np.frombuffer(graph.save(), dtype=np.uint8)  # type: ignore[attr-defined]
            assert self._keys[(ns, coll, threaded)] == pid
        return state

    @classmethod
    def from_state(cls, state: dict[str, np.ndarray], dimensions: int, lock: threading.RLock,
                   vectors: Callable[[np.ndarray], np.ndarray]) -> AnnIndex:
        """The index ``state()`` described (ValueError when it does not fit together)."""
        if int(state["version"][0]) != _STATE_VERSION:
            raise ValueError("unknown ANN state version")
        index = cls(dimensions, lock, vectors)
        for ns, coll, threaded in np.asarray(state["keys"], dtype=np.int64).reshape(-1, 3):
            index._pid((int(ns), int(coll), bool(threaded)))
        index._part_of = np.asarray(state["part_of"], dtype=np.int32).copy()
        counts = np.bincount(index._part_of[index._part_of >= 0], minlength=len(index._parts))
        if counts.size != len(index._parts):
            raise ValueError("ANN state refers to unknown partitions")
        for pid, part in enumerate(index._parts):
            part.rows = int(counts[pid])
            blob = state.get(f"graph_{pid}")
            if blob is not None:
                graph = _new_graph(dimensions)
                graph.load(bytes(np.asarray(blob, dtype=np.uint8)))
                if len(graph) != part.rows:
                    raise ValueError(f"ANN graph {pid} holds {len(graph)} rows, not {part.rows}")
                part.graph = graph
        return index
