"""Facts over time (issue 42): current, "as of" and history questions on a generated store.

    .venv/bin/python bench/temporal.py                                  # seed 42, 2,000+ facts, both ingest modes
    .venv/bin/python bench/temporal.py --seed 7 --facts 3000 --questions 400
    .venv/bin/python bench/temporal.py --quick                          # a small store (make bench-quick)
    .venv/bin/python bench/temporal.py --latency-size 100000 --baseline 20f6e50   # the overhead at 100k memories
    .venv/bin/python bench/temporal.py --database-url postgres://postgres@127.0.0.1:5432/postgres

The store comes from ``bench/temporal_corpus.py`` (seeded: entities whose attributes change several
times, in several namespaces, English and Chinese, mixed with unrelated notes, some facts arriving
after a newer version). It is ingested twice, in namespaces of their own, through the product's
public in-process operations (``bhgbrain_site.registry.call_tool``: the path MCP and ``POST /tool``
take), in arrival order:

- **keys**: ``remember(content, namespace, key=..., valid_from=...)``: the fact key closes the older version;
- **dedup**: ``remember(content, namespace, valid_from=...)``, no key: only the dedup UPDATE path can
  supersede (``valid_from`` is still given: the true time a fact became true, which "as of" needs);
- **latest** (the ceiling): only the newest version of each chain, with the notes, and only the current
  questions: what hybrid search ranks first when no older version exists. The gap between it and the
  other modes is what the older versions cost; the rest (a question about a person's manager answered
  by their city) is retrieval, not time.

Then asks, through ``call_tool("search", ...)`` (hybrid, limit 10):

- **current**: "Where does Alice live now?" (default search): top-1 must be the newest version;
- **as_of**: ``as_of=<time>`` (random times over the chain's life, some on a version's first instant,
  some bare dates = the end of that day): top-1 must be the version valid then;
- **history**: ``include_history=true``: top-1 the newest version, followed by every older one, newest first.

A result is judged by the memory id each ``remember`` returned (a memory holds the text of the last fact
written into it: ADD, or an UPDATE that replaced it; a NOOP adds nothing), never by the product's
own flags. It also counts superseded versions ranked above their chain's newest version in default
search (an absent newest counts as below), and how many results the product marked ``current``.

Latency: after the questions (``--latency-size`` N bulk-loads unrelated memories into the keys
namespaces until the store holds N, as bench/search_latency.py loads its stores), hybrid search on
the keys namespaces is timed without temporal parameters, with ``as_of`` and with
``include_history``, in a worker process on this checkout, and, with ``--baseline REV``, plain hybrid
in a worker on that revision's code (``git archive``) against the same database: the overhead over
plain hybrid search before the feature. The workers take their questions in interleaved rounds;
every question is asked once untimed first (query embeddings cached: the overhead is the search's).
Each worker reads its own copy of the store (SQLite: ``VACUUM INTO``, made after the load) with the
default settings of the code it runs.

A feature the checkout lacks (``key``, ``valid_from``, ``as_of``, ``include_history``) is reported as
missing and its questions skipped: never guessed. No assertions: numbers only. Writes a JSON
(``--json``, default ``bench/results/temporal-<UTC time>.json``) with every number and the machine.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
RESULTS = BENCH / "results"
for _path in (str(ROOT), str(BENCH)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import temporal_corpus as tc  # noqa: E402
from machine import load_average  # noqa: E402

MODES = ("keys", "dedup", "latest")
KINDS = ("current", "as_of", "history")
LIMIT = 10
ACTOR = "bench-temporal"


# --------------------------------------------------------------------------- the product's surface


def features() -> dict[str, bool]:
    """What this checkout's operations accept (by their input models: nothing is guessed)."""
    from bhgbrain_site.registry import input_model

    remember, search = input_model("remember").model_fields, input_model("search").model_fields
    return {"key": "key" in remember, "valid_from": "valid_from" in remember, "supersedes": "supersedes" in remember,
            "as_of": "as_of" in search, "include_history": "include_history" in search}


def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    from bhgbrain_site.core.calls import CallContext
    from bhgbrain_site.registry import call_tool

    return call_tool(name, arguments, CallContext(actor=ACTOR))


def namespace_of(mode: str, namespace: str) -> str:
    return f"temporal-{mode}/{namespace}"


# --------------------------------------------------------------------------- ingest


