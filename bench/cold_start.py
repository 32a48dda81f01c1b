"""The first searches of a new process on an existing store (run by bench/search_latency.py).

A new process (an MCP stdio session is one per client) sets up Django against the store named by
the environment (``BHGBRAIN_CONFIG``, ``DATABASE_URL``, ``DJANGO_SETTINGS_MODULE``), loads the
embedding model (timed apart: it costs the same with or without an index snapshot), then times
its first full-text, semantic and hybrid search, in that order (the first to need an index opens
it: from its snapshot, or from the database with ``--no-snapshots``), each with the time of its
steps (query embedding, vector search, FTS query, row loading). Without a snapshot, on a large store,
an index is rebuilt in the background and those first searches are answered around it
(``first_search_degraded`` says how): they are the "search during a from-scratch rebuild"; the
process then waits for the rebuilds and reports each one's rows and seconds (``rebuilds``).
Prints one JSON object::

    .venv/bin/python bench/cold_start.py --namespace NS --question "..." [--no-snapshots] [--serve N]

With ``--serve N`` it then goes on like a serving process (N more searches after the full-text
statistics primer has finished) and reports the RSS again: where the resident memory settles.

With ``--timed N --seed S`` it then times, like bench/search_latency.py's phases, N questions
per mode after its warm-up ones (the same questions as a ``search_latency.py --seed S`` run, so
a store kept with ``--keep-store`` can be measured again, by another commit or with
``BHGBRAIN_COMPILED_BM25=0``), and adds ``timed``: each mode's p50/p95/p99 and step times, and
``hybrid_fresh``: hybrid searches of N questions no earlier phase asked (each embeds its query;
the hybrid phase's come from the query cache, filled by the semantic phase).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import bhgbrain_site  # noqa: E402,F401 - sets the BLAS thread count before numpy loads, as the server does

# isort: split
from machine import mapped_file_rss_mib, proc_status_mib  # noqa: E402

MODES = ("fulltext", "semantic", "hybrid")
LIMIT = 10


def cold_start(namespace: str, question: str, snapshots: bool, serve: int = 0, timed: int = 0,
               seed: int = 0) -> dict[str, object]:
    started = time.perf_counter()
    import django

    django.setup()
    from django.conf import settings

    settings.BHGBRAIN.index_snapshots = snapshots
    setup_ms = (time.perf_counter() - started) * 1e3

    from memories.embeddings import get_embedder
    from memories.indexes.embedded import get_vector_index
    from search.bm25 import text_index
    from search.selectors import memories_search

    t0 = time.perf_counter()
    embedder = get_embedder()
    assert embedder is not None, "the cold-start bench needs the embedding model"
    embedder.embed_query("warm up the model")
    model_ms = (time.perf_counter() - t0) * 1e3
    from search_latency import recording_steps, search_steps

    from memories.indexes import rebuilds

    first: dict[str, float] = {}
    steps: dict[str, dict[str, float]] = {}  # mode -> step -> ms: where each first search's time went
    degraded: dict[str, list[str]] = {}  # mode -> the indexes its first search went around (being rebuilt)
    with recording_steps(search_steps()) as calls:
        for mode in MODES:
            t0 = time.perf_counter()
            with rebuilds.collecting() as notes:
                memories_search(query=question, namespace=namespace, collection=None, mode=mode, limit=LIMIT)
            first[mode] = (time.perf_counter() - t0) * 1e3
            degraded[mode] = [f"{note['index']}: {note['path']}" for note in notes]
            steps[mode] = {label: round(sum(times), 2) for label, times in calls.items() if times}
            for times in calls.values():
                times.clear()
    rebuilt = _rebuilt()
    vectors, text = get_vector_index(), text_index._index  # noqa: SLF001 - which path each index took
    served = _serve(namespace, serve) if serve else None
    measured = _timed(namespace, timed, seed) if timed else None
    return {
        "first_search_ms": first, "first_search_steps_ms": steps, "first_search_degraded": degraded,
        "rebuilds": rebuilt, "setup_ms": setup_ms, "model_load_ms": model_ms,
        "rss_mib": proc_status_mib("VmRSS"), "rss_anon_mib": proc_status_mib("RssAnon"),
        "rss_files_mib": mapped_file_rss_mib(),  # which snapshot files the first searches touched
        "loaded_from": {"vector": getattr(vectors, "loaded_from", None), "text": getattr(text, "loaded_from", None)},
        "after_serving": served,
        "timed": measured,
    }


def _rebuilt() -> dict[str, object]:
    """Wait for the indexes' background rebuilds from the database (without a snapshot, on a store
    of at least rebuilds.policy.background_min_rows rows, the first searches start them and answer
    around them): each one's rows and seconds, measured from its start of reading (a rebuild queued
    behind the other's waits first), with nothing else running meanwhile."""
    from memories.indexes import rebuilds

    started = time.perf_counter()
    rebuilds.wait()
    return {"waited_s": round(time.perf_counter() - started, 3), "indexes": rebuilds.progress()}


def _serve(namespace: str, count: int) -> dict[str, object]:
    """Go on as a serving process: wait for the full-text statistics primer, then ``count`` more
    searches (new questions, the three modes in turn); the RSS then, as it settles."""
    import random

    from search_latency import make_questions, settle_text_index

    from search.selectors import memories_search

    settle_text_index()  # the statistics primer, then the compiled scorer it loads on a large index
    for i, question in enumerate(make_questions(count, random.Random(7))):
        memories_search(query=question, namespace=namespace, collection=None, mode=MODES[i % 3], limit=LIMIT)
    return {"searches": count, "rss_mib": proc_status_mib("VmRSS"), "rss_anon_mib": proc_status_mib("RssAnon"),
            "rss_files_mib": mapped_file_rss_mib()}


def _timed(namespace: str, count: int, seed: int) -> dict[str, object]:
    """search_latency.py's warm-up and timed questions of ``seed``, each mode in turn."""
    import os
    import random

    from machine import load_average
    from search_latency import (
        WARMUP,
        fresh_questions,
        fulltext_scorer,
        make_questions,
        time_fresh_hybrid,
        time_searches,
        warm_up,
    )

    questions = make_questions(WARMUP + count, random.Random(seed + 1))
    out: dict[str, object] = {"loadavg_start": load_average()}
    for mode in MODES:
        warm_up(mode, questions[:WARMUP], [namespace])
        out[mode] = time_searches(mode, questions[WARMUP:], [namespace]).summary()
    out["hybrid_fresh"] = time_fresh_hybrid(fresh_questions(count, seed + 4, questions), [namespace]).summary()
    out.update(fulltext_scorer=fulltext_scorer(), loadavg_end=load_average(), pid=os.getpid())
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--question", required=True)
    parser.add_argument("--no-snapshots", action="store_true", help="ignore the index snapshots (a rebuild from the DB)")
    parser.add_argument("--serve", type=int, default=0, metavar="N",
                        help="then go on serving: wait for the text statistics primer, run N more searches, "
                        "and report the RSS again (after_serving)")
    parser.add_argument("--timed", type=int, default=0, metavar="N",
                        help="then time N questions per mode after the warm-up ones, as search_latency.py does")
    parser.add_argument("--seed", type=int, default=4321, help="the search_latency.py seed whose questions --timed uses")
    args = parser.parse_args()
    print(json.dumps(cold_start(args.namespace, args.question, not args.no_snapshots, args.serve, args.timed, args.seed)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
