"""Reading rows of a snapshot's array without mapping them into the process.

An index opened from a snapshot maps its float32 vectors copy-on-write (memories.indexes.snapshots):
processes share the pages and a write copies only its own page. But every page a search reads
through the mapping stays mapped, and counts in the process's resident memory: the exact
re-score of a few hundred random rows a search touches a few hundred pages (each fault maps its
neighbours too), so a serving process ends up with the whole 1.5 GB matrix of a million rows
resident. ``FileRows`` reads those rows with ``preadv`` (or ``pread``) from the file instead (the page cache
still serves them, and still shares them between processes, but nothing is mapped), except the
rows this process wrote into its copy-on-write mapping since it opened it, which only the
mapping holds. A bulk copy (a snapshot capture) reads contiguous blocks the same way.

A gather of 800 rows costs ~1 µs a row this way once the compiled loop of
memories/indexes/gather_kernel.py is loaded (numba, on a background thread, for arrays of
``COMPILED_MIN_ROWS`` rows or more), against ~9 µs a row from Python and ~0.5 µs through the
mapping (measured on 2-core hosts; docs/performance.md has the resident memory it saves).
"""
from __future__ import annotations

import importlib
import os
import sys
import weakref
from pathlib import Path
from types import ModuleType

import numpy as np
from numpy.lib import format as npy_format

from bhgbrain_site.core.background_load import BackgroundLoad

# Above this many rows a gather reads through the mapping: one system call per row costs ~1-3 µs,
# the mapping ~0.5 µs, and a gather this large (a small namespace's every row in a large store)
# is a scan anyway, whose pages a later scan would map again.
PREAD_MAX_ROWS = 4_096
# A reader of an array this large loads the compiled gather (numba's import costs ~0.5 s of a
# background thread, once a process): below it a search gathers few enough rows from few enough
# pages that the Python loop costs little, and a small store's process never imports numba.
COMPILED_MIN_ROWS = 100_000
DISABLE_ENV = "BHGBRAIN_COMPILED_GATHER"  # "0": always the Python loop

LOADER = BackgroundLoad("compiled row gather", "bhgbrain-gather-compile")  # the process's one load of it


