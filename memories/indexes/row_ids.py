"""The memory id of each row of an in-process index, and the row of each id.

At a million rows, a list of the ids as Python strings cost ~90 MiB per index, and the id -> row
dict a write needs another ~55 MiB and a second or more to build (the first write of a new process,
or the replay of a feed tail). Here the ids a snapshot holds stay in it: an array of fixed-width
UTF-8 bytes in row order, and the rows in the order of their ids (binary search finds an id's
row in ~20 steps), both mapped read-only and shared by every process that opens the snapshot.
Only the rows written since live in two dicts. A free (or dead) row has no id. The ids are read
from the file with ``pread`` (memories.indexes.file_rows), not through the mapping: random lookups
through it left the whole file resident (the kernel maps a large folio per fault).
"""
from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from memories.indexes.file_rows import FileRows

if TYPE_CHECKING:
    from memories.indexes import snapshots

_MISSING = object()


def id_order(ids: np.ndarray) -> np.ndarray:
    """The rows of ``ids`` sorted by id (what ``RowIds`` searches): for a snapshot, computed
    outside the index's lock (~0.5 s at a million rows)."""
    return np.argsort(ids, kind="stable").astype(np.int32)


def as_id_array(ids: Iterable[str | None]) -> np.ndarray:
    """Ids (None or "": a free row) as fixed-width UTF-8 bytes."""
    return np.array([(memory_id or "").encode() for memory_id in ids], dtype=np.bytes_).reshape(-1)


class RowIds:
    """Row <-> memory id: a base (ids by row, and rows by id) from a snapshot, and the changes since
    (rows past the base in a list, as a load from the database appends them; earlier rows in a dict).

    Not thread-safe: the owning index's lock guards it, as it guards the rows."""

    def __init__(self, base: np.ndarray | None = None, order: np.ndarray | None = None,
                 reader: FileRows | None = None) -> None:
        self._take_base(np.zeros(0, dtype="S1") if base is None else base, order, reader)
        self._length = len(self._base)
        self._changed: dict[int, str | None] = {}  # rows of the base given another id (or freed) since
        self._extra: list[str | None] = []  # the ids of the rows past the base (shorter: free rows)
        self._rows_by_id: dict[str, int] = {}  # where the ids of the rows above are
        self._since: dict[int, str | None] | None = None  # rows changed since the last capture
        self._token: object | None = None

    def _take_base(self, base: np.ndarray, order: np.ndarray | None, reader: FileRows | None) -> None:
        self._base = base
        self._order = order  # None: sorted on the first lookup that needs it
        self._reader = reader if reader is not None and reader.array is base else None

    def __len__(self) -> int:
        return self._length

    def get(self, row: int) -> str | None:
        """The id at ``row``; None when the row is free."""
        size = len(self._base)
        if row >= size:
            index = row - size
            return self._extra[index] if index < len(self._extra) else None
        changed = self._changed.get(row, _MISSING)
        if changed is not _MISSING:
            return changed  # type: ignore[return-value]
        return self._stored(row).decode() or None

    def _stored(self, row: int) -> bytes:
        """The base's id at ``row`` as bytes (b"": none)."""
        if self._reader is None:
            return bytes(self._base[row])
        return self._reader.one(row).rstrip(b"\0")

    def _blocks(self) -> Iterator[tuple[int, np.ndarray]]:
        """The base a block at a time, read from its file when it has one: (start, ids)."""
        step = 1 << 16
        for start in range(0, len(self._base), step):
            stop = min(start + step, len(self._base))
            yield start, (self._base[start:stop] if self._reader is None else self._reader.block(start, stop))

    def row(self, memory_id: str) -> int | None:
        """The row holding ``memory_id``, or None."""
        row = self._rows_by_id.get(memory_id)
        if row is not None:
            return row
        if not len(self._base) or not memory_id:
            return None
        if self._order is None:
            self._order = id_order(self._base)
        key, order, stored = memory_id.encode(), self._order, self._stored
        at = bisect.bisect_left(order, key, key=lambda r: stored(int(r)))
        if at == len(order):
            return None
        found = int(order[at])
        # The base is older than the changes: a row changed since is in _rows_by_id if it still holds the id.
        return found if stored(found) == key and found not in self._changed else None

    def set(self, row: int, memory_id: str | None) -> None:
        """Give ``row`` to ``memory_id`` (None: free it); a row past the end appends it."""
        old = self.get(row)
        if old is not None and self._rows_by_id.get(old) == row:
            del self._rows_by_id[old]
        size = len(self._base)
        if row >= size:
            index = row - size
            if index >= len(self._extra):
                self._extra.extend([None] * (index + 1 - len(self._extra)))
            self._extra[index] = memory_id
        else:
            self._changed[row] = memory_id
        if memory_id is not None:
            self._rows_by_id[memory_id] = row
        if self._since is not None:
            self._since[row] = memory_id
        self._length = max(self._length, row + 1)

    def extend(self, count: int) -> None:
        """``count`` free rows more at the end."""
        self._length += count

    def free_rows(self) -> list[int]:
        """Rows without an id, the highest first."""
        size = len(self._base)
        free = np.ones(self._length, dtype=np.bool_)
        for start, ids in self._blocks():
            free[start:start + len(ids)] = ids == b""
        for row, memory_id in self._changed.items():
            free[row] = memory_id is None
        free[size:size + len(self._extra)] = [memory_id is None for memory_id in self._extra]
        return np.flatnonzero(free)[::-1].tolist()

    def capture(self) -> np.ndarray:
        """Every row's id (b"": free) for a snapshot; the changes from now on are kept apart, so
        ``rebase`` can move to the snapshot's own mapped ids once it is written."""
        size = len(self._base)
        extra = [(memory_id or "").encode() for memory_id in self._extra]
        changed = {row: (memory_id or "").encode() for row, memory_id in self._changed.items()}
        width = max([self._base.dtype.itemsize, 1, *map(len, extra), *map(len, changed.values())])
        ids = np.zeros(self._length, dtype=f"S{width}")
        for start, block in self._blocks():
            ids[start:start + len(block)] = block
        if extra:
            ids[size:size + len(extra)] = extra
        for row, encoded in changed.items():
            ids[row] = encoded
        self._since, self._token = {}, object()
        return ids

    @property
    def base(self) -> np.ndarray:
        """The ids by row this holds as its base (a snapshot's mapped array after an open or a rebase)."""
        return self._base

    @property
    def reads_file(self) -> bool:
        """Whether base ids are read from the snapshot's file (``pread``), not through the mapping."""
        return self._reader is not None

    def since_base(self) -> tuple[dict[int, str | None], list[str | None], dict[str, int]]:
        """What is held apart from the base (copies): rows of it given another id or freed, the ids
        of the rows past it, and where those ids are. All empty right after an open or a rebase."""
        return dict(self._changed), list(self._extra), dict(self._rows_by_id)

    @property
    def token(self) -> object | None:
        """Names the last capture (``rebase`` takes only its snapshot)."""
        return self._token

    def rebase(self, token: object, base: np.ndarray, order: np.ndarray, reader: FileRows | None = None) -> bool:
        """Take ``base`` and ``order`` (the last capture's ids, as written and mapped) as the base,
        keeping only the changes made since that capture. False if another capture came since."""
        if token is not self._token or self._since is None or len(base) > self._length or \
                len(order) != len(base):
            return False
        since, size = self._since, len(base)
        self._take_base(base, order, reader)
        self._since, self._token = None, None
        self._changed = {row: memory_id for row, memory_id in since.items() if row < size}
        self._extra = []
        self._rows_by_id = {}
        for row, memory_id in sorted(since.items()):
            if row >= size:
                self.set(row, memory_id)
            elif memory_id is not None:
                self._rows_by_id[memory_id] = row
        return True


