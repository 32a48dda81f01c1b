"""Embedded index vs Qdrant (qdrant-client local mode): search latency, open time and RSS per process.

One store is bulk-loaded (real e5 sentence vectors, cached, as
bench/search_latency.py does) and pushed into a Qdrant local-mode folder through the backend's
own sync. Then, for each backend, a **fresh process** opens the store and reports:

- open: seconds from Django set-up to the first hybrid search's answer (the embedded backend
  loads its vector and BM25 indexes here; on Qdrant the process holds no index);
- RSS (MiB) after the timed searches;
- full-text, semantic and hybrid p50/p95 (ms, natural-language questions, limit 10, through
  the product's search selector).

Local mode is Qdrant's Python re-implementation, in the process, so its latency and RSS are not
a Qdrant server's: on a server the process would hold only Django, the model and a client. No
Qdrant server can be installed on these machines (docs/deployment.md).

Usage (from the repository root)::

    .venv/bin/python bench/backends.py --size 10000
    .venv/bin/python bench/backends.py --size 10000 --database-url postgres://postgres@127.0.0.1:5432/postgres

No assertions about timings.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO_ROOT), str(REPO_ROOT / "bench")]

import search_latency as lat  # noqa: E402 - bulk loading, Django set-up and machine facts are shared
from machine import load_average  # noqa: E402

MODES = ("fulltext", "semantic", "hybrid")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=10000, help="memories in the store; default 10000")
    parser.add_argument("--namespaces", type=int, default=1)
    parser.add_argument("--questions", type=int, default=100, help="timed searches per mode; default 100")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--sentences", type=int, default=3000)
    parser.add_argument("--database-url", default=None, help="postgres://… (default: SQLite in a temp dir)")
    parser.add_argument("--measure", default=None, help=argparse.SUPPRESS)  # the child: a JSON job
    return parser.parse_args()


def write_config(home: Path, backend: str) -> Path:
    config = {"deduplication": {"enabled": True}, "data_dir": str(home), "vector_index": backend,
              "qdrant": {"mode": "embedded", "embedded_path": str(home / "qdrant")}}
    path = home / f"config-{backend}.json"
    path.write_text(json.dumps(config))
    return path


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure(job: dict) -> dict:
    """In a fresh process: open the store on one backend, time the searches, report RSS."""
    started = time.perf_counter()
    os.environ["BHGBRAIN_CONFIG"] = job["config"]
    os.environ["DJANGO_SETTINGS_MODULE"] = "bhgbrain_site.settings"
    os.environ["BHGBRAIN_DEVICE_ID"] = lat.ACTOR
    import django

    django.setup()
    lat.search_call(job["questions"][0], job["namespaces"][0], "hybrid")
    opened = time.perf_counter() - started
    from search.bm25.text_index import text_index_loaded

    result = {"open_s": opened, "text_index_loaded": text_index_loaded()}
    for mode in MODES:
        result[mode] = lat.time_searches(mode, job["questions"], job["namespaces"]).summary()
    result["rss_mib"] = rss_mib()
    return result


def fill_qdrant(home: Path) -> tuple[int, float]:
    """Push the store into the Qdrant folder through the backend's sync, in a child process."""
    code = ("import os, sys, time, json; os.environ['DJANGO_SETTINGS_MODULE']='bhgbrain_site.settings';"
            "import django, uuid; django.setup();"
            "from memories.models import ChangeFeedEntry;"
            # bulk_load writes no feed rows: one RESET makes the sync push every live memory
            "ChangeFeedEntry.objects.create(memory_id=uuid.UUID(int=0), op=ChangeFeedEntry.Op.RESET);"
            "from memories.indexes.embedded import get_vector_index; i=get_vector_index(); t=time.perf_counter(); i.sync();"
            "c=i.client(); n=sum(c.count(x, exact=True).count for x in i.collections(fresh=True));"
            "print(json.dumps([n, time.perf_counter()-t]))")
    env = {**os.environ, "BHGBRAIN_CONFIG": str(home / "config-qdrant.json")}
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    points, seconds = json.loads(out.stdout.strip().splitlines()[-1])
    return points, seconds


def run_size(size: int, args: argparse.Namespace, db_url: str | None) -> None:
    home = Path(tempfile.mkdtemp(prefix="bhgbrain-backends-"))
    try:
        embedded_config = write_config(home, "embedded")
        write_config(home, "qdrant")
        (home / "config.json").write_text(embedded_config.read_text())
        lat.setup_django(home, db_url)  # migrates; writes its own config.json, data_dir = home
        print(f"machine: {lat.machine_info()}")
        embedder, _ = lat.load_model()
        rng = random.Random(args.seed)
        sentences = lat.make_sentences(args.sentences, rng)
        vectors = lat.sentence_vectors(sentences, args.seed, embedder).vectors
        namespaces = lat.namespaces_for(size, args.namespaces)
        lat.bulk_load(size, namespaces, sentences, vectors, embedder, args.seed)
        from django.db import connections

        connections.close_all()
        points, push_s = fill_qdrant(home)
        questions = lat.make_questions(args.questions, random.Random(args.seed + 7))
        print(f"Store of {size} memories ({lat.database_description()}); Qdrant local mode: {points} points pushed "
              f"in {push_s:.0f} s")
        print(f"  {'backend':<22}{'open s':>8}{'RSS MiB':>9}  " + "".join(f"{m + ' p50/p95':>20}" for m in MODES)
              + "  text index in process; load")
        for backend in ("embedded", "qdrant"):
            job = {"config": str(home / f"config-{backend}.json"), "questions": questions, "namespaces": namespaces}
            out = subprocess.run([sys.executable, __file__, "--measure", json.dumps(job)], cwd=REPO_ROOT,
                                 capture_output=True, text=True, check=True, env={**os.environ})
            r = json.loads(out.stdout.strip().splitlines()[-1])
            cells = "".join(f"{r[m]['p50_ms']:>11.1f} /{r[m]['p95_ms']:>7.1f}" for m in MODES)
            label = backend if backend == "embedded" else "qdrant (local mode)"
            print(f"  {label:<22}{r['open_s']:>8.2f}{r['rss_mib']:>9.0f}  {cells}  {r['text_index_loaded']}; "
                  f"{load_average()}")
        print()
    finally:
        shutil.rmtree(home, ignore_errors=True)


def main() -> int:
    args = parse_args()
    if args.measure:
        print(json.dumps(measure(json.loads(args.measure))))
        return 0
    with lat.database_url(args.database_url) as db_url:
        run_size(args.size, args, db_url)
    return 0


if __name__ == "__main__":
    sys.exit(main())
