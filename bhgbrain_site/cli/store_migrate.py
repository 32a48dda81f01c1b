"""``bhgbrain store migrate``: move this store into PostgreSQL (and optionally Qdrant).

Two processes. This one (the CLI, on the configured store: the *source*) picks a sample of
searches and runs them here, then starts a child whose own store is the *target*: the child's
config is this one with ``vector_index``/``qdrant`` as asked, its ``DATABASE_URL`` the target,
and the source attached as a second database alias. The child migrates the target's schema,
copies the store through the write funnel (retention.store_copy: resumable, no re-embedding),
verifies counts and checksums table by table, runs the same searches on the target and compares
the result ids; its report comes back here as JSON. Whatever the product does on the target —
the full-text rows of that engine, the Qdrant points — is done by the product's own code,
running on the target as a server would.

The searches go through ``search.selectors.memories_search`` (the ranking the search tool uses)
rather than the search operation, which would count every result as an access and so change
both stores. A CLI-only command, not an operation over MCP or REST: it reads and writes
databases and folders named on the server's command line, and runs for minutes.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

SEARCH_MODES = ("fulltext", "semantic", "hybrid")
SEARCH_LIMIT = 10


def redacted(url: str) -> str:
    """The URL without its password (for reports and logs)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))  # noqa: SLF001 - namedtuple's public API


def _check_target(url: str) -> None:
    import dj_database_url

    from bhgbrain_site.core.errors import InvalidInput

    try:
        engine = dj_database_url.parse(url)["ENGINE"]
    except (ValueError, KeyError):
        raise InvalidInput("Invalid input: --to-database must be a postgres:// URL") from None
    if not engine.endswith(("postgresql", "sqlite3")):
        raise InvalidInput("Invalid input: --to-database must be a postgres:// (or sqlite://) URL")


# --------------------------------------------------------------------------- the search sample


