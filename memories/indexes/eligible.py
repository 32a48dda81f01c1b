"""The rows a search may return, cached per kind of search until the index changes or a row expires.

Both in-process indexes (vectors, full-text) answer a search only from rows in the caller's
namespace (and collection), unexpired now. At a million rows that mask is a few passes over
every row, so each index keeps the masks of its recent kinds of search here: one is reused while
the index's version is unchanged and ``now`` is before the earliest expiry among its rows.
"""
from __future__ import annotations

import math
from array import array
from collections.abc import Callable, Hashable
from dataclasses import dataclass

import numpy as np

KINDS_KEPT = 64  # kinds of search (namespace, collection, ...) remembered; past it all are dropped


@dataclass
class Eligible:
    """The rows one kind of search may return, at one version of the index."""

    version: Hashable
    since: float
    until: float  # the earliest expiry among them: past it, one has expired
    mask: np.ndarray
    _rows: np.ndarray | None = None

    def set_row(self, row: int, inside: bool) -> None:
        """Put ``row`` in or out of the mask (and of its row numbers, computed again when asked)."""
        if bool(self.mask[row]) != inside:
            self.mask[row] = inside
            self._rows = None

    def rows(self) -> np.ndarray:
        if self._rows is None:
            self._rows = np.flatnonzero(self.mask)
        return self._rows


class EligibleRows:
    """An index's cache of :class:`Eligible` masks, by kind of search. Not locked: the index
    calls it under its own lock (or accepts that two racing searches compute the same mask)."""

    def __init__(self) -> None:
        self._found: dict[Hashable, Eligible] = {}

    def clear(self) -> None:
        self._found.clear()

    def cached(self, kind: Hashable) -> Eligible | None:
        """What is kept for ``kind`` now, current or not."""
        return self._found.get(kind)

    def set_expiry(self, live: np.ndarray | array, row: int, until: float) -> None:
        """Write ``row``'s new expiry into the index's ``live`` array and adjust the masks to it
        (``expiry_moved``): the row's namespace, collection and text are unchanged."""
        old = float(live[row])
        if old != until:
            live[row] = until
            self.expiry_moved(row, old, until)

    def expiry_moved(self, row: int, old: float, new: float) -> None:
        """Only ``row``'s expiry changed, from ``old`` to ``new`` (nothing a ``select()`` reads):
        each mask that holds the row stays right until the earlier of its end and ``new``; one
        that left it out because it had expired is dropped (the row may be live again); one that
        left it out by ``select()`` stays. Cheaper than a new version, which recomputes every mask."""
        for kind, found in list(self._found.items()):
            if row >= found.mask.size:  # computed before the row existed: never current again
                del self._found[kind]
            elif found.mask[row]:
                found.until = min(found.until, new)
            elif old <= found.since:
                del self._found[kind]

    def row_changed(self, row: int, before: Hashable, after: Hashable, size: int, until: float | None,
                    fits: Callable[[Hashable], bool]) -> None:
        """Only ``row`` changed from the index's version ``before`` to ``after`` (written, with
        expiry ``until``; or dropped: None), and the index now has ``size`` rows: each mask current
        at ``before`` learns the row (``fits(kind)``: whether the row's namespace, collection and
        kind are the search's; a row that has expired by the mask's time is left out) and is current
        at ``after``. One row instead of a pass over every row: at a million rows, a search after a
        write computed its mask again in about 4 ms. The others are dropped."""
        for kind, found in list(self._found.items()):
            if found.version != before or found.mask.size > size:
                del self._found[kind]
                continue
            if found.mask.size < size:  # a new row at the end
                grown = np.zeros(size, dtype=np.bool_)
                grown[: found.mask.size] = found.mask
                found.mask = grown
            inside = until is not None and until > found.since and fits(kind)
            found.set_row(row, inside)
            if inside:
                found.until = min(found.until, until)  # type: ignore[type-var]
            found.version = after

    def get(self, kind: Hashable, version: Hashable, now: float, live: np.ndarray,
            select: Callable[[], np.ndarray]) -> Eligible:
        """The rows of ``kind``: ``select()`` (a fresh boolean mask over the same rows as ``live``,
        the rows' expiry times) narrowed to the rows unexpired at ``now``; the cached mask when
        ``version`` is the one it was computed at and no row of it has expired since."""
        cached = self._found.get(kind)
        if cached is not None and cached.version == version and cached.since <= now < cached.until:
            return cached
        mask = select()
        mask &= live > now
        expiring = live[mask]
        until = float(expiring.min()) if expiring.size else math.inf
        if len(self._found) >= KINDS_KEPT:
            self._found.clear()
        found = self._found[kind] = Eligible(version, now, until, mask)
        return found
