"""The compiled BM25 scorer (search/bm25/compiled.py, search/bm25/kernels.py): the same top-k
as scoring every posting, bit-identical contributions, every kind of list a text index holds
(read-only mapped, uint8/uint16/float32 tfs), used by the text index only once loaded and only
for long queries, and numpy answering whenever it is not there."""
from __future__ import annotations

import sys
import threading
from datetime import UTC, datetime

import numpy as np
import pytest

from bhgbrain_site.core.background_load import BackgroundLoad
from search.bm25 import compiled
from search.bm25.text_index import TextIndex
from search.bm25.topk import Bm25, TermList, top_k
from tests.search.bm25.test_topk import K1, B, _brute, _lists, _reference


@pytest.fixture(scope="module")
def kernels():  # noqa: ANN201
    loaded = compiled.load_now()
    assert loaded is not None, "numba is a dependency: the kernels must load"
    return loaded


def _read_only(values: np.ndarray) -> np.ndarray:
    values = values.copy()
    values.setflags(write=False)
    return values


@pytest.mark.parametrize("seed", range(4))
def test_compiled_top_k_equals_scoring_every_posting(kernels, seed: int) -> None:  # noqa: ANN001
    rng = np.random.default_rng(100 + seed)
    size = 20_000
    dl = rng.integers(3, 60, size=size).astype(np.float32)
    bm25 = Bm25(K1, B, float(dl.mean()))
    for query in range(30):
        plain = lists = _lists(rng, size, int(rng.integers(1, 7)), dl)
        if query % 3 == 1:  # as a snapshot maps them: read-only, tfs as doubled uint8
            lists = [TermList(_read_only(t.rows), _read_only((t.tfs * 2).astype(np.uint8)), t.idf, t.max_tf, t.min_dl)
                     for t in plain]
        eligible = rng.random(size) < (0.3 if query % 2 else 0.97)
        limit = int(rng.choice([1, 5, 10, 50]))
        rows, scores = compiled.top_k(kernels, lists, bm25, _read_only(dl) if query % 4 else dl, eligible, limit)
        brute = _brute(plain, bm25, dl, eligible)
        expected = np.sort(brute[brute > 0])[::-1][:limit]
        assert scores.size == expected.size
        np.testing.assert_allclose(scores, expected, rtol=1e-5)
        np.testing.assert_allclose(brute[rows], scores, rtol=1e-5)
        assert eligible[rows].all() and np.all(np.diff(scores) <= 0)
        numpy_rows, numpy_scores = top_k(lists, bm25, dl, eligible, limit)
        np.testing.assert_allclose(scores, numpy_scores, rtol=1e-6)


@pytest.mark.parametrize("dtype", [np.float32, np.uint8, np.uint16])
def test_compiled_contributions_are_bit_identical_to_numpy(kernels, dtype: type) -> None:  # noqa: ANN001
    """One list: each row's score is exactly numpy's contribution (same float32 operations in the
    same order), for float32 tfs and for the doubled integers a snapshot stores."""
    rng = np.random.default_rng(5)
    size = 8_000
    dl = (rng.integers(2, 120, size=size) / 2).astype(np.float32)
    bm25 = Bm25(K1, B, float(dl.mean()))
    rows = np.sort(rng.choice(size, size=3_000, replace=False)).astype(np.int32)
    tfs = (rng.integers(1, 12, size=rows.size) / 2).astype(np.float32)
    stored = tfs if dtype is np.float32 else (tfs * 2).astype(dtype)
    term = TermList(rows, stored, 2.5, float(tfs.max()), float(dl[rows].min()))
    expected = bm25.contribution(term, stored, dl[rows].copy())
    got_rows, got = compiled.top_k(kernels, [term], bm25, dl, np.ones(size, dtype=np.bool_), rows.size)
    assert np.array_equal(np.sort(got_rows), rows)
    by_row = dict(zip(got_rows.tolist(), got.tolist(), strict=True))
    assert np.array_equal(np.array([by_row[r] for r in rows.tolist()], dtype=np.float32), expected)


def test_ties_at_the_last_place_keep_the_lowest_rows(kernels) -> None:  # noqa: ANN001
    dl = np.full(100, 10.0, dtype=np.float32)
    rows = np.arange(0, 100, 3, dtype=np.int32)
    term = TermList(rows, np.ones(rows.size, dtype=np.float32), 1.0, 1.0, 10.0)
    got, scores = compiled.top_k(kernels, [term], Bm25(K1, B, 10.0), dl, np.ones(100, dtype=np.bool_), 4)
    assert got.tolist() == [0, 3, 6, 9] and len(set(scores.tolist())) == 1
    empty, none = compiled.top_k(kernels, [term], Bm25(K1, B, 10.0), dl, np.zeros(100, dtype=np.bool_), 4)
    assert empty.size == 0 and none.size == 0
    assert compiled.top_k(kernels, [term], Bm25(K1, B, 10.0), dl, np.ones(100, dtype=np.bool_), 0)[0].size == 0