def sample_queries(count: int) -> list[dict[str, str]]:
    """``count`` queries spread over the live memories (key order): each one's first words."""
    from memories.models import Memory

    live = Memory.objects.filter(archived=False).order_by("id")
    total = live.count()
    if not total or count <= 0:
        return []
    step = max(1, total // count)
    picked = [live.values_list("namespace", "content")[offset] for offset in range(0, total, step)[:count]]
    return [{"namespace": namespace, "query": " ".join(content.split()[:6])} for namespace, content in picked]


def run_searches(queries: Sequence[dict[str, str]], now: datetime) -> list[dict[str, Any]]:
    """Each query in each mode on this process's store: the result ids and scores, best first."""
    from bhgbrain_site.core.errors import DomainError
    from search.selectors import memories_search

    results = []
    for item in queries:
        for mode in SEARCH_MODES:
            try:
                found = memories_search(query=item["query"], namespace=item["namespace"], collection=None,
                                        mode=mode, limit=SEARCH_LIMIT, now=now)  # type: ignore[arg-type]
                hits: list[list[Any]] | str = [[hit.memory_id, round(hit.score, 6)] for hit in found]
            except DomainError as exc:  # e.g. no embedder: the same on both sides
                hits = exc.code
            results.append({**item, "mode": mode, "hits": hits})
    return results


SCORE_TOLERANCE = 2e-5  # float32 cosines from numpy and from Qdrant differ in the 7th digit


def _groups(hits: list[list[Any]]) -> list[tuple[float, set[str]]]:
    """Consecutive results of one score (within the tolerance): (score, their ids)."""
    groups: list[tuple[float, set[str]]] = []
    for memory_id, score in hits:
        if groups and abs(groups[-1][0] - score) <= SCORE_TOLERANCE:
            groups[-1][1].add(memory_id)
        else:
            groups.append((score, {memory_id}))
    return groups


def equivalent(source: list[list[Any]] | str, target: list[list[Any]] | str) -> bool:
    """The same ranking up to ties: equal scores, the same ids in each group of equal scores,
    except the last group, which the result limit may cut through anywhere on either side.
    (Equal scores come back in the order each engine stores the rows.)"""
    if isinstance(source, str) or isinstance(target, str):
        return source == target
    left, right = _groups(source), _groups(target)
    if len(left) != len(right) or any(abs(a[0] - b[0]) > SCORE_TOLERANCE or len(a[1]) != len(b[1])
                                      for a, b in zip(left, right, strict=True)):
        return False
    return all(a[1] == b[1] for a, b in zip(left[:-1], right[:-1], strict=True))


def _overlap(source: list[list[Any]] | str, target: list[list[Any]] | str) -> float:
    if isinstance(source, str) or isinstance(target, str):
        return 1.0 if source == target else 0.0
    mine, theirs = {h[0] for h in source}, {h[0] for h in target}
    return len(mine & theirs) / max(len(mine | theirs), 1)


def compare_searches(expected: Sequence[dict[str, Any]], actual: Sequence[dict[str, Any]],
                     strict: Sequence[str] = SEARCH_MODES) -> dict[str, Any]:
    """Each search on both stores, per mode: ``identical`` (same ids, same order), ``equivalent``
    (the same up to ties) and the mean ``overlap`` of the two id sets. A search of a ``strict``
    mode that is not equivalent is a mismatch; the other modes are measured only (their engine
    differs between the stores: Qdrant's BM25 is not the in-process one)."""
    modes: dict[str, dict[str, Any]] = {}
    mismatches = []
    for e, a in zip(expected, actual, strict=True):
        entry = modes.setdefault(e["mode"], {"compared": 0, "identical": 0, "equivalent": 0, "overlap": 0.0,
                                             "required": e["mode"] in strict})
        same = equivalent(e["hits"], a["hits"])
        entry["compared"] += 1
        entry["identical"] += e["hits"] == a["hits"]
        entry["equivalent"] += same
        entry["overlap"] += _overlap(e["hits"], a["hits"])
        if not same and e["mode"] in strict:
            mismatches.append({"namespace": e["namespace"], "query": e["query"], "mode": e["mode"],
                               "source": e["hits"], "target": a["hits"]})
    for entry in modes.values():
        entry["overlap"] = round(entry["overlap"] / max(entry["compared"], 1), 3)
    return {"compared": len(expected), "modes": modes, "mismatches": mismatches, "ok": not mismatches}


# --------------------------------------------------------------------------- the parent (source side)


def _child_config(vector_index: str | None, qdrant_url: str | None, qdrant_path: str | None) -> dict[str, Any]:
    from django.conf import settings

    config = settings.BHGBRAIN.model_dump(mode="json")
    config["data_dir"] = str(settings.BHGBRAIN_DATA_DIR)  # backups, logs and a relative Qdrant path stay put
    if vector_index:
        config["vector_index"] = vector_index
    if qdrant_url:
        config["qdrant"].update(mode="external", external_url=qdrant_url)
    if qdrant_path:
        config["qdrant"].update(mode="embedded", embedded_path=str(Path(qdrant_path).expanduser().resolve()))
    return config


def _source_database() -> dict[str, Any]:
    from django.db import connection

    return {key: (str(value) if isinstance(value, Path) else value) for key, value in connection.settings_dict.items()}


def store_migrate(*, target_url: str, vector_index: str | None = None, qdrant_url: str | None = None,
                  qdrant_path: str | None = None, batch_size: int = 500, samples: int = 8,
                  child: Sequence[str] | None = None) -> dict[str, Any]:
    """Copy this store into ``target_url`` and verify it; the child's report (``ok``: copied and
    verified). ``child``: the command that runs :func:`child_main` (tests start their own)."""
    from django.conf import settings
    from django.utils import timezone

    from bhgbrain_site.core.errors import InvalidInput

    _check_target(target_url)
    if qdrant_url and qdrant_path:
        raise InvalidInput("Invalid input: give --qdrant-url or --qdrant-path, not both")
    now = timezone.now()
    queries = sample_queries(samples)
    brief: dict[str, Any] = {
        "source": _source_database(), "batch_size": batch_size, "now": now.isoformat(), "target": redacted(target_url),
        "queries": queries, "expected": run_searches(queries, now), "source_index": settings.BHGBRAIN.vector_index,
    }
    with tempfile.TemporaryDirectory(dir=settings.BHGBRAIN_DATA_DIR, prefix=".migrate-") as work:
        config_path, brief_path, report_path = (Path(work) / name for name in ("config.json", "brief.json", "report.json"))
        config_path.write_text(json.dumps(_child_config(vector_index, qdrant_url, qdrant_path)))
        brief_path.write_text(json.dumps({**brief, "report": str(report_path)}, default=str))
        env = {**os.environ, "DJANGO_SETTINGS_MODULE": "bhgbrain_site.settings", "BHGBRAIN_CONFIG": str(config_path),
               "DATABASE_URL": target_url}
        command = [*(child or [sys.executable, "-m", "bhgbrain_site.cli.store_migrate"]), str(brief_path)]
        # stdout stays quiet (it carries this command's JSON); the child's progress bar and errors go to stderr
        proc = subprocess.run(command, env=env, stdout=subprocess.DEVNULL, check=False)  # noqa: S603 - our own interpreter
        if not report_path.exists():
            return {"ok": False, "complete": False, "target": brief["target"],
                    "error": f"the migration stopped (exit status {proc.returncode}; its error is on stderr above); "
                             "fix the cause and run the same command again: it continues where it stopped"}
        return json.loads(report_path.read_text())


# --------------------------------------------------------------------------- the child (target side)


def _migrate_target(brief: dict[str, Any], on_batch: Any) -> dict[str, Any]:
    from django.conf import settings
    from django.core.management import call_command
    from django.utils.dateparse import parse_datetime

    from bhgbrain_site.core.errors import DomainError, to_envelope
    from bhgbrain_site.core.progress import terminal_progress
    from retention import store_copy

    call_command("migrate", interactive=False, verbosity=0, stdout=sys.stderr)
    store_copy.attach_source(brief["source"])
    report: dict[str, Any] = {"target": brief["target"], "complete": False, "vector_index": settings.BHGBRAIN.vector_index}
    seconds: dict[str, float] = {}
    with terminal_progress("store migrate") as progress:
        started = time.perf_counter()
        try:
            report["inserted"] = store_copy.store_copy(batch_size=brief["batch_size"], progress=progress, on_batch=on_batch)
        except DomainError as exc:
            return {**report, "ok": False, **to_envelope(exc)[1]}
        report["complete"] = True
        seconds["copy"] = time.perf_counter() - started
        report["verification"] = store_copy.store_verify(progress=progress)
        seconds["verify"] = time.perf_counter() - started - seconds["copy"]
    now = parse_datetime(brief["now"])
    assert now is not None
    same_engines = settings.BHGBRAIN.vector_index == brief["source_index"]
    strict = SEARCH_MODES if same_engines else ("semantic",)
    started = time.perf_counter()
    report["searches"] = compare_searches(brief["expected"], run_searches(brief["queries"], now), strict)
    seconds["searches"] = time.perf_counter() - started
    report["seconds"] = {phase: round(value, 2) for phase, value in seconds.items()}
    report["not_copied"] = store_copy.not_copied()
    report["ok"] = report["verification"]["ok"] and report["searches"]["ok"]
    return report


def child_main(argv: Sequence[str] | None = None, *, on_batch: Any = None) -> int:
    """The child: ``python -m bhgbrain_site.cli.store_migrate BRIEF.json`` under the target's settings.
    ``on_batch(table, done)`` is called after each committed batch (a test stops a run with it)."""
    import django

    brief_path = Path((list(argv) if argv is not None else sys.argv[1:])[0])
    brief = json.loads(brief_path.read_text())
    django.setup()
    from memories.indexes.embedded import reset_vector_index

    try:
        report = _migrate_target(brief, on_batch)
    finally:
        reset_vector_index()  # closes Qdrant's client now, not in the interpreter's teardown
    Path(brief["report"]).write_text(json.dumps(report, default=str))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    raise SystemExit(child_main())
