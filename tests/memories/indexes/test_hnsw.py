"""HNSW graphs of the large partitions (memories/indexes/hnsw.py) and their use by the embedded index."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from django.utils import timezone

from memories.indexes import hnsw
from memories.indexes.embedded import EmbeddedVectorIndex
from memories.indexes.row_ids import OpenedIds

DIMS = 48


def _clustered(rng: np.random.Generator, count: int, centres: np.ndarray) -> np.ndarray:
    """Unit vectors around a few dozen centres: neighbours that matter, ties that do not."""
    picked = centres[rng.integers(0, centres.shape[0], size=count)]
    raw = picked + 0.35 * rng.standard_normal((count, centres.shape[1]))
    return (raw / np.linalg.norm(raw, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture
def small_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hnsw, "ANN_MIN_ROWS", 1_000)
    monkeypatch.setattr(hnsw, "GRAPH_MIN_ROWS", 1_000)


@pytest.fixture
def graph_searches(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts graph walks, so a test knows the graph (not a fallback scan) answered."""
    calls: list[int] = []
    original = hnsw.AnnIndex._graph_search  # noqa: SLF001 - wrapped, not replaced

    def counted(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        calls.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(hnsw.AnnIndex, "_graph_search", counted)
    return calls


def _index(rng: np.random.Generator, count: int, centres: np.ndarray) -> EmbeddedVectorIndex:
    index = EmbeddedVectorIndex("test/ann", DIMS)
    index.mark_loaded()  # rows are put directly; the (empty) change feed is still read
    for i, vector in enumerate(_clustered(rng, count, centres)):
        # every 5th row a thread message; every 50th in a small collection; every 100th in another namespace
        namespace = "other" if i % 100 == 0 else "global"
        collection = "notes" if i % 50 == 1 else "general"
        index.put_vector(f"m{i}", vector, namespace=namespace, collection=collection, threaded=i % 5 == 0)
    return index


def _built(seed: int) -> tuple[EmbeddedVectorIndex, np.random.Generator, np.ndarray]:
    """An index of 8,000 clustered rows whose graphs are built (the first large search starts them)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((40, DIMS))
    index = _index(rng, 8_000, centres)
    index.search(_clustered(rng, 1, centres)[0], namespace="global", collection=None, limit=10, now=timezone.now())
    assert index.ann is not None
    index.ann.wait()
    return index, rng, centres


def _scores(hits) -> list[float]:  # noqa: ANN001
    return [round(h.cosine, 5) for h in hits]


@pytest.mark.django_db
def test_graph_search_finds_the_exact_top_10(small_threshold: None, graph_searches: list[int]) -> None:
    index, rng, centres = _built(3)
    assert index.ann.graphs() == 2  # facts and messages of global/general  # type: ignore[union-attr]
    now, same = timezone.now(), 0
    queries = _clustered(rng, 100, centres)
    for query in queries:
        served = index.search(query, namespace="global", collection=None, limit=10, now=now)
        exact = index.search(query, namespace="global", collection=None, limit=10, now=now, exact=True)
        assert len(served) == 10
        same += _scores(served) == _scores(exact)
    assert same >= 98
    assert len(graph_searches) == 2 * len(queries)  # both graphs walked by every served search


@pytest.mark.django_db
def test_filters_hold_on_the_graph_path(small_threshold: None, graph_searches: list[int]) -> None:
    index, rng, centres = _built(5)
    now = timezone.now()
    for query in _clustered(rng, 20, centres):
        walked = len(graph_searches)
        facts = index.search(query, namespace="global", collection=None, limit=10, now=now, facts_only=True)
        assert len(graph_searches) == walked + 1  # the messages' graph is not even walked
        assert len(facts) == 10 and all(int(h.memory_id[1:]) % 5 for h in facts)  # no thread message
        assert _scores(facts) == _scores(
            index.search(query, namespace="global", collection=None, limit=10, now=now, facts_only=True, exact=True))
        notes = index.search(query, namespace="global", collection="notes", limit=10, now=now)
        assert len(notes) == 10 and all(int(h.memory_id[1:]) % 50 == 1 for h in notes)
        other = index.search(query, namespace="other", collection=None, limit=10, now=now)
        assert len(other) == 10 and all(int(h.memory_id[1:]) % 100 == 0 for h in other)
        everything = index.search(query, namespace="global", collection=None, limit=10, now=now)
        assert all(int(h.memory_id[1:]) % 100 for h in everything)  # never a row of "other"
    assert graph_searches


@pytest.mark.django_db
def test_expired_rows_are_skipped_and_the_result_stays_full(small_threshold: None, graph_searches: list[int]) -> None:
    index, rng, centres = _built(11)
    query = _clustered(rng, 1, centres)[0]
    now = timezone.now()
    nearest = index.search(query, namespace="global", collection=None, limit=30, now=now, exact=True)
    for hit in nearest[:20]:  # the 20 best expire (expiry changes are not re-indexed: only checked)
        row = index.rows.ids.row(hit.memory_id)
        index.put_vector(hit.memory_id, index.rows.matrix[row].copy(), namespace="global", collection="general",
                         until=now.timestamp() - 1, threaded=bool(index.rows.threaded[row]))
    served = index.search(query, namespace="global", collection=None, limit=10, now=now)
    assert [h.memory_id for h in served] == [h.memory_id for h in nearest[20:30]]
    assert graph_searches


def _graph_index(rng: np.random.Generator, count: int, centres: np.ndarray):  # noqa: ANN202
    matrix = _clustered(rng, count, centres)
    lock = threading.RLock()
    index = hnsw.AnnIndex(DIMS, lock, lambda rows: matrix[rows])
    for row in range(len(matrix)):
        index.put(row, (0, 0, False))
    return index, matrix, lock


def _exact_rows(matrix: np.ndarray, query: np.ndarray, allowed: np.ndarray, k: int) -> np.ndarray:
    scores = np.where(allowed, matrix @ query, -np.inf)
    return np.sort(np.argsort(-scores)[:k])


def _best(matrix: np.ndarray, query: np.ndarray, rows: np.ndarray, k: int) -> np.ndarray:
    return np.sort(rows[np.argsort(-(matrix[rows] @ query))[:k]])


def test_a_graph_returns_the_best_allowed_rows_when_they_are_a_small_minority(small_threshold: None) -> None:
    rng = np.random.default_rng(13)
    centres = rng.standard_normal((40, DIMS))
    index, matrix, lock = _graph_index(rng, 5_000, centres)
    candidates = np.arange(matrix.shape[0])
    allowed = rng.random(matrix.shape[0]) < 0.01  # e.g. all but 1 % expired
    with lock:
        assert index.shortlist(matrix[0], [0], allowed, candidates, 20) is None  # starts the build
    index.wait()
    same = 0
    for query in _clustered(rng, 50, centres):
        with lock:
            rows = index.shortlist(query, [0], allowed, candidates, 20)
        assert rows is not None and rows.size == 20 and allowed[rows].all()
        same += np.array_equal(_best(matrix, query, rows, 10), _exact_rows(matrix, query, allowed, 10))
    assert same >= 49


def test_changes_after_and_during_a_build_are_reflected(small_threshold: None) -> None:
    rng = np.random.default_rng(17)
    centres = rng.standard_normal((40, DIMS))
    matrix = _clustered(rng, 3_000, centres)
    lock = threading.RLock()
    extra = np.zeros((10, DIMS), dtype=np.float32)
    reads: list[int] = []

    def vectors(rows: np.ndarray) -> np.ndarray:
        reads.append(1)
        if len(reads) == 1:  # a write lands while the graph is being built (the lock is re-entrant)
            extra[0] = matrix[5]  # a new row 3000 equal to row 5, and row 7 deleted
            index.put(3_000, (0, 0, False))
            index.drop(7)
        return np.concatenate([matrix, extra])[rows]

    index = hnsw.AnnIndex(DIMS, lock, vectors)
    for row in range(len(matrix)):
        index.put(row, (0, 0, False))
    allowed, candidates = np.ones(3_010, dtype=bool), np.arange(3_010)
    with lock:
        assert index.shortlist(matrix[0], [0], allowed, candidates, 5) is None
    index.wait()
    with lock:
        near_five = index.shortlist(matrix[5], [0], allowed, candidates, 5)
        assert near_five is not None and {5, 3_000} <= set(near_five.tolist())
        assert 7 not in index.shortlist(matrix[7], [0], allowed, candidates, 5).tolist()
        index.drop(5)  # after the build: removed from the graph
        index.put(11, (0, 0, False))  # row 11 now holds row 20's vector
        extra_row = index.shortlist(matrix[20], [0], allowed, candidates, 3)
        assert 5 not in index.shortlist(matrix[5], [0], allowed, candidates, 5).tolist()
        assert {11, 20} <= set(extra_row.tolist())
        index.put(12, (1, 0, False))  # moved to another namespace's partition
        assert 12 not in index.shortlist(matrix[12], [0], allowed, candidates, 5).tolist()
        assert index.partitions(1, None, False) == [1]


def _one_built_graph(seed: int):  # noqa: ANN202
    """3,000 clustered rows in one partition, its graph built."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((40, DIMS))
    index, matrix, lock = _graph_index(rng, 3_000, centres)
    with lock:
        index.shortlist(matrix[0], [0], np.ones(3_000, dtype=bool), np.arange(3_000), 10)
    index.wait()
    return rng, centres, index, matrix, lock


def _saved(index: hnsw.AnnIndex, folder: Path) -> tuple[dict[str, np.ndarray], dict[str, Path]]:
    """What a snapshot writer does with a capture: the arrays kept, each graph saved to a file."""
    captured = index.capture()
    files = {}
    for name, graph in captured.graphs.items():
        hnsw.save_graph(graph, folder / name)
        files[name] = folder / name
    return captured.arrays, files


def test_a_captured_index_opens_with_mapped_graphs_and_identical_results(small_threshold: None, tmp_path: Path) -> None:
    rng, centres, index, matrix, lock = _one_built_graph(19)
    candidates, allowed = np.arange(3_000), np.ones(3_000, dtype=bool)
    index.put(3_001 - 1, (0, 0, False))  # a change after the build is in the state too
    index.drop(17)
    arrays, files = _saved(index, tmp_path)
    assert all(isinstance(value, np.ndarray) for value in arrays.values()) and len(files) == 1
    copy = hnsw.AnnIndex.opened(arrays, files, DIMS, lock, lambda rows: matrix[rows])
    assert copy.graphs() == 1 and copy.dirty() == 2
    for query in [*_clustered(rng, 20, centres), matrix[1], matrix[17]]:
        with lock:
            assert np.array_equal(index.shortlist(query, [0], allowed, candidates, 10),
                                  copy.shortlist(query, [0], allowed, candidates, 10))
            assert 17 not in copy.shortlist(query, [0], allowed, candidates, 10).tolist()
    again = tmp_path / "again"
    again.mkdir()
    _, linked = _saved(copy, again)  # an unchanged graph is linked from the file it was opened from
    assert linked[next(iter(files))].stat().st_ino == files[next(iter(files))].stat().st_ino
    bad = dict(arrays, part_of=arrays["part_of"][:10])
    with pytest.raises(ValueError):
        hnsw.AnnIndex.opened(bad, files, DIMS, lock, lambda rows: matrix[rows])
    with pytest.raises(ValueError):
        hnsw.AnnIndex.opened(arrays, files, DIMS + 1, lock, lambda rows: matrix[rows])


def test_many_changes_refresh_the_graph_and_results_stay_exact(small_threshold: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Dirty rows past the threshold start a refresh: a copy of the graph with them applied
    replaces it, the dirty set empties, and the shortlist still holds the exact best rows."""
    monkeypatch.setattr(hnsw, "REFRESH_MIN_DIRTY", 200)
    rng, centres, index, matrix, lock = _one_built_graph(23)
    candidates, allowed = np.arange(3_000), np.ones(3_000, dtype=bool)
    first = index.graph(0)
    fresh = _clustered(rng, 300, centres)
    with lock:
        matrix[:300] = fresh  # 300 rows get new vectors
        for row in range(300):
            index.put(row, (0, 0, False))
        assert index.dirty() == 300
        index.shortlist(matrix[0], [0], allowed, candidates, 10)  # past the threshold: starts the refresh
    index.wait()
    assert index.graph(0) is not first and index.dirty() == 0
    same = 0
    for query in _clustered(rng, 30, centres):
        with lock:
            rows = index.shortlist(query, [0], allowed, candidates, 40)
        same += np.array_equal(_best(matrix, query, rows, 10), _exact_rows(matrix, query, allowed, 10))
    assert same >= 29


_EXIT_SCRIPT = """
import threading, time, numpy as np
from memories.indexes import hnsw as ann
ann.GRAPH_MIN_ROWS = 10
rng = np.random.default_rng(0)
matrix = rng.standard_normal((200_000, 64)).astype(np.float32)
lock = threading.RLock()
index = ann.AnnIndex(64, lock, lambda rows: matrix[rows])
index.assign(np.arange(200_000), np.zeros(200_000, np.int32), np.zeros(200_000, np.int32), np.zeros(200_000, bool))
with lock:
    assert index.shortlist(matrix[0], [0], np.ones(200_000, bool), np.arange(200_000), 10) is None
time.sleep(0.5)  # the build is inside usearch now
print("leaving", flush=True)
"""


def test_a_process_leaving_during_a_build_exits_cleanly() -> None:
    """A build still running at interpreter exit used to abort the process from C++
    ("terminate called without an active exception"): the exit hook stops it between chunks."""
    root = Path(__file__).resolve().parents[3]
    done = subprocess.run([sys.executable, "-c", _EXIT_SCRIPT], cwd=root, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(root)})
    assert done.stdout.strip() == "leaving"
    assert done.returncode == 0, done.stderr
    assert "terminate called" not in done.stderr


@pytest.mark.django_db
def test_rows_taken_from_elsewhere_are_assigned_to_their_partitions(small_threshold: None, graph_searches: list[int]) -> None:
    """An index whose rows arrive without _put (a snapshot it opened) gives the graphs their
    partitions with ``assign``: a large search then walks graphs and finds the exact top 10."""
    rng = np.random.default_rng(11)
    centres = rng.standard_normal((40, DIMS))
    source = _index(rng, 8_000, centres)
    opened = EmbeddedVectorIndex("test/ann", DIMS)
    opened.mark_loaded()
    taken = source.rows
    arrays = {key: getattr(taken, key) for key in ("matrix", "ns", "coll", "threaded", "live")}
    ids = taken.ids.capture()
    opened.rows.open(arrays, OpenedIds(ids, None), {"codes": taken.codes, "top": taken.top}, None)  # as a snapshot's
    assert opened.ann is not None
    rows = opened.rows
    opened.ann.assign(rows.used(), rows.ns, rows.coll, rows.threaded)
    now, query = timezone.now(), _clustered(rng, 1, centres)[0]
    opened.search(query, namespace="global", collection=None, limit=10, now=now)  # starts the builds
    opened.ann.wait()
    served = opened.search(query, namespace="global", collection=None, limit=10, now=now)
    exact = opened.search(query, namespace="global", collection=None, limit=10, now=now, exact=True)
    assert graph_searches and len(served) == 10 and _scores(served) == _scores(exact)
    facts = opened.search(query, namespace="global", collection="notes", limit=10, now=now, facts_only=True)
    assert facts and all(int(hit.memory_id[1:]) % 50 == 1 and int(hit.memory_id[1:]) % 5 for hit in facts)
