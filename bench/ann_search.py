"""Approximate vector search measured against the exact scan, without a database.

Builds the same memory vectors as ``bench/search_latency.py`` (sums of 1-3 cached sentence
vectors, a third of them thread messages) and the same questions, then times per size: the exact
float32 scan, the PCA sketch prefilter, an IVF (``bench/ann_ivf.py``, the rejected alternative)
and the HNSW graphs of ``memories/indexes/hnsw.py`` (unfiltered, facts only, and a namespace holding 5 % of
the rows). "identical" counts queries whose top-10 scores equal the exact scan's (ties between
identical vectors make ids ambiguous). Times are per query, the exact re-score included.

    python bench/ann_search.py --sizes 100000,1000000 --seed 4321 --json bench/results/ann.json
"""
from __future__ import annotations

import argparse
import json
import random
import resource
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402
from search_latency import (  # noqa: E402 - also sets the BLAS thread count as the server does
    LIMIT,
    WARMUP,
    _unit_sum,
    bench_store,
    make_questions,
    memory_combinations,
)

Search = Callable[[np.ndarray], np.ndarray]
KEEP = 400  # rows re-scored exactly per searched structure (SHORTLIST_MIN)


def memory_vectors(size: int, vectors: np.ndarray, seed: int) -> np.ndarray:
    rng = random.Random(seed * 1_000_003 + size)
    out = np.empty((size, vectors.shape[1]), dtype=np.float32)
    for i, combo in enumerate(memory_combinations(size, vectors.shape[0], rng)):
        out[i] = _unit_sum(vectors, combo)
    return out


def exact_top(matrix: np.ndarray, query: np.ndarray, allowed: np.ndarray | None = None) -> np.ndarray:
    scores = matrix @ query
    if allowed is not None:
        scores = np.where(allowed, scores, -np.inf)
    best = np.argpartition(-scores, LIMIT - 1)[:LIMIT]
    return np.sort(scores[best])[::-1]


def rescored(matrix: np.ndarray, query: np.ndarray, rows: np.ndarray) -> np.ndarray:
    scores = matrix[np.sort(rows)] @ query
    top = min(LIMIT, scores.size)
    return np.sort(scores[np.argpartition(-scores, top - 1)[:top]])[::-1]


def measure(name: str, queries: np.ndarray, truth: list[np.ndarray], call: Search) -> dict[str, Any]:
    times, identical = [], 0
    for query, exact in zip(queries, truth, strict=True):
        started = time.perf_counter()
        got = call(query)
        times.append((time.perf_counter() - started) * 1e3)
        identical += got.size == exact.size and float(np.max(exact - got)) <= 1e-6
    result = {"name": name, "p50_ms": round(float(np.percentile(times, 50)), 2),
              "p95_ms": round(float(np.percentile(times, 95)), 2), "identical": identical, "queries": len(truth)}
    print(json.dumps(result), flush=True)
    return result


