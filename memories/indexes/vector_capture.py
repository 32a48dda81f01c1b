"""How the embedded vector index (memories/indexes/embedded.py) copies its rows for a snapshot
without stopping searches, and maps the written snapshot's files in place of its own copies."""
from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np

from memories.indexes import hnsw, snapshots
from memories.indexes.feed import FeedReader
from memories.indexes.row_ids import id_order, rebase_ids
from memories.indexes.vector_rows import VectorRows


class VectorCapture:
    """The snapshot capture of the embedded index (a mixin: it reads the index's rows, graphs and
    feed position under the index's lock; ``_capturable``, ``_feed_position`` and
    ``_snapshot_params`` come from the index: memories/indexes/base.py)."""

    _lock: threading.RLock
    _rows: VectorRows
    _ann: hnsw.AnnIndex | None
    _feed: FeedReader

    def _capture(self) -> snapshots.Capture | None:
        """A copy of the rows and their feed position. The vectors and the sketch are copied a
        chunk per hold of the lock, so searches go on in between; rows written meanwhile are noted
        (``dirty``) and copied again at the end, under the hold that also takes the small arrays
        and the feed position, so they all agree. None when there is nothing consistent to take
        (not loaded, or the arrays were replaced meanwhile: grown, refitted, reloaded)."""
        rows = self._rows
        with self._lock:
            if not self._capturable() or rows.dirty is not None:  # not loaded, or a capture runs already
                return None
            big = rows.big()
            copies = {key: np.empty(array.shape, dtype=array.dtype) for key, array in big.items()}
            rows.dirty = set()
        try:
            if not rows.copy_chunked(self._lock, big, copies):
                return None
            with self._lock:
                if not rows.holds(big) or not self._capturable():
                    return None
                dirty = np.fromiter(rows.dirty, dtype=np.int64, count=len(rows.dirty))
                for key, array in big.items():
                    copies[key][dirty] = array[dirty]
                rows.since_capture = set()
                return self._captured(copies, big)
        finally:
            with self._lock:
                rows.dirty = None

    def _captured(self, copies: dict[str, np.ndarray], big: dict[str, np.ndarray]) -> snapshots.Capture:
        arrays, meta = self._rows.captured(copies)
        meta = {**self._snapshot_params(), **meta}
        files: dict[str, Callable[[Path], None]] = {}
        graphs: dict[str, object] = {}
        if self._ann is not None:  # the graphs never change: saved after the lock is released
            captured = self._ann.capture()
            arrays |= {f"ann_{key}": value for key, value in captured.arrays.items()}
            graphs = captured.graphs
            files = {name: functools.partial(hnsw.save_graph, graph) for name, graph in graphs.items()}
        arrays["ids"] = ids = self._rows.ids.capture()
        return snapshots.Capture(arrays, {}, meta, self._feed_position(), files=files,
                                 derived={"id_order": functools.partial(id_order, ids)},
                                 written=functools.partial(self._written, big, graphs, self._rows.ids.token))

    def _written(self, big: dict[str, np.ndarray], graphs: dict[str, object], ids_token: object, folder: Path) -> None:
        """A snapshot of this index is in place at ``folder``: its vectors (and sketch), ids and
        graphs replace the copies this process holds in its own memory (a process that loaded a
        million rows from the database drops ~2 GB of private memory for shared file pages; one
        that opened a snapshot drops the pages its writes copied)."""
        if self._ann is not None:
            self._ann.saved_in(graphs, folder)
        rebase_ids(self._lock, self._rows.ids, ids_token, folder)
        self._rows.map_written(self._lock, big, folder)