def test_float16_lists_are_left_to_numpy(kernels) -> None:  # noqa: ANN001
    """Snapshots before uint8 tfs stored float16: the kernels do not take them, the index scores
    such a query with numpy."""
    term = TermList(np.arange(5, dtype=np.int32), np.ones(5, dtype=np.float16), 1.0, 1.0, 1.0)
    assert not compiled.usable(term)
    with pytest.raises(ValueError, match="usable"):
        compiled.top_k(kernels, [term], Bm25(K1, B, 1.0), np.ones(5, dtype=np.float32), np.ones(5, dtype=np.bool_), 3)


def _filled_index() -> TextIndex:
    rng = np.random.default_rng(9)
    words = [f"w{i}" for i in range(40)]
    weights = 1 / np.arange(1, len(words) + 1)
    index = TextIndex(K1, B, 2)
    index.mark_loaded()  # filled directly, no database
    for i in range(3_000):
        text = " ".join(rng.choice(words, size=int(rng.integers(2, 14)), p=weights / weights.sum()))
        index.add_row(f"m{i}", text, namespace="a" if i % 4 else "b")
    return index


def test_the_text_index_scores_long_queries_with_the_kernels_once_ready(kernels, monkeypatch) -> None:  # noqa: ANN001
    index = _filled_index()
    now = datetime(2026, 1, 1, tzinfo=UTC)
    calls: list[int] = []
    original = compiled.top_k

    def counted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(compiled, "top_k", counted)
    monkeypatch.setattr(compiled, "MIN_POSTINGS", 500)
    queries = (["w0", "w1", "w2"], ["w3", "w39"], ["w0", "w5", "w7", "w9"])
    scored = [index.score(q, namespace=ns, collection=None, now=now, limit=10) for q in queries for ns in ("a", "b")]
    assert len(calls) == len(scored)  # each of these queries holds 500+ postings
    for got, (query, namespace) in zip(scored, [(q, ns) for q in queries for ns in ("a", "b")], strict=True):
        np.testing.assert_allclose([s for _, s in got], _reference(index, query, namespace, now.timestamp()), rtol=1e-5)
    calls.clear()
    index.score(["w39"], namespace="a", collection=None, now=now, limit=10)  # a short query: numpy's MaxScore
    assert calls == []
    gate = threading.Event()
    loading = BackgroundLoad("test kernels", "test-load")
    loading.start(lambda: gate.wait(10) and kernels)
    monkeypatch.setattr(compiled, "LOADER", loading)  # not ready yet: numpy, same answer
    assert compiled.state() == "loading"
    assert [s for _, s in index.score(queries[0], namespace="a", collection=None, now=now, limit=10)] == pytest.approx(
        [s for _, s in scored[0]], rel=1e-6)
    assert calls == []
    gate.set()
    assert loading.wait(10) is kernels


def test_small_indexes_never_load_numba_and_a_failed_load_leaves_numpy(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(compiled, "LOADER", BackgroundLoad("compiled BM25 kernels", "test-load"))
    dl, eligible = np.ones(4, dtype=np.float32), np.ones(4, dtype=np.bool_)
    compiled.prepare(compiled.MIN_ROWS - 1, [], dl, eligible)
    assert compiled.state() == "idle"
    monkeypatch.setenv(compiled.DISABLE_ENV, "0")
    compiled.prepare(compiled.MIN_ROWS, [], dl, eligible)
    assert compiled.state() == "idle"
    monkeypatch.delenv(compiled.DISABLE_ENV)
    # numba missing (or failing): the load ends unavailable, and the index still answers
    monkeypatch.setitem(sys.modules, "search.bm25.kernels", None)
    compiled.prepare(compiled.MIN_ROWS, [], dl, eligible)
    assert compiled.state() in ("loading", "unavailable")
    assert compiled.wait(30) is None and compiled.state() == "unavailable" and compiled.ready() is None
    index = _filled_index()
    now = datetime(2026, 1, 1, tzinfo=UTC)
    got = [s for _, s in index.score(["w0", "w1"], namespace="a", collection=None, now=now, limit=10)]
    np.testing.assert_allclose(got, _reference(index, ["w0", "w1"], "a", now.timestamp()), rtol=1e-5)


def test_the_primer_starts_the_load_for_a_large_index_with_its_kinds_of_lists(monkeypatch) -> None:  # noqa: ANN001
    """After its statistics primer, an index of MIN_ROWS rows or more has the kernels loaded for
    the kinds of lists it holds (here in RAM only: float32 tfs, writable), and holds no view of
    them afterwards (a list in RAM must still grow)."""
    seen: list[tuple] = []

    def prepare(rows, lists, dl, eligible):  # noqa: ANN001, ANN202
        seen.append((rows, sorted({(compiled.kind(t.rows), compiled.kind(t.tfs)) for t in lists}),
                     compiled.kind(dl), compiled.kind(eligible)))

    monkeypatch.setattr(compiled, "prepare", prepare)
    index = _filled_index()
    token = object()
    index._priming = token  # noqa: SLF001 - as _prime_soon sets it
    index._prime(token)  # noqa: SLF001 - the primer's body, in this thread
    assert seen == [(3_000, [(("<i4", True), ("<f4", True))], ("<f4", True), ("|b1", True))]
    index.add_row("m-new", "w0 w1 w2", namespace="a")  # the lists still grow
    index._priming = object()  # noqa: SLF001 - a load or a discard started meanwhile: no load asked
    index._prime(token)  # noqa: SLF001
    assert len(seen) == 1
