"""The in-process BM25 index (search/bm25/text_index.py) at scale, without a database.

Fills a ``TextIndex`` directly with the contents ``bench/search_latency.py`` stores (1-3 of
its generated sentences per memory, analysed by the product's analyzer; a third are thread
messages with a context, as there) and times ``search`` with its 200 questions, after an
untimed warm-up. Checks the results against a plain reference scorer (every posting of every
query term scored, no pruning): the same ids with the same scores. Prints p50/p95/p99/mean,
queries/s, and how many postings the queries' terms hold.

    .venv/bin/python bench/text_index_scale.py --sizes 100000,1000000 [--scorer both|numpy|compiled] [--json PATH]

No timing assertions; the numbers depend on the machine (printed with the load average).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO_ROOT), str(REPO_ROOT / "bench")]
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bhgbrain_site.settings")

import bhgbrain_site  # noqa: E402,F401 - one BLAS thread, as the server

# isort: split
import numpy as np  # noqa: E402

from search.bm25.compiled import MIN_POSTINGS as DEFAULT_MIN_POSTINGS  # noqa: E402


def _percentile(values: list[float], pct: int) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(pct / 100 * len(ordered)) - 1)]


def reference(index, terms: list[str], namespace: str, now: float, limit: int) -> list[tuple[str, float]]:  # noqa: ANN001
    """Every posting scored: what the index's answer must equal."""
    columns = index.columns(namespace)
    in_ns = columns["alive"] & columns["in_namespace"]
    n_docs = int(in_ns.sum())
    dl = columns["dl"]
    avgdl = max(float(dl[in_ns].astype(np.float64).mean()), 1.0)
    eligible = in_ns & (columns["live"] > now)
    scores = np.zeros(index.row_count(), dtype=np.float64)
    for term in dict.fromkeys(terms):
        posting = index.posting(term)
        if posting is None:
            continue
        rows = np.asarray(posting[0], dtype=np.int32)
        tfs = np.asarray(posting[1], dtype=np.float64)
        df = int(in_ns[rows].sum())
        if df == 0:
            continue
        keep = eligible[rows]
        rows, tfs = rows[keep], tfs[keep]
        idf = math.log(1 + (n_docs - df + 0.5) / (df + 0.5))
        norm = index.k1 * (1 - index.b + index.b * dl[rows] / avgdl)
        scores[rows] += idf * tfs * (index.k1 + 1) / (tfs + norm)
    hits = np.flatnonzero(scores > 0)
    best = hits[np.lexsort((hits, -scores[hits]))][:limit]
    return [(index.memory_id(int(i)) or "", float(scores[i])) for i in best]


def build(size: int, seed: int):  # noqa: ANN201
    import search_latency as sl

    from memories.analyzer import analyze
    from memories.indexes.sparse import CONTEXT_WEIGHT, K1, TAG_WEIGHT, B
    from search.bm25.text_index import TextIndex

    rng = random.Random(seed)
    sentences = [" ".join(analyze(text)) for text in sl.make_sentences(3000, rng)]
    index = TextIndex(K1, B, TAG_WEIGHT, CONTEXT_WEIGHT)
    started = time.perf_counter()
    for i, combo in enumerate(sl.memory_combinations(size, len(sentences), rng)):
        content = " ".join(sentences[k] for k in combo)
        context = sentences[(combo[0] + 1) % len(sentences)] if i % 3 == 0 else ""
        index.add_row(f"m{i}", content, namespace="global", context=context)
    index.mark_loaded()
    return index, sl.make_questions(200, random.Random(seed + 1)), time.perf_counter() - started


def run_size(size: int, seed: int, limit: int, scorer: str) -> dict[str, object]:
    from datetime import UTC, datetime

    from memories.analyzer import analyze_query
    from search.bm25 import compiled

    index, questions, load_s = build(size, seed)
    now = datetime.now(UTC)
    queries = [analyze_query(q) for q in questions]
    if scorer == "numpy":
        compiled.MIN_POSTINGS = 1 << 62  # never the kernels
    else:  # the product's choice: the kernels for queries of MIN_POSTINGS postings or more
        compiled.MIN_POSTINGS = DEFAULT_MIN_POSTINGS
        if compiled.load_now() is None:
            raise SystemExit("the compiled scorer is unavailable (is numba installed?)")
    for terms in queries[:20]:
        index.score(terms, namespace="global", collection=None, now=now, limit=limit)
    timings, same, postings = [], 0, []
    for terms in queries:
        started = time.perf_counter()
        got = index.score(terms, namespace="global", collection=None, now=now, limit=limit)
        timings.append((time.perf_counter() - started) * 1000)
        want = reference(index, terms, "global", now.timestamp(), limit)
        same += len(got) == len(want) and all(  # the same scores: rows tied at one score may swap
            math.isclose(a, b, rel_tol=1e-4) for (_, a), (_, b) in zip(got, want, strict=True))
        postings.append(sum(len(p[0]) for t in dict.fromkeys(terms) if (p := index.posting(t)) is not None))
    return {
        "size": size, "scorer": scorer, "load_s": round(load_s, 1), "queries": len(queries),
        "p50_ms": round(_percentile(timings, 50), 2), "p95_ms": round(_percentile(timings, 95), 2),
        "p99_ms": round(_percentile(timings, 99), 2), "mean_ms": round(statistics.fmean(timings), 2),
        "per_s": round(1000 / statistics.fmean(timings), 1), "same_as_reference": same,
        "postings_p50": int(_percentile(postings, 50)), "postings_p95": int(_percentile(postings, 95)),
        "load_average": os.getloadavg(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="100000", help="comma-separated store sizes; default 100000")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--limit", type=int, default=10)
    parser.add_argument("--scorer", choices=("both", "numpy", "compiled"), default="both",
                        help="numpy's MaxScore, the compiled scorer as the product uses it (search/bm25/compiled.py), "
                        "or both in turn on the same index; default both")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    import django

    django.setup()
    results = []
    scorers = ("numpy", "compiled") if args.scorer == "both" else (args.scorer,)
    for size, scorer in ((int(s), scorer) for s in args.sizes.split(",") for scorer in scorers):
        result = run_size(size, args.seed, args.limit, scorer)
        results.append(result)
        print(f"{size:>9,} rows, {scorer:>8}: p50 {result['p50_ms']} ms, p95 {result['p95_ms']} ms, p99 {result['p99_ms']} ms, "
              f"{result['per_s']}/s; identical to the reference {result['same_as_reference']}/{result['queries']}; "
              f"postings per query p50 {result['postings_p50']:,}, p95 {result['postings_p95']:,}; "
              f"built in {result['load_s']} s; load {result['load_average'][0]:.2f}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
