"""Exact BM25 top-k with MaxScore (search/bm25/topk.py) and the statistics the text index keeps
as rows change (search/bm25/text_index.py): both must equal scoring every posting from scratch."""
from __future__ import annotations

import math
from datetime import UTC, datetime

import numpy as np
import pytest

from search.bm25.text_index import TextIndex
from search.bm25.topk import Bm25, TermList, top_k

K1, B = 0.9, 0.4


def _brute(lists: list[TermList], bm25: Bm25, dl: np.ndarray, eligible: np.ndarray) -> np.ndarray:
    scores = np.zeros(dl.size, dtype=np.float64)
    for term in lists:
        norm = bm25.k1 * (1 - bm25.b + bm25.b * dl[term.rows].astype(np.float64) / bm25.avgdl)
        scores[term.rows] += term.idf * term.tfs * (bm25.k1 + 1) / (term.tfs + norm)
    return np.where(eligible, scores, 0.0)


def _lists(rng: np.random.Generator, size: int, count: int, dl: np.ndarray,
           impact_at: float | None = None) -> list[TermList]:
    """Terms from rare to common (Zipf-like list lengths), tf 1-3; with ``impact_at``, each
    carrying its largest impact at that avgdl (the tight bound the text index keeps)."""
    lists = []
    for _ in range(count):
        length = int(min(size, max(1, size * rng.pareto(1.2) / 20)))
        rows = np.sort(rng.choice(size, size=length, replace=False)).astype(np.int32)
        tfs = rng.integers(1, 4, size=length).astype(np.float32)
        idf = math.log(1 + (size - length + 0.5) / (length + 0.5))
        impact = None
        if impact_at is not None:
            impact = (impact_at, float(Bm25(K1, B, impact_at).impacts(tfs, dl[rows].copy()).max()))
        lists.append(TermList(rows, tfs, idf, float(tfs.max()), float(dl[rows].min()), impact))
    return lists


@pytest.mark.parametrize("seed", range(6))
def test_top_k_equals_scoring_every_posting(seed: int) -> None:
    rng = np.random.default_rng(seed)
    size = 20_000
    dl = rng.integers(3, 60, size=size).astype(np.float32)
    bm25 = Bm25(K1, B, float(dl.mean()))
    for query in range(40):
        # Every third query's lists carry impacts: at exactly avgdl, above it, or stale (below it:
        # the loose bound is used instead).
        impact_at = (None, None, bm25.avgdl * float(rng.choice([1.0, 1.05, 0.9])))[query % 3]
        lists = _lists(rng, size, int(rng.integers(1, 7)), dl, impact_at)
        eligible = rng.random(size) < (0.3 if query % 2 else 0.97)
        limit = int(rng.choice([1, 5, 10, 50]))
        rows, scores = top_k(lists, bm25, dl, eligible, limit)
        brute = _brute(lists, bm25, dl, eligible)
        expected = np.sort(brute[brute > 0])[::-1][:limit]
        assert scores.size == expected.size
        np.testing.assert_allclose(scores, expected, rtol=1e-5)
        np.testing.assert_allclose(brute[rows], scores, rtol=1e-5)  # the rows hold those scores
        assert eligible[rows].all()


