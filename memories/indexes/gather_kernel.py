"""The row gather of memories/indexes/file_rows.py as one compiled loop of ``pread`` calls (numba,
imported only by file_rows, lazily, on a background thread).

Reading 800 scattered rows of a million-row snapshot matrix, one ``os.preadv`` call a row from
Python cost 7.5 ms (9 µs a row: the call, the slicing and the checks around it, on AMD EPYC family 25
model 17); the same system calls from this loop cost 0.9 ms. The loop runs without the GIL, so a
hybrid search's full-text side goes on beside it.

``pread`` is declared by its C symbol, so numba caches the compiled loop on disk (a ctypes function
would be a dynamic global, which it does not cache). The buffer is passed as an address (an unsigned
integer the size of a pointer) and the offset as a 64-bit integer: file_rows loads this module only
on a 64-bit POSIX platform, where ``off_t`` is 64 bits.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import types

_pread = types.ExternalFunction("pread", types.intp(types.intc, types.uintp, types.uintp, types.int64))


@numba.njit(cache=True, nogil=True, boundscheck=False)
def gather(fd, rows, positions, out, offset, size):  # noqa: ANN001, ANN201 - numba infers the types
    """Read row ``rows[i]`` (``size`` bytes at ``offset + rows[i] * size`` of file ``fd``) into
    ``out``'s ``i``-th row for each ``i`` of ``positions``; returns how many were read whole (a
    short read or an error stops the loop there: the caller reads the rest its own way)."""
    base = np.uintp(out.ctypes.data)
    for done in range(positions.size):
        i = positions[done]
        got = _pread(fd, base + np.uintp(i * size), np.uintp(size), np.int64(offset + rows[i] * size))
        if got != size:
            return done
    return positions.size
