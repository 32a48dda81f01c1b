"""The posting lists of the BM25 text index (search/bm25/text_index.py): per term, the rows holding
it and their term frequencies.

A load from the database builds every list in RAM (``array('i')`` rows, ``array('f')`` tfs). An
index opened from a snapshot keeps the snapshot's lists memory-mapped read-only (shared between
processes): a term's postings added since go to a separate list in RAM, never a copy of the
mapped one (a feed tail touching the common terms copied most of them, seconds and hundreds of
MB at a million rows). The two parts of a term are scored as two lists of the same term.
"""
from __future__ import annotations

from array import array

import numpy as np

from search.bm25.topk import tf_scale

# The dtypes a snapshot's posting tfs are read in (topk.tf_scale: what each stored value means).
# float16 is what snapshots before uint8 held: still read, rewritten at the next snapshot.
STORED_TFS = frozenset(np.dtype(t) for t in (np.float32, np.float16, np.uint8, np.uint16))
NARROW_CHUNK = 1 << 22  # postings checked and converted at a time (bounded temporaries at capture)
TAIL = "\x00+"  # the statistics key of a term's postings added in RAM beside its snapshot list (no term holds NUL)


class Postings:
    """Every term's postings: in RAM (``own``), and mapped from a snapshot (``open``)."""

    def __init__(self) -> None:
        self.ram: dict[str, tuple[array, array]] = {}  # in RAM: every term of a load from the DB
        # Opened from a snapshot: term -> its slice of the mapped posting arrays (until ram has it).
        self.mapped_terms: dict[str, int] = {}
        self.mapped_rows = np.zeros(0, dtype=np.int32)
        self.mapped_tfs = np.zeros(0, dtype=np.float32)
        self.mapped_offsets = np.zeros(1, dtype=np.int64)

    def open(self, terms: list[str], rows: np.ndarray, tfs: np.ndarray, offsets: np.ndarray) -> None:
        """Use a snapshot's mapped lists (checked by the caller)."""
        self.mapped_terms = dict(zip(terms, range(len(terms)), strict=True))
        self.mapped_rows, self.mapped_tfs, self.mapped_offsets = rows, tfs, offsets

    def own(self, term: str) -> tuple[array, array]:
        """The term's postings in RAM, where rows are appended: the whole list, or, for a term the
        snapshot has a list of, only the postings added since it was opened."""
        posting = self.ram.get(term)
        if posting is None:
            posting = self.ram[term] = (array("i"), array("f"))
        return posting

    def parts(self, term: str) -> list[tuple[str, np.ndarray, np.ndarray]]:
        """The term's posting lists as (statistics key, rows, stored tfs) views: the snapshot's list
        and the RAM one. A row is in one of them only (rows are appended, never re-numbered); the
        RAM list of a term the snapshot also has keeps its statistics under its own key. Index
        lock held; views end with the caller's hold (an in-RAM list cannot grow while a view lives)."""
        parts: list[tuple[str, np.ndarray, np.ndarray]] = []
        index = self.mapped_terms.get(term)
        if index is not None:
            start, stop = int(self.mapped_offsets[index]), int(self.mapped_offsets[index + 1])
            parts.append((term, self.mapped_rows[start:stop], self.mapped_tfs[start:stop]))
        posting = self.ram.get(term)
        if posting is not None and len(posting[0]):
            parts.append((term + TAIL if parts else term, np.frombuffer(posting[0], dtype=np.int32),
                          np.frombuffer(posting[1], dtype=np.float32)))
        return parts

    def whole(self, term: str) -> tuple[np.ndarray, np.ndarray] | None:
        """The term's whole posting list, its parts joined (a copy when it has two): for the
        brute-force references of tests and benchmarks, not for searches. Index lock held."""
        parts = self.parts(term)
        if not parts:
            return None
        if len(parts) == 1:
            return parts[0][1], as_float_tfs(parts[0][2])
        return np.concatenate([rows for _, rows, _ in parts]), np.concatenate([as_float_tfs(tfs) for _, _, tfs in parts])

    def long_terms(self, min_postings: int) -> list[str]:
        """Terms with at least ``min_postings`` postings, the longest first."""
        sizes = {term: len(posting[0]) for term, posting in self.ram.items()}
        offsets = self.mapped_offsets
        for term, index in self.mapped_terms.items():
            sizes[term] = sizes.get(term, 0) + int(offsets[index + 1] - offsets[index])
        return sorted((t for t, n in sizes.items() if n >= min_postings), key=lambda t: -sizes[t])

    def merged(self) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
        """Every term's posting list, one after another (its parts joined: a mapped list, then the
        postings added to it in RAM, so it stays sorted), with the offsets. Index lock held."""
        terms = list(dict.fromkeys([*self.mapped_terms, *self.ram]))
        rows: list[np.ndarray] = []
        tfs: list[np.ndarray] = []
        offsets = np.zeros(len(terms) + 1, dtype=np.int64)
        for position, term in enumerate(terms, start=1):
            parts = self.parts(term)
            rows.extend(part_rows for _, part_rows, _ in parts)
            tfs.extend(as_float_tfs(part_tfs) for _, _, part_tfs in parts)
            offsets[position] = offsets[position - 1] + sum(len(part_rows) for _, part_rows, _ in parts)
        if not rows:
            return terms, np.zeros(0, np.int32), np.zeros(0, np.float32), offsets
        merged = terms, np.concatenate(rows), np.concatenate(tfs), offsets
        rows.clear()  # drop the views of the RAM lists now (see parts)
        tfs.clear()
        return merged


def as_float_tfs(stored: np.ndarray) -> np.ndarray:
    """Stored tfs as float32 tfs (a copy when they are stored scaled or narrower)."""
    if stored.dtype == np.float32:
        return stored
    return stored.astype(np.float32) * np.float32(tf_scale(stored))


def narrowed(tfs: np.ndarray) -> np.ndarray:
    """The tfs to save: twice each as uint8 (or uint16) when every one is a multiple of 0.5 that
    fits (the default weights give multiples of 0.5), else as they are. A quarter (a half) of the
    mapped bytes a serving process reads, the same scores (topk.Bm25 scales exactly), and
    float32 arithmetic as fast as on float32 tfs: float16, saved before, made the FTS step of a
    million-row search ~1.5 ms slower (numpy converts float16 in software, ~2 ns a posting)."""
    for dtype in (np.uint8, np.uint16):
        narrow = np.empty(len(tfs), dtype=dtype)
        limit = np.iinfo(dtype).max
        for start in range(0, len(tfs), NARROW_CHUNK):
            doubled = tfs[start:start + NARROW_CHUNK] * np.float32(2)
            if doubled.size and (doubled.min() < 0 or doubled.max() > limit or np.any(doubled != np.rint(doubled))):
                break
            narrow[start:start + NARROW_CHUNK] = doubled
        else:
            return narrow
    return tfs
