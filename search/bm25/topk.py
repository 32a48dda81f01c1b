"""Exact BM25 top-k over posting lists without scoring every posting (MaxScore).

A query's terms are taken from the highest upper bound of their contribution to the lowest.
Each one's list is scored completely while a row seen in none of the lists so far could still
reach the top: that is, while the bounds of the terms left add up to at least *theta*, a score
``limit`` eligible rows have already reached. Once they do not, no unseen row can enter the
top, and the terms left are only looked up for the rows that still can (a binary search in
their lists, which are sorted by row), dropping rows as the bounds left shrink. The result is
the same top-k as scoring everything (rows tied at one score may come in another order): on
text with rare and common words most of a common word's postings are never touched.

A term's bound is its largest contribution to any row: idf × (k1 + 1) × the largest *impact*
tf / (tf + k1 (1 - b + b · dl / avgdl)) over its postings. The impact grows with avgdl, so a
largest impact computed at an avgdl A bounds every avgdl up to A: the index keeps it per term
(``TermList.impact``), computed at a little above the current avgdl and recomputed when avgdl
passes it. Without one (or past it) the bound takes the list's largest tf and shortest document
together, which a real posting rarely reaches: a looser bound prunes later.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

_LOOKUP_COST = 24  # a binary search into a long list costs about this many sequential reads
_SLACK = 1e-5  # float32 sums in another order differ in the last bits: prune only past this margin


@dataclass(frozen=True)
class TermList:
    rows: np.ndarray  # int32, ascending
    tfs: np.ndarray  # one per row, as stored: see tf_scale
    idf: float
    max_tf: float  # a tf, not a stored value
    min_dl: float
    impact: tuple[float, float] | None = None  # (avgdl A, the largest impact over the list at A)


def tf_scale(tfs: np.ndarray) -> float:
    """What a stored tf is multiplied by to give the tf: unsigned integers hold twice each tf (the
    text index saves its tfs, multiples of 0.5, so: search/bm25/text_index.py), floats the tf itself."""
    return 0.5 if tfs.dtype.kind == "u" else 1.0


@dataclass(frozen=True)
class Bm25:
    """BM25 over float32 arrays. Stored tfs may be scaled integers (``tf = q × s``, ``s`` a power
    of two: :func:`tf_scale`), since float32 arithmetic on them is ~7× faster
    than on float16 and exact: tf / (tf + n) is computed as q / (q + n / s), and scaling by a
    power of two commutes with float32 rounding, so every score is bit-identical."""

    k1: float
    b: float
    avgdl: float

    def _norm(self, dl: np.ndarray, scale: float) -> np.ndarray:
        """k1 (1 - b + b · dl / avgdl) / scale, in place in ``dl``."""
        inverse = np.float32(1 / scale)  # a power of two: the constants below stay exact
        dl *= np.float32(self.k1 * self.b / self.avgdl) * inverse
        dl += np.float32(self.k1 * (1 - self.b)) * inverse
        return dl

    def contribution(self, term: TermList, tfs: np.ndarray, dl: np.ndarray) -> np.ndarray:
        """idf × tf × (k1 + 1) / (tf + k1 (1 - b + b · dl / avgdl)) for the stored ``tfs`` of
        ``term``, in place in ``dl`` (a gathered copy): one temporary instead of seven over lists
        of a million postings."""
        dl = self._norm(dl, tf_scale(tfs))
        dl += tfs
        np.divide(tfs, dl, out=dl)
        dl *= np.float32(term.idf * (self.k1 + 1))
        return dl

    def impacts(self, tfs: np.ndarray, dl: np.ndarray) -> np.ndarray:
        """tf / (tf + k1 (1 - b + b · dl / avgdl)) per posting (stored ``tfs``, see the class): the
        contribution without idf × (k1 + 1)."""
        norm = self._norm(dl.astype(np.float32), tf_scale(tfs))
        norm += tfs
        return np.divide(tfs, norm, out=norm)

    def bound(self, term: TermList) -> float:
        norm = self.k1 * (1 - self.b + self.b * term.min_dl / self.avgdl)
        loose = term.idf * (self.k1 + 1) * term.max_tf / (term.max_tf + norm)
        if term.impact is None or self.avgdl > term.impact[0]:
            return loose
        # float32 impacts: rounded up by a margin far above their error, so the bound holds
        return min(loose, term.idf * (self.k1 + 1) * term.impact[1] * (1 + 1e-4))


def top_k(terms: list[TermList], bm25: Bm25, dl: np.ndarray, eligible: np.ndarray, limit: int,
          ) -> tuple[np.ndarray, np.ndarray]:
    """The best ``limit`` eligible rows by the sum of their terms' BM25 contributions, and their
    scores, best first. ``dl`` and ``eligible`` are indexed by row."""
    bounds = [bm25.bound(term) for term in terms]
    order = sorted(range(len(terms)), key=lambda i: -bounds[i])
    left = np.cumsum([bounds[i] for i in order][::-1])[::-1].tolist() + [0.0]  # left[j]: bounds of order[j:]
    scores = np.zeros(dl.size, dtype=np.float32)
    theta = 0.0
    j = 0
    while j < len(order) and theta * (1 - _SLACK) <= left[j]:
        term = terms[order[j]]
        # np.take and np.add.at: twice as fast as fancy indexing with int32 rows
        np.add.at(scores, term.rows, bm25.contribution(term, term.tfs, np.take(dl, term.rows)))
        j += 1
        if j < len(order) and left[j] < left[0] - left[j]:  # the rows scored may already bar the rest
            theta = max(theta, _kth(scores, term.rows[np.take(eligible, term.rows)], limit))
    scored = terms[order[0]].rows if j == 1 else None  # the rows with a score, when one list holds them all
    if j == len(order):
        candidates = _at_least(scores, scored, max(theta * (1 - _SLACK), 0.0), strictly=True)
        candidates = candidates[eligible[candidates]]
    else:
        candidates = _looked_up(terms, order[j:], left[j:], scores, scored, eligible, theta, bm25, dl, limit)
    top = min(limit, candidates.size)
    if top == 0:
        return candidates, np.zeros(0, dtype=np.float32)
    best = candidates[np.argpartition(-scores[candidates], top - 1)[:top]]
    best = best[np.argsort(-scores[best], kind="stable")]
    return best, scores[best]


def _kth(scores: np.ndarray, rows: np.ndarray, limit: int) -> float:
    """The ``limit``-th best score among ``rows`` (0 when fewer): a score the top must reach."""
    if rows.size < limit:
        return 0.0
    return float(np.partition(np.take(scores, rows), rows.size - limit)[rows.size - limit])


def _at_least(scores: np.ndarray, scored: np.ndarray | None, floor: float, *, strictly: bool = False) -> np.ndarray:
    """The rows whose score reaches ``floor`` (passes it, ``strictly``), ascending: picked from
    ``scored`` when the rows with a score are known (a list of a tenth of the rows, not all of them)."""
    if scored is None or scored.size * 4 > scores.size:
        return np.flatnonzero(scores > floor if strictly else scores >= floor)
    values = np.take(scores, scored)
    return scored[values > floor if strictly else values >= floor]


def _looked_up(terms: list[TermList], rest: list[int], left: list[float], scores: np.ndarray,
               scored: np.ndarray | None, eligible: np.ndarray, theta: float, bm25: Bm25, dl: np.ndarray,
               limit: int) -> np.ndarray:
    """Add the ``rest`` terms to the rows that can still reach ``theta``; those rows."""
    candidates = _at_least(scores, scored, (theta - left[0]) * (1 - _SLACK))
    candidates = candidates[eligible[candidates] & (scores[candidates] > 0)]
    member: np.ndarray | None = None
    for step, index in enumerate(rest):
        term = terms[index]
        if candidates.size * _LOOKUP_COST < term.rows.size:  # few rows: a binary search each
            at = np.searchsorted(term.rows, candidates)
            at[at == term.rows.size] = 0
            found = term.rows[at] == candidates
            rows, tfs = candidates[found], term.tfs[at[found]]
        else:  # many: one pass over the list, checking each of its rows
            if member is None:
                member = np.zeros(scores.size, dtype=np.bool_)
            member[candidates] = True
            found = np.flatnonzero(np.take(member, term.rows))  # positions: two small gathers, not two masks
            member[candidates] = False
            rows, tfs = np.take(term.rows, found), np.take(term.tfs, found)
        np.add.at(scores, rows, bm25.contribution(term, tfs, np.take(dl, rows)))
        theta = max(theta, _kth(scores, candidates, limit))
        candidates = candidates[scores[candidates] >= (theta - left[step + 1]) * (1 - _SLACK)]
    return candidates