@dataclass
class Ingested:
    """What the store holds after one mode's ingest, as the remember answers told it."""

    mode: str
    returned: dict[int, str] = field(default_factory=dict)  # fact id -> memory id its remember returned
    holder: dict[str, int] = field(default_factory=dict)  # memory id -> fact id whose text it holds
    operations: Counter[str] = field(default_factory=Counter)  # facts' ADD / UPDATE / NOOP
    note_operations: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)
    latencies_ms: list[float] = field(default_factory=list)
    seconds: float = 0.0
    absorbed: list[tuple[int, str]] = field(default_factory=list)  # facts answered NOOP: (fact id, memory id)


def ingest(corpus: tc.Corpus, mode: str, feats: dict[str, bool]) -> Ingested:
    from bhgbrain_site.core.errors import DomainError

    out = Ingested(mode)
    facts, notes = {f.fid: f for f in corpus.facts}, {n.nid: n for n in corpus.notes}
    arrival = corpus.arrival
    if mode == "latest":
        newest = {c.facts[-1] for c in corpus.chains}
        arrival = [(what, ident) for what, ident in arrival if what == "note" or ident in newest]
    started = time.perf_counter()
    for done, (what, ident) in enumerate(arrival, 1):
        if what == "note":
            note = notes[ident]
            arguments: dict[str, Any] = {"content": note.text, "namespace": namespace_of(mode, note.namespace)}
        else:
            fact = facts[ident]
            arguments = {"content": fact.text, "namespace": namespace_of(mode, fact.namespace)}
            if feats["valid_from"]:
                arguments["valid_from"] = fact.valid_from.isoformat()
            if mode == "keys" and feats["key"]:
                arguments["key"] = fact.key
        t0 = time.perf_counter()
        try:
            answer = call("remember", arguments)
        except DomainError as exc:
            out.errors[f"{what} {exc.code}"] += 1
            continue
        out.latencies_ms.append((time.perf_counter() - t0) * 1e3)
        operation = answer.get("operation", "?")
        if what == "note":
            out.note_operations[operation] += 1
            continue
        out.operations[operation] += 1
        out.returned[ident] = answer["id"]
        if operation != "NOOP":  # ADD, or an UPDATE: the memory holds this fact's text now
            out.holder[answer["id"]] = ident
        else:
            out.absorbed.append((ident, answer["id"]))
        if done % 500 == 0:
            rate = done / (time.perf_counter() - started)
            sys.stderr.write(f"\r  {mode}: {done}/{len(arrival)} remembered ({rate:.1f}/s)")
    out.seconds = time.perf_counter() - started
    sys.stderr.write(f"\r  {mode}: {len(arrival)} remembered in {out.seconds:.0f} s\n")
    return out


# --------------------------------------------------------------------------- questions and scoring


@dataclass
class Tally:
    asked: int = 0
    top1: int = 0
    first_of_chain: int = 0  # the first result of the asked chain is the expected version (time, not retrieval)
    chain_found: int = 0  # some version of the asked chain is in the results
    chain_exact: int = 0  # history: top-1 then every older version, newest first
    empty: int = 0
    content_mismatch: int = 0  # top-1's content does not hold the text its id stands for (diagnostic)
    errors: Counter[str] = field(default_factory=Counter)
    boundary: list[int] = field(default_factory=lambda: [0, 0])  # as_of on a version's first instant: [asked, right]
    bare_date: list[int] = field(default_factory=lambda: [0, 0])
    by_lang: dict[str, list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0]))
    by_attribute: dict[str, list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0]))
    failures: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Ranking:
    """Default search (the current questions): superseded versions against their chain's newest."""

    results: int = 0
    stale_results: int = 0  # ground truth: an older version of its chain
    stale_above_newest: int = 0  # ranked above its chain's newest version (or the newest absent)
    stale_above_newest_asked: int = 0  # the same, for the chain the question asked about
    marked_not_current: int = 0  # results the product marked current=false
    stale_marked: int = 0  # stale results the product marked current=false


def _same_text(content: str, text: str) -> bool:
    return " ".join(content.split()).casefold() == " ".join(text.split()).casefold()