def test_top_k_skips_most_postings_of_common_terms_yet_stays_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rare term and two very common ones: the common lists are only looked up for the rows
    the rare one found (what makes a common word cheap), and the answer is still the exact one."""
    rng = np.random.default_rng(7)
    size = 50_000
    dl = rng.integers(5, 30, size=size).astype(np.float32)
    bm25 = Bm25(K1, B, float(dl.mean()))
    rare = np.sort(rng.choice(size, 30, replace=False)).astype(np.int32)
    lists = [TermList(rare, np.ones(30, np.float32), math.log(1 + size / 30), 1.0, float(dl[rare].min()))]
    for share in (0.5, 0.6):
        rows = np.sort(rng.choice(size, int(size * share), replace=False)).astype(np.int32)
        lists.append(TermList(rows, np.ones(rows.size, np.float32), math.log(1 + (1 - share) / share + 0.01), 1.0,
                              float(dl[rows].min())))
    scored: list[int] = []
    original = Bm25.contribution

    def counted(self, term, tfs, lengths):  # noqa: ANN001, ANN202
        scored.append(tfs.size)
        return original(self, term, tfs, lengths)

    monkeypatch.setattr(Bm25, "contribution", counted)
    eligible = np.ones(size, dtype=bool)
    rows, scores = top_k(lists, bm25, dl, eligible, 10)
    brute = _brute(lists, bm25, dl, eligible)
    np.testing.assert_allclose(scores, np.sort(brute)[::-1][:10], rtol=1e-5)
    assert sum(scored) < 30 + 0.2 * (lists[1].rows.size + lists[2].rows.size)


def _reference(index: TextIndex, terms: list[str], namespace: str, now: float) -> list[float]:
    """Every statistic recounted from the per-row arrays, every posting scored."""
    columns = index.columns(namespace)
    assert columns is not None
    in_ns = columns["alive"] & columns["in_namespace"]
    dl = columns["dl"]
    eligible = in_ns & (columns["live"] > now)
    n_docs, avgdl = int(in_ns.sum()), max(float(dl[in_ns].mean()), 1.0)
    lists = []
    for term in terms:
        posting = index.posting(term)
        if posting is None:
            continue
        rows, tfs = np.asarray(posting[0], dtype=np.int32), np.asarray(posting[1], dtype=np.float32)
        df = int(in_ns[rows].sum())
        if df:
            lists.append(TermList(rows, tfs, math.log(1 + (n_docs - df + 0.5) / (df + 0.5)), 1.0, 1.0))
    brute = _brute(lists, Bm25(K1, B, avgdl), dl, eligible)
    return sorted(brute[brute > 0].tolist(), reverse=True)[:10]


def test_statistics_kept_as_rows_change_equal_a_recount() -> None:
    """Namespace sizes, lengths and document frequencies are updated as rows are added, replaced,
    dropped and expire, never recounted per query: after each step the scores equal a recount."""
    rng = np.random.default_rng(3)
    words = [f"w{i}" for i in range(60)]
    index = TextIndex(K1, B, 2)
    index.mark_loaded()  # filled directly, no database
    start = datetime(2026, 1, 1, tzinfo=UTC).timestamp()

    def document() -> str:
        return " ".join(rng.choice(words, size=int(rng.integers(2, 12)), p=_zipf(len(words))))

    def check(now: float) -> None:
        for query in (["w0", "w7"], ["w3", "w1", "w40"], ["w59"], ["w2", "w2", "w5"]):
            for namespace in ("a", "b"):
                got = [score for _, score in index.score(
                    query, namespace=namespace, collection=None, now=datetime.fromtimestamp(now, UTC), limit=10)]
                np.testing.assert_allclose(got, _reference(index, query, namespace, now), rtol=1e-5)

    for i in range(600):
        until = start + float(rng.integers(10, 1000)) if i % 4 == 0 else math.inf
        index.add_row(f"m{i}", document(), namespace="a" if i % 3 else "b", until=until)
    check(start)
    for step in range(5):
        for i in rng.choice(600, size=40, replace=False).tolist():
            if i % 2:
                index.drop_row(f"m{i}")
            else:  # edited: a new row replaces the old one
                index.add_row(f"m{i}", document(), namespace="a" if i % 3 else "b")
        for i in range(600 + 20 * step, 620 + 20 * step):
            index.add_row(f"m{i}", document(), namespace="a")
        check(start + 200 * step)  # rows expire as time moves, and the cached masks follow
        check(start)  # and back: a search "as of" an earlier moment


def _zipf(count: int) -> np.ndarray:
    weights = 1 / np.arange(1, count + 1)
    return weights / weights.sum()


def test_a_kept_impact_bounds_every_contribution_and_is_tighter() -> None:
    rng = np.random.default_rng(11)
    dl = rng.integers(3, 60, size=5_000).astype(np.float32)
    bm25 = Bm25(K1, B, float(dl.mean()))
    for at in (bm25.avgdl, bm25.avgdl * 1.05):
        (term,) = _lists(rng, dl.size, 1, dl, at)
        contributions = bm25.contribution(term, term.tfs, dl[term.rows].copy())
        loose = Bm25.bound(bm25, TermList(term.rows, term.tfs, term.idf, term.max_tf, term.min_dl))
        assert contributions.max() <= bm25.bound(term) * (1 + 1e-6) and bm25.bound(term) <= loose  # float32 sums
    (stale,) = _lists(rng, dl.size, 1, dl, bm25.avgdl * 0.9)  # avgdl grew past it: not used
    assert bm25.bound(stale) == bm25.bound(TermList(stale.rows, stale.tfs, stale.idf, stale.max_tf, stale.min_dl))


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
def test_tfs_stored_as_doubled_integers_give_bit_identical_scores(dtype: type) -> None:
    """The text index saves tfs (multiples of 0.5) as uint8/uint16 of twice their value and scores
    them with bm25_topk.tf_scale 0.5: every contribution, impact and top-k score equals float32 tfs' bit for bit."""
    rng = np.random.default_rng(7)
    size = 5_000
    dl = (rng.integers(2, 120, size=size) / 2).astype(np.float32)
    bm25 = Bm25(K1, B, float(dl.mean()))
    plain, stored = [], []
    for length in (40, 900, 4_000):
        rows = np.sort(rng.choice(size, size=length, replace=False)).astype(np.int32)
        tfs = (rng.integers(1, 12, size=length) / 2).astype(np.float32)
        idf = math.log(1 + (size - length + 0.5) / (length + 0.5))
        doubled = (tfs * 2).astype(dtype)
        assert np.array_equal(bm25.impacts(doubled, dl[rows]), bm25.impacts(tfs, dl[rows]))
        plain.append(TermList(rows, tfs, idf, float(tfs.max()), float(dl[rows].min())))
        stored.append(TermList(rows, doubled, idf, float(tfs.max()), float(dl[rows].min())))
        assert np.array_equal(bm25.contribution(stored[-1], doubled, dl[rows].copy()),
                              bm25.contribution(plain[-1], tfs, dl[rows].copy()))
    eligible = rng.random(size) < 0.8
    for limit in (1, 10, 100):
        rows_plain, scores_plain = top_k(plain, bm25, dl, eligible, limit)
        rows_stored, scores_stored = top_k(stored, bm25, dl, eligible, limit)
        assert np.array_equal(scores_plain, scores_stored) and np.array_equal(rows_plain, rows_stored)
