"""The text index's statistics computed ahead (search/bm25/text_index.py): after a load or an
open, a daemon thread computes what the first search of each long posting list would, one term
per hold of the index's lock, then has the compiled scorer loaded (search/bm25/compiled.py)."""
from __future__ import annotations

import threading
from array import array

import numpy as np

from memories.indexes.feed import let_waiters_in
from memories.indexes.row_ids import RowIds
from search.bm25 import compiled
from search.bm25.postings import Postings
from search.bm25.statistics import IMPACT_MIN_POSTINGS, TermStatistics
from search.bm25.topk import TermList

# After a load or an open, the statistics a term's first search would compute (a pass over its
# list each) are computed ahead on a daemon thread for every list this long, for the namespaces
# holding at least this share of the rows (at most PRIME_NAMESPACES of them).
PRIME_MIN_POSTINGS = IMPACT_MIN_POSTINGS  # search/bm25/statistics.py
PRIME_MIN_SHARE = 0.05
PRIME_NAMESPACES = 8


def avgdl_of(docs: list[float]) -> float:
    """A namespace's average row length, from its [live rows, their total length] (at least 1)."""
    return max(docs[1] / docs[0], 1.0)



class Primer:
    """The primer of the text index (a mixin: it reads the index's postings, per-row arrays and
    namespace counts under the index's lock)."""

    _lock: threading.RLock
    _postings: Postings
    _stats: TermStatistics
    _row_ids: RowIds
    _ns: array
    _dl: array
    _alive: array
    _deaths: array
    _ns_docs: dict[int, list[float]]
    _priming: object | None
    primer: threading.Thread | None

    def _prime_soon(self) -> None:
        """Start computing, on a daemon thread, what the first search of each long list would: its
        largest tf and shortest row, its largest impact, and its documents in the large namespaces
        (a pass over the list each: at a million rows a term's first search took a few ms more
        than the next ones). One term per hold of the lock, so searches go on in between; a load,
        an open or a discard started meanwhile stops it. Then, for a large index, the compiled
        scorer's load is started (search/bm25/compiled.py). Index lock held."""
        self._priming = token = object()
        self.primer = threading.Thread(target=self._prime, args=(token,), daemon=True, name="bhgbrain-text-prime")
        self.primer.start()

    def _prime(self, token: object) -> None:
        with self._lock:
            if self._priming is not token:
                return
            terms = self._long_terms()
            namespaces = self._large_namespaces()
        for term in terms:
            with self._lock:
                if self._priming is not token:
                    return
                self._prime_term(term, namespaces)
            let_waiters_in()
        with self._lock:
            if self._priming is token:  # last, so numba's import does not slow a new process's first searches
                self._prepare_compiled()

    def _prepare_compiled(self) -> None:
        """Have the compiled scorer (search/bm25/compiled.py) loaded in the background when this
        index is large enough to use it, for the kinds of lists it holds: in RAM, and mapped from
        the snapshot. Index lock held."""
        empty = np.zeros(0, dtype=np.int32)
        lists = [TermList(empty, np.zeros(0, dtype=np.float32), 0.0, 0.0, 0.0)]
        postings = self._postings
        if postings.mapped_terms:
            lists.append(TermList(postings.mapped_rows[:0], postings.mapped_tfs[:0], 0.0, 0.0, 0.0))
        compiled.prepare(len(self._row_ids), lists, np.frombuffer(self._dl, dtype=np.float32),
                         np.zeros(0, dtype=np.bool_))

    def _long_terms(self) -> list[str]:
        """Terms with at least PRIME_MIN_POSTINGS postings, the longest first."""
        return self._postings.long_terms(PRIME_MIN_POSTINGS)

    def _large_namespaces(self) -> list[tuple[int, float]]:
        """(code, avgdl) of the namespaces holding at least PRIME_MIN_SHARE of the live rows."""
        total = sum(docs[0] for docs in self._ns_docs.values())
        large = sorted(((int(docs[0]), code, avgdl_of(docs)) for code, docs in self._ns_docs.items()
                        if docs[0] > 0 and docs[0] >= PRIME_MIN_SHARE * total), reverse=True)
        return [(code, avgdl) for _, code, avgdl in large[:PRIME_NAMESPACES]]

    def _prime_term(self, term: str, namespaces: list[tuple[int, float]]) -> None:
        """One term's statistics (its views of the posting arrays end with this call). Index lock held."""
        stats = self._stats
        for key, rows, tfs in self._postings.parts(term):
            stats.bound(key, rows, tfs, self._dl)
            if namespaces:
                stats.impact(key, rows, tfs, max(avgdl for _, avgdl in namespaces), self._dl)
            for code, _ in namespaces:
                stats.doc_frequency(code, key, rows, self._ns, self._alive, self._deaths)