@dataclass(frozen=True)
class OpenedIds:
    base: np.ndarray  # the ids by row (b"": a free row)
    order: np.ndarray | None  # the rows by id; None: sorted when first needed
    reader: FileRows | None = None  # reads the base from its file

    def row_ids(self) -> RowIds:
        return RowIds(self.base, self.order, self.reader)


def opened_ids(snapshot: snapshots.Capture, alive: np.ndarray | None = None) -> OpenedIds:
    """The ids of an opened snapshot: its mapped ``ids``/``id_order`` arrays, or the ``ids.txt``
    lines an earlier version wrote (read into memory, the rows ``alive`` marks dead left without
    an id; rewritten as arrays by the next snapshot)."""
    base = snapshot.arrays.get("ids")
    if base is not None and base.dtype.kind == "S" and base.ndim == 1:
        order = snapshot.arrays.get("id_order")
        fits = order is not None and order.shape == base.shape and order.dtype.kind in "iu"
        reader = FileRows.of(base, snapshot.folder / "ids.npy") if snapshot.folder is not None else None
        return OpenedIds(base, order if fits else None, reader)
    base = as_id_array(snapshot.texts.get("ids", []))
    if alive is not None and len(alive) == len(base):
        base[alive == 0] = b""
    return OpenedIds(base, None)


def rebase_ids(lock: threading.RLock, row_ids: RowIds, token: object, folder: Path) -> None:
    """After a snapshot with ``row_ids``' capture ``token`` was written to ``folder``: its ids,
    mapped, replace the ones this process holds (those of a load from the database: a million
    Python strings)."""
    try:
        base = np.asarray(np.load(folder / "ids.npy", mmap_mode="r", allow_pickle=False))
        order = np.asarray(np.load(folder / "id_order.npy", mmap_mode="r", allow_pickle=False))
    except (OSError, ValueError):
        return  # removed by a newer snapshot already: keep what is held
    reader = FileRows.of(base, folder / "ids.npy")
    with lock:
        row_ids.rebase(token, base, order, reader)