def ask(corpus: tc.Corpus, store: Ingested, feats: dict[str, bool], kinds: Sequence[str]) -> dict[str, Any]:
    from bhgbrain_site.core.errors import DomainError

    facts = {f.fid: f for f in corpus.facts}
    chains = {c.cid: c for c in corpus.chains}
    chain_of = {f.fid: f.chain for f in corpus.facts}
    newest_memory = {c.cid: store.returned.get(c.facts[-1]) for c in corpus.chains}
    tallies = {kind: Tally() for kind in kinds}
    ranking = Ranking()
    latencies: dict[str, list[float]] = {kind: [] for kind in kinds}
    for question in corpus.questions:
        if question.kind not in tallies:
            continue
        tally = tallies[question.kind]
        arguments: dict[str, Any] = {"query": question.text, "namespace": namespace_of(store.mode, question.namespace),
                                     "mode": "hybrid", "limit": LIMIT}
        if question.kind == "as_of":
            arguments["as_of"] = question.as_of
        if question.kind == "history":
            arguments["include_history"] = True
        t0 = time.perf_counter()
        try:
            results = call("search", arguments)["results"]
        except DomainError as exc:
            tally.errors[exc.code] += 1
            continue
        latencies[question.kind].append((time.perf_counter() - t0) * 1e3)
        tally.asked += 1
        held = [store.holder.get(item["id"]) for item in results]
        top = held[0] if held else None
        right = top is not None and top == question.expected
        if not results:
            tally.empty += 1
        elif top is not None and not _same_text(results[0]["content"], facts[top].text):
            tally.content_mismatch += 1
        tally.top1 += right
        own = [fid for fid in held if fid is not None and chain_of[fid] == question.chain]
        tally.chain_found += bool(own)
        tally.first_of_chain += bool(own) and own[0] == question.expected
        lang = chains[question.chain].lang
        tally.by_lang[lang][0] += 1
        tally.by_lang[lang][1] += right
        attribute = chains[question.chain].attribute
        tally.by_attribute[attribute][0] += 1
        tally.by_attribute[attribute][1] += right
        if question.kind == "as_of":
            for flag, bucket in ((question.boundary, tally.boundary), (question.bare_date, tally.bare_date)):
                if flag:
                    bucket[0] += 1
                    bucket[1] += right
        if question.kind == "history":
            run = []
            for fid in held:
                if fid is None or chain_of[fid] != question.chain:
                    break
                run.append(fid)
            tally.chain_exact += tuple(run) == question.chain_newest_first
        if question.kind == "current":
            _rank(results, held, question, chain_of, chains, newest_memory, ranking)
        if not right and len(tally.failures) < 40:
            tally.failures.append({"question": question.text, "as_of": question.as_of,
                                   "expected": facts[question.expected].text if question.expected is not None else None,
                                   "got": results[0]["content"] if results else None})
    return {"tallies": tallies, "ranking": ranking, "latencies": latencies}


def _rank(results: list[dict[str, Any]], held: list[int | None], question: tc.Question, chain_of: dict[int, int],
          chains: dict[int, tc.Chain], newest_memory: dict[int, str | None], ranking: Ranking) -> None:
    position = {item["id"]: i for i, item in enumerate(results)}
    for i, (item, fid) in enumerate(zip(results, held, strict=True)):
        ranking.results += 1
        marked = item.get("current") is False
        ranking.marked_not_current += marked
        if fid is None:
            continue
        chain = chains[chain_of[fid]]
        newest = newest_memory[chain.cid]
        if fid == chain.facts[-1] or item["id"] == newest:
            continue
        ranking.stale_results += 1
        ranking.stale_marked += marked
        if position.get(newest, len(results)) > i:
            ranking.stale_above_newest += 1
            ranking.stale_above_newest_asked += chain.cid == question.chain


# --------------------------------------------------------------------------- latency workers


def _percentile(values: Sequence[float], pct: int) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[pct - 1]