def sketch_runs(matrix: np.ndarray, queries: np.ndarray, truth: list[np.ndarray], rng: np.random.Generator) -> list[dict]:
    from memories.indexes.sketch import fit_projection

    sample = matrix[np.sort(rng.choice(matrix.shape[0], size=min(20_000, matrix.shape[0]), replace=False))]
    projection = fit_projection(sample, matrix.shape[1] // 3, matrix.shape[0])
    sketch = np.concatenate([projection.apply(matrix[s:s + 65536]) for s in range(0, matrix.shape[0], 65536)])

    def search(q: np.ndarray) -> np.ndarray:
        approx = sketch @ (projection.basis.T @ q)
        return rescored(matrix, q, np.argpartition(-approx, KEEP - 1)[:KEEP])

    return [measure(f"PCA sketch {sketch.shape[1]} dims + re-score {KEEP}", queries, truth, search)]


def ivf_runs(matrix: np.ndarray, queries: np.ndarray, truth: list[np.ndarray], rng: np.random.Generator) -> list[dict]:
    import ann_ivf

    size = matrix.shape[0]
    started = time.perf_counter()
    sample_size = min(ann_ivf.TRAIN_SAMPLE_MAX, ann_ivf.TRAIN_SAMPLE_PER_LIST * ann_ivf.list_count(size), size)
    index = ann_ivf.IvfIndex.train(matrix[np.sort(rng.choice(size, size=sample_size, replace=False))], size)
    index.put_many(np.arange(size), matrix)
    build = {"name": f"IVF build ({index.centroids.shape[0]} lists, int8)", "seconds": round(time.perf_counter() - started, 1),
             "code_mib": round(size * matrix.shape[1] / 2**20)}
    print(json.dumps(build), flush=True)
    runs: list[dict] = [build]
    everything = np.ones(size, dtype=bool)
    for share in (0.05, 0.2):
        ann_ivf.PROBE_SHARE = share
        runs.append(measure(f"IVF probe {share:.0%} + re-score {KEEP}", queries, truth,
                            lambda q: rescored(matrix, q, index.shortlist(q, everything, size, KEEP))))
    return runs


def hnsw_runs(matrix: np.ndarray, queries: np.ndarray, truth: list[np.ndarray], threaded: np.ndarray,
              minority: np.ndarray) -> list[dict]:
    """memories/indexes/hnsw.py as the vector index uses it: partitions (namespace 0 or 1, fact or message)."""
    from memories.indexes import hnsw

    lock = threading.RLock()
    index = hnsw.AnnIndex(matrix.shape[1], lock, lambda rows: matrix[rows])
    started = time.perf_counter()
    with lock:
        for row in range(len(matrix)):
            index.put(row, (int(minority[row]), 0, bool(threaded[row])))
        index.start_builds()  # every build now, not on the first search
    index.wait()
    build = {"name": f"HNSW build (usearch i8, M={hnsw.CONNECTIVITY}, ef_add={hnsw.EXPANSION_ADD}, {index.graphs()} graphs)",
             "seconds": round(time.perf_counter() - started, 1), "peak_rss_mib": round(_peak_rss_mib())}
    print(json.dumps(build), flush=True)
    runs: list[dict] = [build]
    everywhere = np.ones(matrix.shape[0], dtype=bool)

    def searcher(namespace: int, facts_only: bool) -> Search:
        allowed = (minority if namespace else ~minority) & (~threaded if facts_only else everywhere)
        candidates = np.flatnonzero(allowed)

        def search(q: np.ndarray) -> np.ndarray:
            with lock:
                pids = index.partitions(namespace, None, facts_only)
                shortlist = index.shortlist(q, pids, allowed, candidates, KEEP)
            assert shortlist is not None
            return rescored(matrix, q, shortlist)
        return search

    for namespace, facts_only, label in ((0, False, "95 % namespace"), (0, True, "95 % namespace, facts only"),
                                         (1, False, "5 % namespace")):
        allowed = (minority if namespace else ~minority) & (~threaded if facts_only else everywhere)
        filtered = [exact_top(matrix, q, allowed) for q in queries]
        runs.append(measure(f"HNSW ef={hnsw.EXPANSION_SEARCH} + re-score {KEEP}/graph, {label}", queries, filtered,
                            searcher(namespace, facts_only)))
    del truth
    return runs


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_size(size: int, sentence_vectors: np.ndarray, queries: np.ndarray, seed: int, kinds: set[str]) -> dict[str, Any]:
    started = time.perf_counter()
    matrix = memory_vectors(size, sentence_vectors, seed)
    print(f"[{size}] vectors in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    rng = np.random.default_rng(seed)
    threaded, minority = rng.random(size) < 1 / 3, rng.random(size) < 0.05
    truth = [exact_top(matrix, q) for q in queries]
    runs = [measure("exact float32 scan", queries, truth, lambda q: exact_top(matrix, q))]
    if "sketch" in kinds:
        runs += sketch_runs(matrix, queries, truth, rng)
    if "ivf" in kinds:
        runs += ivf_runs(matrix, queries, truth, rng)
    if "hnsw" in kinds:
        runs += hnsw_runs(matrix, queries, truth, threaded, minority)
    return {"size": size, "runs": runs}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="100000")
    parser.add_argument("--seed", type=int, default=4321)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--kinds", default="sketch,ivf,hnsw", help="comma-separated: sketch, ivf, hnsw")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    with bench_store("bhgbrain-ann-", None, 3000, args.seed) as store:
        questions = make_questions(WARMUP + args.queries, random.Random(args.seed + 1))[WARMUP:]
        queries = np.stack([store.embedder.embed_query(q) for q in questions]).astype(np.float32)
        kinds = set(args.kinds.split(","))
        out = [run_size(int(s), store.vectors, queries, args.seed, kinds) for s in args.sizes.split(",")]
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
