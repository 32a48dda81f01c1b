"""What the BM25 text index (search/bm25/text_index.py) keeps per term between searches, so a
query does not pass over a long posting list again: its largest tf and shortest row (the term's
score bound), its largest impact (search/bm25/topk.py), and its documents per namespace.

Each is brought up to date from the postings appended and the rows masked since it was
computed: lists only grow, and a row dies once. Index lock held for every call.
"""
from __future__ import annotations

import math
from array import array

import numpy as np

from search.bm25.topk import Bm25, tf_scale

# A list this long keeps its largest impact (search/bm25/topk.py: a tight bound prunes earlier),
# computed at this much above the current average row length, so it holds while that grows.
IMPACT_MIN_POSTINGS = 4096
IMPACT_AVGDL_HEADROOM = 1.05


class TermStatistics:
    """Per-term caches, keyed by a posting list's statistics key (search/bm25/postings.py)."""

    def __init__(self, k1: float, b: float) -> None:
        self.k1, self.b = k1, b
        self.bounds: dict[str, tuple[int, float, float]] = {}  # term -> (postings seen, max tf, min dl)
        self.impacts: dict[str, tuple[int, float, float]] = {}  # term -> (postings seen, avgdl, largest impact)
        self.df: dict[tuple[int, str], tuple[int, int, int]] = {}  # (ns, term) -> (df, postings seen, deaths seen)

    def doc_frequency(self, ns_code: int, term: str, rows: np.ndarray, ns_codes: array, alive: array,
                      deaths: array) -> int:
        """Live rows of the namespace holding the term: counted once, then brought up to date
        with the postings appended and the rows masked (``deaths``, in order) since."""
        cached = self.df.get((ns_code, term))
        df, seen, deaths_seen = cached if cached is not None else (0, 0, 0)
        if cached is not None and seen == rows.size and deaths_seen == len(deaths):
            return df
        ns = np.frombuffer(ns_codes, dtype=np.int32)
        new = rows[seen:]
        df += int(np.count_nonzero((ns[new] == ns_code) & (np.frombuffer(alive, dtype=np.int8)[new] != 0)))
        if seen and deaths_seen < len(deaths):
            died = np.frombuffer(deaths, dtype=np.int32)[deaths_seen:]
            died = died[ns[died] == ns_code]
            old = rows[:seen]
            at = np.minimum(np.searchsorted(old, died), old.size - 1)
            df -= int(np.count_nonzero(old[at] == died))
        self.df[(ns_code, term)] = (df, rows.size, len(deaths))
        return df

    def bound(self, term: str, rows: np.ndarray, tfs: np.ndarray, lengths: array) -> tuple[float, float]:
        """The list's largest tf and shortest row (for the term's score bound), kept as it grows."""
        seen, max_tf, min_dl = self.bounds.get(term, (0, 0.0, math.inf))
        if seen < rows.size:
            dl = np.frombuffer(lengths, dtype=np.float32)
            max_tf = max(max_tf, float(tfs[seen:].max()) * tf_scale(tfs))
            min_dl = min(min_dl, float(dl[rows[seen:]].min()))
            self.bounds[term] = (rows.size, max_tf, min_dl)
        return max_tf, min_dl

    def impact(self, term: str, rows: np.ndarray, tfs: np.ndarray, avgdl: float,
               lengths: array) -> tuple[float, float] | None:
        """The term's largest impact over its postings at an avgdl a little above ``avgdl``:
        kept as the list grows, recomputed when avgdl passes it. Short lists go without (their
        loose bound costs little)."""
        if rows.size < IMPACT_MIN_POSTINGS:
            return None
        cached = self.impacts.get(term)
        dl = np.frombuffer(lengths, dtype=np.float32)
        if cached is None or cached[1] < avgdl:
            at = avgdl * IMPACT_AVGDL_HEADROOM
            seen, best = 0, 0.0
        else:
            seen, at, best = cached
        if seen < rows.size:
            reference = Bm25(self.k1, self.b, at)
            best = max(best, float(reference.impacts(tfs[seen:], np.take(dl, rows[seen:])).max()))
            self.impacts[term] = (rows.size, at, best)
        return at, best