def serve(code_root: str) -> None:
    """A latency worker: this process imports the product from ``code_root``; reads one JSON request
    a line ({"query", "namespace", "extra"}) and answers {"ms", "n"} (or {"error"})."""
    sys.path.insert(0, code_root)
    os.environ["DJANGO_SETTINGS_MODULE"] = "bhgbrain_site.settings"
    import django

    django.setup()
    import memories
    from bhgbrain_site.core.calls import CallContext
    from bhgbrain_site.registry import call_tool

    context = CallContext(actor=ACTOR)
    print(json.dumps({"ready": True, "product": str(Path(memories.__file__).resolve().parent.parent)}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        arguments = {"query": request["query"], "namespace": request["namespace"], "mode": "hybrid", "limit": LIMIT,
                     **request.get("extra", {})}
        t0 = time.perf_counter_ns()
        try:
            found = len(call_tool("search", arguments, context)["results"])
        except Exception as exc:  # noqa: BLE001 - reported to the parent, which counts it
            print(json.dumps({"error": f"{type(exc).__name__}: {exc}"[:300]}), flush=True)
            continue
        print(json.dumps({"ms": (time.perf_counter_ns() - t0) / 1e6, "n": found}), flush=True)


def worker_config(name: str, scratch: Path) -> Path:
    """A config of the worker's own (the default settings of the code it runs: a revision may not know
    a newer one's keys) on a copy of the store made now (SQLite: ``VACUUM INTO``, the same fresh page
    layout for every worker; PostgreSQL: the same database), with its own index snapshots."""
    from django.db import connection

    folder = scratch / f"{name}-data"
    folder.mkdir()
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute("VACUUM INTO %s", [str(folder / "bhgbrain.sqlite3")])
    config = folder / "config.json"
    config.write_text(json.dumps({"data_dir": str(folder), "deduplication": {"enabled": True}}))
    return config


class Worker:
    def __init__(self, code_root: Path, config: Path) -> None:
        self.process = subprocess.Popen(  # noqa: S603 - our own interpreter and script
            [sys.executable, str(Path(__file__).resolve()), "--serve", str(code_root)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env={**os.environ, "BHGBRAIN_CONFIG": str(config)})
        hello = json.loads(self._line())
        self.product = hello["product"]

    def _line(self) -> str:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError("a latency worker died (see its stderr above)")
        return line

    def ask(self, query: str, namespace: str, extra: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"query": query, "namespace": namespace, "extra": extra}) + "\n")
        self.process.stdin.flush()
        return json.loads(self._line())

    def close(self) -> None:
        if self.process.stdin:
            self.process.stdin.close()
        self.process.wait(timeout=60)


def baseline_tree(revision: str, into: Path) -> Path:
    """The code of ``revision`` (``git archive``), to run the same searches before the feature."""
    archive = subprocess.run(["git", "archive", revision], cwd=ROOT, capture_output=True, check=True).stdout  # noqa: S607
    into.mkdir(parents=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)  # noqa: S607
    return into


def fill(size: int, corpus: tc.Corpus, seed: int) -> dict[str, Any]:
    """Bulk-load unrelated memories into the keys namespaces until the store holds ``size`` (as
    bench/search_latency.py loads its stores: cached sentence vectors, rows and full-text index)."""
    import search_latency as lat

    from memories.models import Memory

    have = Memory.objects.filter(archived=False).count()
    if size <= have:
        return {"bulk_loaded": 0, "live": have}
    embedder, _ = lat.load_model()
    sentences = lat.make_sentences(3000, random.Random(lat.parse_args([]).seed))
    vectors = lat.sentence_vectors(sentences, lat.parse_args([]).seed, embedder).vectors
    namespaces = [namespace_of("keys", ns) for ns in corpus.namespaces]
    build_rows = lat.row_builder
    rng = random.Random(seed + 29)
    span = (tc.START.timestamp(), tc.END.timestamp())

    def dated_rows(*args: Any) -> Any:  # every insert writes valid_from: spread over the corpus's years
        build = build_rows(*args)

        def build_dated(*row_args: Any) -> Any:
            row = build(*row_args)
            row.valid_from = datetime.fromtimestamp(rng.uniform(*span), tz=UTC)
            return row

        return build_dated

    lat.row_builder = dated_rows
    try:
        seconds = lat.bulk_load(size - have, namespaces, sentences, vectors, embedder, seed)
    finally:
        lat.row_builder = build_rows
    missing = Memory.objects.filter(valid_from__isnull=True).count()
    return {"bulk_loaded": size - have, "bulk_seconds": round(seconds, 1), "live": Memory.objects.filter(archived=False).count(),
            "rows_without_valid_from": missing}


def latency(corpus: tc.Corpus, args: argparse.Namespace, feats: dict[str, bool], scratch: Path) -> dict[str, Any]:
    rng = random.Random(args.seed + 17)
    asked = [q for q in corpus.questions if q.kind == "current"]
    questions = [(q.text, namespace_of("keys", q.namespace)) for q in rng.sample(asked, min(args.latency_queries, len(asked)))]
    times = [q.as_of for q in corpus.questions if q.kind == "as_of"] or [None]
    variants: list[tuple[str, str, dict[str, Any]]] = [("head", "hybrid", {})]
    if feats["as_of"]:
        variants.append(("head", "hybrid as_of", {"as_of": "@"}))
    if feats["include_history"]:
        variants.append(("head", "hybrid include_history", {"include_history": True}))
    workers = {"head": Worker(ROOT, worker_config("head", scratch))}
    if args.baseline:
        tree = baseline_tree(args.baseline, scratch / f"baseline-{args.baseline}")
        workers["baseline"] = Worker(tree, worker_config("baseline", scratch))
        variants.insert(0, ("baseline", f"hybrid at {args.baseline}", {}))
    try:
        def arguments(extra: dict[str, Any], i: int) -> dict[str, Any]:
            return {k: (times[i % len(times)] if v == "@" else v) for k, v in extra.items()}

        for name, _label, extra in variants:  # every question once, untimed: the query embeddings are cached
            for i, (text, namespace) in enumerate(questions):
                workers[name].ask(text, namespace, arguments(extra, i))
        cells: dict[str, list[float]] = {label: [] for _, label, _ in variants}
        errors: Counter[str] = Counter()
        load_before = load_average()
        blocks = [questions[i:i + 25] for i in range(0, len(questions), 25)]
        for round_ in range(args.rounds):
            for b, block in enumerate(blocks):
                order = variants[(round_ + b) % len(variants):] + variants[:(round_ + b) % len(variants)]
                for name, label, extra in order:
                    for i, (text, namespace) in enumerate(block):
                        answer = workers[name].ask(text, namespace, arguments(extra, b * 25 + i))
                        if "error" in answer:
                            errors[f"{label}: {answer['error']}"] += 1
                        else:
                            cells[label].append(answer["ms"])
        products = {name: worker.product for name, worker in workers.items()}
    finally:
        for worker in workers.values():
            worker.close()
    table = {label: {"calls": len(v), "p50_ms": _percentile(v, 50), "p95_ms": _percentile(v, 95),
                     "mean_ms": statistics.fmean(v) if v else None} for label, v in cells.items()}
    reference = next(iter(table))
    for row in table.values():
        for p in ("p50_ms", "p95_ms"):
            base, value = table[reference][p], row[p]
            row[p.replace("_ms", "_overhead_pct")] = (
                round(100 * (value - base) / base, 1) if base and value is not None else None)
    return {"questions": len(questions), "rounds": args.rounds, "reference": reference, "cells": table,
            "errors": dict(errors), "load_before": load_before, "load_after": load_average(), "code": products}


# --------------------------------------------------------------------------- report


def summarise(corpus: tc.Corpus, store: Ingested, asked: dict[str, Any]) -> dict[str, Any]:
    facts = {f.fid: f for f in corpus.facts}
    absorbed = [{"fact": facts[fid].text, "key": facts[fid].key if store.mode == "keys" else None,
                 "into": facts[store.holder[memory]].text if memory in store.holder else None}
                for fid, memory in store.absorbed]
    kinds = {}
    for kind, tally in asked["tallies"].items():
        lat = asked["latencies"][kind]
        kinds[kind] = {
            "asked": tally.asked, "top1": tally.top1, "top1_accuracy": round(tally.top1 / tally.asked, 4) if tally.asked else None,
            "chain_found": tally.chain_found, "first_of_chain": tally.first_of_chain,
            "first_of_chain_accuracy": round(tally.first_of_chain / tally.chain_found, 4) if tally.chain_found else None,
            "empty": tally.empty, "content_mismatch": tally.content_mismatch, "errors": dict(tally.errors),
            "by_language": {lang: {"asked": n, "top1_accuracy": round(r / n, 4) if n else None}
                            for lang, (n, r) in sorted(tally.by_lang.items())},
            "by_attribute": {name: {"asked": n, "top1_accuracy": round(r / n, 4) if n else None}
                             for name, (n, r) in sorted(tally.by_attribute.items())},
            "search_p50_ms": _percentile(lat, 50), "search_p95_ms": _percentile(lat, 95), "failures": tally.failures,
        }
        if kind == "history":
            kinds[kind]["chain_exact"] = tally.chain_exact
            kinds[kind]["chain_exact_accuracy"] = round(tally.chain_exact / tally.asked, 4) if tally.asked else None
        if kind == "as_of":
            kinds[kind]["boundary"] = {"asked": tally.boundary[0], "top1": tally.boundary[1]}
            kinds[kind]["bare_date"] = {"asked": tally.bare_date[0], "top1": tally.bare_date[1]}
    return {
        "ingest": {"seconds": round(store.seconds, 1), "fact_operations": dict(store.operations),
                   "note_operations": dict(store.note_operations), "errors": dict(store.errors),
                   "remember_p50_ms": _percentile(store.latencies_ms, 50), "remember_p95_ms": _percentile(store.latencies_ms, 95),
                   "facts_with_own_memory": len(store.holder), "facts_answered_noop": absorbed},
        "kinds": kinds, "default_search_ranking": vars(asked["ranking"]),
    }


def _fmt(value: Any, spec: str = ".3f") -> str:
    return "—" if value is None else format(value, spec)


def print_report(result: dict[str, Any]) -> None:
    print(f"\n== bench/temporal.py  seed {result['corpus']['seed']}  digest {result['corpus']['digest']}  "
          f"commit {result['machine']['product']}")
    print(f"machine: {result['machine']['cpu']}, {result['machine']['nproc']}, python_loop_3m_ms "
          f"{result['machine']['python_loop_3m_ms']}, python {result['machine']['python']}, {result['machine']['database']}")
    c = result["corpus"]
    print(f"corpus: {c['facts']} facts in {c['chains']} chains ({c['chinese_chains']} Chinese), {c['notes']} notes, "
          f"{len(c['namespaces'])} namespaces, {c['late_facts']} facts arriving late; load average {result['load_start']} "
          f"at start, {result['load_end']} at the end")
    print(f"features: {', '.join(k for k, v in result['features'].items() if v) or 'none'}; "
          f"missing: {', '.join(k for k, v in result['features'].items() if not v) or 'none'}")
    print("\n| mode | current top-1 | as_of top-1 | history top-1 | history chain exact | stale above newest "
          "(asked chain) | stale results | marked not current | remember ops |")
    print("|---|---|---|---|---|---|---|---|---|")
    for mode, row in result["modes"].items():
        k, r = row["kinds"], row["default_search_ranking"]

        def acc(kind: str, metric: str = "top1_accuracy", k: dict[str, Any] = k) -> str:
            cell = k.get(kind)
            if cell is None:
                return "not run"
            return f"{_fmt(cell[metric])} ({cell['asked']})" if cell["asked"] else f"— (errors {cell['errors']})"

        ops = " ".join(f"{op} {n}" for op, n in sorted(row["ingest"]["fact_operations"].items()))
        print(f"| {mode} | {acc('current')} | {acc('as_of')} | {acc('history')} | {acc('history', 'chain_exact_accuracy')} "
              f"| {r['stale_above_newest']} ({r['stale_above_newest_asked']}) | {r['stale_results']} of {r['results']} "
              f"| {r['marked_not_current']} | {ops} |")
    for mode, row in result["modes"].items():
        for kind, cell in row["kinds"].items():
            extra = ""
            if kind == "as_of":
                extra = (f"; on a version's first instant {cell['boundary']['top1']}/{cell['boundary']['asked']}, "
                         f"bare dates {cell['bare_date']['top1']}/{cell['bare_date']['asked']}")
            langs = ", ".join(f"{lang} {_fmt(v['top1_accuracy'])} ({v['asked']})" for lang, v in cell["by_language"].items())
            print(f"  {mode:6} {kind:8} right version among the asked chain's results {_fmt(cell['first_of_chain_accuracy'])} "
                  f"(chain in the top {LIMIT}: {cell['chain_found']}/{cell['asked']}); {langs}")
            print(f"  {'':6} {kind:8} empty {cell['empty']}, content mismatch {cell['content_mismatch']}, "
                  f"errors {cell['errors'] or 0}; search p50 {_fmt(cell['search_p50_ms'], '.1f')} ms{extra}")
    lat = result.get("latency")
    if lat:
        print(f"\nlatency on {lat['live']} live memories ({lat['bulk_loaded']} bulk-loaded), {lat['questions']} questions x "
              f"{lat['rounds']} rounds, query embeddings cached; load average {lat['load_before']} -> {lat['load_after']}")
        print("| search | calls | p50 ms | p95 ms | p50 overhead | p95 overhead |")
        print("|---|---|---|---|---|---|")
        for label, row in lat["cells"].items():
            print(f"| {label} | {row['calls']} | {_fmt(row['p50_ms'], '.2f')} | {_fmt(row['p95_ms'], '.2f')} "
                  f"| {_fmt(row['p50_overhead_pct'], '+.1f')} % | {_fmt(row['p95_overhead_pct'], '+.1f')} % |")
        if lat["errors"]:
            print(f"latency errors: {lat['errors']}")
        print(f"code: {lat['code']}")


# --------------------------------------------------------------------------- main


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Facts over time: current / as-of / history top-1 (see bench/README.md).")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--facts", type=int, default=2000, help="facts at least (chains are whole); default 2000")
    parser.add_argument("--notes", type=int, default=800, help="unrelated memories; default 800")
    parser.add_argument("--namespaces", type=int, default=4)
    parser.add_argument("--questions", type=int, default=300, help="questions of each kind; default 300")
    parser.add_argument("--modes", type=_modes, default=",".join(MODES),
                        help=f"ingest modes, comma-separated, of {', '.join(MODES)}; default all")
    parser.add_argument("--quick", action="store_true", help="a small store: 300 facts, 100 notes, 60 questions a kind")
    parser.add_argument("--latency-size", type=int, default=0,
                        help="bulk-load unrelated memories until the store holds N, then time the searches (0: "
                        "time on the store as it is)")
    parser.add_argument("--latency-queries", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-latency", action="store_true")
    parser.add_argument("--baseline", default=None, metavar="REV",
                        help="also time plain hybrid search with this revision's code on the same database")
    parser.add_argument("--database-url", default=None, help="postgres://...: a bhgbrain_lat_<pid> database is made and dropped")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--serve", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.facts, args.notes, args.questions, args.namespaces = 300, 100, 60, 3
        args.latency_queries = min(args.latency_queries, 50)
    return args


def run(args: argparse.Namespace) -> dict[str, Any]:
    import search_latency as lat

    started = datetime.now(UTC)
    load_start = load_average()
    corpus = tc.generate(args.seed, facts=args.facts, notes=args.notes, namespaces=args.namespaces,
                         questions=args.questions)
    home = Path(tempfile.mkdtemp(prefix="bhgbrain-temporal-"))
    try:
        with lat.database_url(args.database_url) as db_url:
            lat.setup_django(home, db_url)
            lat.load_model()
            feats = features()
            result: dict[str, Any] = {"started": started.isoformat(timespec="seconds"), "load_start": load_start,
                                      "args": {k: v for k, v in vars(args).items() if k not in ("json", "serve")},
                                      "corpus": tc.describe(corpus), "features": feats, "machine": lat.machine_info(),
                                      "modes": {}}
            kinds = [k for k in KINDS if k == "current" or (k == "as_of" and feats["as_of"])
                     or (k == "history" and feats["include_history"])]
            for mode in args.modes.split(","):
                store = ingest(corpus, mode, feats)
                asked = ask(corpus, store, feats, ["current"] if mode == "latest" else kinds)
                result["modes"][mode] = summarise(corpus, store, asked)
                result["modes"][mode]["ingest"]["load_after"] = load_average()
            if not args.no_latency and "keys" in args.modes.split(","):
                filled = fill(args.latency_size, corpus, args.seed)
                from memories.models import Memory

                result["latency"] = {**latency(corpus, args, feats, home), **filled,
                                     "live": Memory.objects.filter(archived=False).count()}
            from django.db import connections

            from memories.access import tracker

            tracker.flush()  # now, while the store exists: at exit it would write into a removed directory
            connections.close_all()
    finally:
        shutil.rmtree(home, ignore_errors=True)
    result["load_end"] = load_average()
    result["seconds"] = round((datetime.now(UTC) - started).total_seconds())
    return result


def _modes(value: str) -> str:
    """``--modes``: a comma-separated list of known ingest modes (an unknown one is an error, not a run)."""
    unknown = [mode for mode in value.split(",") if mode not in MODES]
    if unknown or not value:
        raise argparse.ArgumentTypeError(f"unknown mode(s) {', '.join(unknown) or '(none)'}; known: {', '.join(MODES)}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.serve:
        serve(args.serve)
        return 0
    result = run(args)
    print_report(result)
    out = args.json or RESULTS / f"temporal-{datetime.now(UTC):%Y%m%dT%H%M%S}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, ensure_ascii=False, default=str) + "\n")
    print(f"\nwritten: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