def _compiled_allowed() -> bool:
    """A 64-bit POSIX platform (the kernel's ``pread`` takes a 64-bit offset) and not disabled."""
    enabled = os.environ.get(DISABLE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")
    return enabled and os.name == "posix" and sys.maxsize > 2**32


def prepare_compiled() -> None:
    """Start loading the compiled gather on a background thread (once a process)."""
    if _compiled_allowed():
        LOADER.start(_load_kernel)  # once: a loader that is not idle ignores it


def _load_kernel() -> ModuleType:
    kernel = importlib.import_module("memories.indexes.gather_kernel")
    probe = np.zeros((1, 1), dtype=np.float32)
    kernel.gather(-1, np.zeros(1, dtype=np.int64), np.zeros(1, dtype=np.int64), probe, 0, 4)  # compiles (or loads) it
    return kernel


def compiled_gather(wait: float | None = 0.0) -> ModuleType | None:
    """The compiled gather once loaded (and not turned off since), else None; ``wait`` seconds for
    a load under way (None: until it ends; benchmarks and tests)."""
    if not _compiled_allowed():
        return None
    return LOADER.ready() if wait == 0.0 else LOADER.wait(wait)


class FileRows:
    """The rows of ``array``, a 1-D or 2-D array mapped from the ``.npy`` file at ``path``,
    read from that file unless ``mark``-ed as written through the mapping since."""

    def __init__(self, array: np.ndarray, path: Path) -> None:
        if array.ndim not in (1, 2) or not array.flags.c_contiguous:
            raise ValueError("FileRows reads 1-D or 2-D C-ordered arrays")
        self.array = array
        self.path = path
        self._fd = os.open(path, os.O_RDONLY)  # keeps the file even once a newer snapshot removes it
        weakref.finalize(self, os.close, self._fd)
        self._offset = _data_offset(self._fd, array)
        self._row_bytes = int(np.prod(array.shape[1:], dtype=np.int64)) * array.itemsize
        self._written = np.zeros(array.shape[0], dtype=np.bool_)
        if array.shape[0] >= COMPILED_MIN_ROWS:
            prepare_compiled()

    @classmethod
    def of(cls, array: np.ndarray, path: Path) -> FileRows | None:
        """A reader for ``array`` mapped from ``path``, or None when it cannot be read this way."""
        try:
            return cls(array, path)
        except (OSError, ValueError):
            return None

    def mark(self, rows: int | np.ndarray) -> None:
        """These rows were written through the mapping: read them from it from now on."""
        self._written[rows] = True

    def take(self, rows: np.ndarray) -> np.ndarray:
        """A copy of ``array[rows]`` (rows: a 1-D integer array)."""
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        if rows.size > PREAD_MAX_ROWS:
            return np.asarray(self.array[rows])
        out = np.empty((rows.size, *self.array.shape[1:]), dtype=self.array.dtype)
        if not out.size:
            return out
        written = self._written[rows]
        if written.any():
            out[written] = self.array[rows[written]]
        positions = np.flatnonzero(~written)
        size, offset = self._row_bytes, self._offset
        kernel = compiled_gather()
        if kernel is not None and out.ndim == 2 and out.dtype == np.float32:  # the signature compiled at load
            done = kernel.gather(self._fd, rows, positions, out, offset, size)
            positions = positions[done:]  # a short read or an error: the loop below reads (or raises)
        view = memoryview(out).cast("B")
        for i in positions.tolist():
            self._read(view[i * size:(i + 1) * size], offset + int(rows[i]) * size)
        return out

    def one(self, row: int) -> bytes:
        """The raw bytes of ``array[row]`` (one ``pread``)."""
        if self._written[row]:
            return self.array[row].tobytes()
        return os.pread(self._fd, self._row_bytes, self._offset + row * self._row_bytes)

    def block(self, start: int, stop: int) -> np.ndarray:
        """A copy of ``array[start:stop]``, read in one call."""
        stop = min(stop, self.array.shape[0])
        out = np.empty((max(stop - start, 0), *self.array.shape[1:]), dtype=self.array.dtype)
        if out.size:
            self._read(memoryview(out).cast("B"), self._offset + start * self._row_bytes)
            written = np.flatnonzero(self._written[start:stop])
            if written.size:
                out[written] = self.array[start + written]
        return out

    def _read(self, into: memoryview, offset: int) -> None:
        done = 0
        while done < len(into):
            got = _pread_into(self._fd, into[done:], offset + done)
            if got <= 0:
                raise OSError(f"{self.path}: short read at byte {offset + done}")
            done += got


def _pread_into(fd: int, into: memoryview, offset: int) -> int:
    """Read into ``into`` from ``offset`` without moving the file position: ``preadv`` straight
    into the buffer where the platform has it, else ``pread`` and a copy."""
    if hasattr(os, "preadv"):
        return os.preadv(fd, [into], offset)
    data = os.pread(fd, len(into), offset)
    into[:len(data)] = data
    return len(data)


def _data_offset(fd: int, array: np.ndarray) -> int:
    """Where the rows start in the ``.npy`` file open at ``fd``, which must hold exactly ``array``'s
    shape and dtype, in C order, up to its end."""
    with os.fdopen(os.dup(fd), "rb") as handle:
        version = npy_format.read_magic(handle)
        if version == (1, 0):
            shape, fortran, dtype = npy_format.read_array_header_1_0(handle)
        elif version == (2, 0):
            shape, fortran, dtype = npy_format.read_array_header_2_0(handle)
        else:
            raise ValueError(f"npy format {version} not read here")
        offset = handle.tell()
        size = os.fstat(fd).st_size
    if tuple(shape) != array.shape or dtype != array.dtype or fortran or size != offset + array.nbytes:
        raise ValueError("the file does not hold this array")
    return offset
