"""Exact BM25 top-k scored by compiled loops (search/bm25/kernels.py), for queries whose lists
hold many postings, once the kernels are loaded.

numba's import and the kernels' first compilation take about a second (the compiled code is then
cached on disk, ``cache=True``: a later process loads it in milliseconds), so nothing waits for
them: :func:`prepare` starts loading them on a daemon thread when a text index is large enough to
need them, and until they are ready (or when numba is not installed, or fails) the numpy MaxScore
of search/bm25/topk.py answers. Both give the exact top-k; they may order rows tied at one score
differently and differ in the last bits of a sum, as any two summation orders do.

Why every posting and no pruning: MaxScore in numpy skips most postings of a common word next to
a rare one, but a question made only of common words (six words each in 10-40 % of a million
memories) left it scoring most of a million postings in several numpy passes each, about 10 ms.
One compiled pass over all of them takes about 2.5 ms, with no bound to keep.
"""
from __future__ import annotations

import functools
import importlib
import os
from types import ModuleType

import numpy as np

from bhgbrain_site.core.background_load import BackgroundLoad
from search.bm25 import topk
from search.bm25.topk import Bm25, TermList, tf_scale

# A query whose lists hold at least this many postings is scored by the kernels (below it the
# numpy MaxScore takes well under a millisecond, and the compiled pass still zeroes and scans a
# score per row of the index).
MIN_POSTINGS = 65_536
# An index with fewer rows never loads numba (at 100k rows numpy's p95 is about 2 ms, and a stdio
# session on such a store starts without numba's import).
MIN_ROWS = 300_000
DISABLE_ENV = "BHGBRAIN_COMPILED_BM25"  # "0": never load the kernels

LOADER = BackgroundLoad("compiled BM25 kernels", "bhgbrain-bm25-compile")  # the process's one load of them


def enabled() -> bool:
    return os.environ.get(DISABLE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")


Kind = tuple[str, bool]  # an array's dtype and whether it is writable: what numba compiles for


def kind(values: np.ndarray) -> Kind:
    return values.dtype.str, bool(values.flags.writeable)


def prepare(rows: int, lists: list[TermList], dl: np.ndarray, eligible: np.ndarray) -> None:
    """Start loading the kernels in the background if an index of ``rows`` rows may use them,
    compiling them there for the array types of ``lists`` (some of the index's own lists: mapped
    read-only, or in RAM), ``dl`` and ``eligible``, so that no search compiles. Keeps no view of
    the arrays (a view of a list in RAM would stop it from growing)."""
    if rows < MIN_ROWS or not enabled() or LOADER.state != "idle":
        return
    LOADER.start(functools.partial(_load, _kinds(lists), kind(dl), kind(eligible)))


def load_now(lists: list[TermList] | None = None, dl: np.ndarray | None = None,
             eligible: np.ndarray | None = None) -> ModuleType | None:
    """Load (and compile) the kernels in this thread; the module, or None when unavailable."""
    return LOADER.load_now(functools.partial(
        _load, _kinds(lists or []), kind(dl) if dl is not None else ("<f4", True),
        kind(eligible) if eligible is not None else ("|b1", True)))


def _kinds(lists: list[TermList]) -> list[tuple[Kind, Kind]]:
    return sorted({(kind(term.rows), kind(term.tfs)) for term in lists if usable(term)})


def state() -> str:
    """Where the kernels' load is: "idle", "loading", "ready" or "unavailable"."""
    return LOADER.state


def ready() -> ModuleType | None:
    """The kernels when loaded, else None (never waits)."""
    return LOADER.ready()


def wait(timeout: float | None = None) -> ModuleType | None:
    """For benchmarks: wait until a load that was started has ended; the kernels, or None."""
    return LOADER.wait(timeout)


def usable(term: TermList) -> bool:
    """Lists the kernels take: int32 rows and tfs as a snapshot or the index stores them (float16,
    what older snapshots held, is left to numpy)."""
    return term.rows.dtype == np.int32 and term.tfs.dtype in _TFS


_TFS = frozenset(np.dtype(t) for t in (np.uint8, np.uint16, np.float32))


def _load(kinds: list[tuple[Kind, Kind]], dl: Kind, eligible: Kind) -> ModuleType:
    bm25_kernels = importlib.import_module("search.bm25.kernels")  # numba's import: ~0.6 s
    _warm(bm25_kernels, kinds, dl, eligible)
    return bm25_kernels


def _array(of: Kind, fill: int) -> np.ndarray:
    values = np.full(1, fill, dtype=np.dtype(of[0]))
    values.setflags(write=of[1])
    return values


def _warm(kernels: ModuleType, kinds: list[tuple[Kind, Kind]], dl: Kind, eligible: Kind) -> None:
    """Compile (or load from numba's cache) each kernel for the argument types searches pass."""
    bm25 = Bm25(1.2, 0.75, 1.0)
    scores = np.zeros(1, dtype=np.float32)
    for rows, tfs in [(("<i4", True), ("|u1", True)), *kinds]:
        term = TermList(_array(rows, 0), _array(tfs, 1), 1.0, 1.0, 1.0)
        kernels.accumulate(scores, term.rows, term.tfs, _array(dl, 1), *_constants(bm25, term))
    kernels.best_rows(scores, _array(eligible, 1), 1)


def _constants(bm25: Bm25, term: TermList) -> tuple[np.float32, np.float32, np.float32]:
    """c1, c2, weight of ``Bm25.contribution`` for the term's stored tfs: weight × tf / (tf + dl × c1 + c2)."""
    inverse = np.float32(1 / tf_scale(term.tfs))
    return (np.float32(bm25.k1 * bm25.b / bm25.avgdl) * inverse, np.float32(bm25.k1 * (1 - bm25.b)) * inverse,
            np.float32(term.idf * (bm25.k1 + 1)))


def top_k(kernels: ModuleType, terms: list[TermList], bm25: Bm25, dl: np.ndarray, eligible: np.ndarray,
          limit: int) -> tuple[np.ndarray, np.ndarray]:
    """``bm25_topk.top_k`` by scoring every posting: the best ``limit`` eligible rows and their
    scores, best first (ties: lower row first)."""
    if limit <= 0:
        return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.float32)
    if not all(usable(term) for term in terms):
        raise ValueError("lists the kernels do not take (bm25_compiled.usable)")
    scores = np.zeros(dl.size, dtype=np.float32)
    for term in terms:
        kernels.accumulate(scores, term.rows, term.tfs, dl, *_constants(bm25, term))
    best = kernels.best_rows(scores, eligible, limit)
    best = best[np.lexsort((best, -scores[best]))]
    return best, scores[best]


def best(terms: list[TermList], bm25: Bm25, dl: np.ndarray, eligible: np.ndarray,
         limit: int) -> tuple[np.ndarray, np.ndarray]:
    """The exact top ``limit`` (rows, scores): by the kernels when they are loaded and the query's
    lists hold MIN_POSTINGS postings or more (all of kinds they take), else numpy's MaxScore."""
    kernels = ready()
    if (kernels is not None and sum(term.rows.size for term in terms) >= MIN_POSTINGS
        and all(usable(term) for term in terms)):
        return top_k(kernels, terms, bm25, dl, eligible, limit)
    return topk.top_k(terms, bm25, dl, eligible, limit)
