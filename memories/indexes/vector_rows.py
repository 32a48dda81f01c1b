"""The rows of the embedded vector index (memories/indexes/embedded.py): each memory's float32
vector, its partition codes (namespace, collection, thread message or fact) and its expiry, in
numpy arrays that grow in steps; the sketch of the vectors once fitted (memories/indexes/sketch.py);
and, when the arrays are mapped from a snapshot, the readers that take their rows from the file
(memories/indexes/file_rows.py) so the pages a search touches do not stay in this process.

Nothing here is locked: the index calls it under its own lock (a capture's chunked copy takes
that lock itself, a chunk at a time).
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from threading import RLock

import numpy as np

from memories.indexes import sketch
from memories.indexes.feed import let_waiters_in
from memories.indexes.file_rows import FileRows
from memories.indexes.row_ids import OpenedIds, RowIds
from memories.indexes.sketch import Projection

BIG = ("matrix", "sketch")  # the arrays a capture copies a chunk at a time, and maps from its files afterwards
COLUMNS = ("matrix", "ns", "coll", "threaded", "live")  # one entry per row in a snapshot


class VectorRows:
    """Row storage: ``matrix`` (vectors), ``ns``/``coll`` (codes, -1 on a free row), ``threaded``,
    ``live`` (``live_until``), ``sketch`` (once ``projection`` is fitted), ``ids`` (row <-> memory id).
    Every row ever used is below ``top``; ``codes`` maps "n:<namespace>" / "c:<collection>" to codes."""

    grow_step = 1024  # rows added at least by one growth
    capture_chunk = 8192  # rows of the vectors (and sketch) copied per hold of the lock

    def __init__(self, dimensions: int, sketch_dims: int, unmapped: Callable[[], None]) -> None:
        self.dimensions, self.sketch_dims = dimensions, sketch_dims
        self._unmapped = unmapped  # told when growth left the snapshot's mapped files behind
        self.dirty: set[int] | None = None  # rows written while a snapshot capture copies the vectors
        self.since_capture: set[int] | None = None  # rows written since the last capture (see map_written)
        self.reset()

    def reset(self) -> None:
        self.ids = RowIds()  # row <-> memory id (a free row has none)
        self._free_rows: list[int] | None = []  # None: not built yet (see free)
        self.live_rows = 0
        self.matrix = np.zeros((0, self.dimensions), dtype=np.float32)
        self.ns = np.zeros(0, dtype=np.int32)
        self.coll = np.zeros(0, dtype=np.int32)
        self.threaded = np.zeros(0, dtype=np.bool_)
        self.live = np.zeros(0, dtype=np.float64)
        self.sketch = np.zeros((0, self.sketch_dims), dtype=np.float32)
        self.projection: Projection | None = None
        self.files: dict[str, FileRows] = {}  # "matrix"/"sketch" -> its rows read from the snapshot file
        self.codes: dict[str, int] = {}
        self.top = 0

    # --- reading rows ------------------------------------------------------------------------

    @property
    def free(self) -> list[int]:
        """Rows free for new vectors, the lowest last (built on the first write after a snapshot
        was opened: a search needs none of them)."""
        if self._free_rows is None:
            self._free_rows = self.ids.free_rows()
        return self._free_rows

    @property
    def free_listed(self) -> bool:
        """Whether the free rows were listed yet (not after a snapshot was opened, until a write)."""
        return self._free_rows is not None

    def code(self, key: str) -> int:
        return self.codes.setdefault(key, len(self.codes))

    def used(self) -> np.ndarray:
        """The rows holding a vector (a free row's namespace code is -1)."""
        return np.flatnonzero(self.ns[: self.top] >= 0)

    def vectors_of(self, rows: np.ndarray) -> np.ndarray:
        """A copy of these rows' vectors (the graph builder reads them a chunk at a time, and every
        exact re-score): read from the snapshot file when the matrix is mapped from one."""
        reader = self._file("matrix", self.matrix)
        return self.matrix[rows] if reader is None else reader.take(rows)

    def block(self, key: str, array: np.ndarray, start: int, stop: int) -> np.ndarray:
        """``array[start:stop]`` (``key``: "matrix" or "sketch"): read from the snapshot file like
        ``vectors_of``, or a view when the array is not mapped from one (the callers copy it)."""
        reader = self._file(key, array)
        return array[start:stop] if reader is None else reader.block(start, stop)

    def _file(self, key: str, array: np.ndarray) -> FileRows | None:
        """The file reader of ``array`` while it is still the mapped array of that name."""
        reader = self.files.get(key)
        return reader if reader is not None and reader.array is array else None

    # --- writing rows ------------------------------------------------------------------------

    def same_row(self, row: int, ns: int, coll: int, threaded: bool) -> bool:
        return bool(self.ns[row] == ns and self.coll[row] == coll and self.threaded[row] == threaded)

    def allocate(self, memory_id: str) -> int:
        """A free row for a new memory (growing the arrays when none is left)."""
        self.live_rows += 1
        if not self.free:
            self.grow()
        row = self.free.pop()
        self.top = max(self.top, row + 1)
        self.ids.set(row, memory_id)
        return row

    def write(self, row: int, vector: np.ndarray, ns: int, coll: int, threaded: bool, until: float) -> None:
        self.matrix[row] = vector
        self._wrote("matrix", self.matrix, row)
        if self.dirty is not None:
            self.dirty.add(row)
        if self.since_capture is not None:
            self.since_capture.add(row)
        if self.projection is not None:
            self.sketch[row] = self.projection.apply(vector)
            self._wrote("sketch", self.sketch, row)
        self.ns[row], self.coll[row], self.threaded[row], self.live[row] = ns, coll, threaded, until

    def release(self, memory_id: str) -> int | None:
        """Free the memory's row (masked by ns = -1), or None when it holds none."""
        row = self.ids.row(memory_id)
        if row is not None:
            self.live_rows -= 1
            self.ids.set(row, None)
            self.ns[row] = -1
            self.free.append(row)
        return row

    def _wrote(self, key: str, array: np.ndarray, rows: int | np.ndarray) -> None:
        """Rows of a mapped array were written through the mapping: only it holds them now."""
        reader = self._file(key, array)
        if reader is not None:
            reader.mark(rows)

    def grow(self, at_least: int = 0) -> None:
        """Room for more rows: half as many as held, at least ``at_least`` (default ``grow_step``)."""
        extra = max(at_least or self.grow_step, len(self.ids) // 2)
        self.matrix = np.vstack([self.matrix, np.zeros((extra, self.dimensions), dtype=np.float32)])
        self.ns = np.concatenate([self.ns, np.full(extra, -1, dtype=np.int32)])
        self.coll = np.concatenate([self.coll, np.full(extra, -1, dtype=np.int32)])
        self.threaded = np.concatenate([self.threaded, np.zeros(extra, dtype=np.bool_)])
        self.live = np.concatenate([self.live, np.zeros(extra, dtype=np.float64)])
        if self.projection is not None:
            self.sketch = np.vstack([self.sketch, np.zeros((extra, self.sketch_dims), dtype=np.float32)])
        free, start = self.free, len(self.ids)  # built (if it was not) before the new rows exist
        self.ids.extend(extra)
        free.extend(range(len(self.ids) - 1, start - 1, -1))
        if self.files:  # the arrays were mapped from a snapshot and are private copies now
            self.files.clear()  # the readers held the old mappings (every page the copy read)
            self._unmapped()

    def reserve(self, count: int) -> None:
        """Grow once to the needed size (+10 %) instead of doubling step by step."""
        missing = count - len(self.free)
        if missing > 0:
            self.grow(int(missing * 1.1) + 1)

    def fit_sketch(self) -> bool:
        """Fit the sketch's projection (again once the index has doubled); False when not worth it."""
        if self.sketch_dims < sketch.SKETCH_MIN_DIMS:
            return False
        live = self.live_rows
        if self.projection is not None and live < 2 * self.projection.fitted_rows:
            return True
        used = self.used()
        if used.size < sketch.SKETCH_MIN_ROWS:
            return self.projection is not None
        sample = np.random.default_rng(0).choice(used, size=min(sketch.SKETCH_SAMPLE, used.size), replace=False)
        projection = sketch.fit_projection(self.vectors_of(np.sort(sample)), self.sketch_dims, fitted_rows=live)
        sketched = np.zeros((len(self.ids), self.sketch_dims), dtype=np.float32)
        for start in range(0, self.top, 16_384):  # in chunks: no full-size temporary
            stop = min(start + 16_384, self.top)
            sketched[start:stop] = projection.apply(self.block("matrix", self.matrix, start, stop))
        self.projection, self.sketch = projection, sketched
        return True

    def largest_partition(self) -> int:
        """Rows of the largest namespace."""
        used = self.ns[: self.top]
        return int(np.bincount(used[used >= 0]).max(initial=0))

    # --- snapshots ---------------------------------------------------------------------------

    def fits(self, arrays: dict[str, np.ndarray], rows: int) -> bool:
        """Whether a snapshot's row arrays agree in length (with its ids) and dimensions."""
        return all(arrays.get(key) is not None and len(arrays[key]) == rows for key in COLUMNS) and \
            arrays["matrix"].shape[1:] == (self.dimensions,)

    def open(self, arrays: dict[str, np.ndarray], ids: OpenedIds, meta: dict[str, object], folder: Path | None) -> None:
        """Take a snapshot's rows (checked by ``fits``), the vectors (and sketch) read from its files."""
        self.matrix, self.ns, self.coll, self.threaded, self.live = (arrays[key] for key in COLUMNS)
        self.ids = ids.row_ids()
        self._free_rows = None  # built on the first write: a search needs none
        self.live_rows = int(np.count_nonzero(self.ns >= 0))  # a free row's is -1 (its id is not read)
        self.codes = {str(key): int(code) for key, code in meta["codes"].items()}  # type: ignore[attr-defined]
        self.top = int(meta["top"])  # type: ignore[call-overload]
        if {"sketch", "mean", "basis"} <= arrays.keys() and len(arrays["sketch"]) == len(ids.base):
            self.projection = Projection(arrays["mean"], arrays["basis"], int(meta.get("fitted_rows", 0)))  # type: ignore[call-overload]
            self.sketch = arrays["sketch"]
        if folder is not None:
            self._map_files(folder, {"matrix": self.matrix, "sketch": self.sketch})

    def big(self) -> dict[str, np.ndarray]:
        """The arrays a capture copies a chunk at a time."""
        return {"matrix": self.matrix, **({"sketch": self.sketch} if self.projection is not None else {})}

    def holds(self, big: dict[str, np.ndarray]) -> bool:
        """Whether these are still the arrays held (not replaced: grown, refitted, reloaded)."""
        return self.matrix is big["matrix"] and (self.sketch is big["sketch"] if "sketch" in big else self.projection is None)

    def copy_chunked(self, lock: RLock, big: dict[str, np.ndarray], copies: dict[str, np.ndarray]) -> bool:
        """Copy ``big`` into ``copies`` a chunk per hold of ``lock``, so searches go on in between;
        False when the arrays were replaced meanwhile."""
        for start in range(0, len(big["matrix"]), self.capture_chunk):
            with lock:
                if not self.holds(big):
                    return False
                for key, array in big.items():
                    copies[key][start:start + self.capture_chunk] = self.block(key, array, start, start + self.capture_chunk)
            let_waiters_in()
        return True

    def captured(self, copies: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, object]]:
        """The snapshot's arrays (the big ones from ``copies``, the small ones copied now) and meta."""
        arrays = {"matrix": copies["matrix"], "ns": self.ns.copy(), "coll": self.coll.copy(),
                  "threaded": self.threaded.copy(), "live": self.live.copy()}
        meta: dict[str, object] = {"codes": dict(self.codes), "top": self.top}
        if self.projection is not None:
            arrays |= {"sketch": copies["sketch"], "mean": self.projection.mean, "basis": self.projection.basis}
            meta["fitted_rows"] = self.projection.fitted_rows
        return arrays, meta

    def map_written(self, lock: RLock, big: dict[str, np.ndarray], folder: Path) -> None:
        """A snapshot of these rows is in place at ``folder``: its vectors (and sketch) replace the
        copies this process holds in its own memory, mapped copy-on-write like an opened snapshot's.
        Rows written since the capture are copied over. Skipped when the arrays were replaced."""
        mapped: dict[str, np.ndarray] = {}
        for key in big:
            try:
                mapped[key] = np.asarray(np.load(folder / f"{key}.npy", mmap_mode="c", allow_pickle=False))
            except (OSError, ValueError):
                return  # removed by a newer snapshot already: keep the copies
        with lock:
            if not self.holds(big) or self.since_capture is None or \
                    any(mapped[key].shape != array.shape for key, array in big.items()):
                return
            rows = np.fromiter(self.since_capture, dtype=np.int64, count=len(self.since_capture))
            for key, array in big.items():
                mapped[key][rows] = array[rows]
            self.matrix = mapped["matrix"]
            if "sketch" in mapped:
                self.sketch = mapped["sketch"]
            self._map_files(folder, mapped)
            for key, array in mapped.items():
                self._wrote(key, array, rows)
            self.since_capture = None

    def _map_files(self, folder: Path, arrays: dict[str, np.ndarray]) -> None:
        """Read these arrays' rows, just mapped from ``<folder>/<key>.npy``, from their files from now on."""
        for key, array in arrays.items():
            reader = FileRows.of(array, folder / f"{key}.npy")
            if reader is None:
                self.files.pop(key, None)
            else:
                self.files[key] = reader

    @property
    def mapped(self) -> frozenset[str]:
        """The arrays read from the snapshot's files ("matrix", "sketch")."""
        return frozenset(self.files)
