"""The table of hosts in docs/performance.md, kept by ``make bench`` (bench/suite.py): one line per
host (CPU model and id, flags, caches), its ``python_loop_3m_ms``, the commit and the key search and
write figures of the suite's last run there. A run replaces its host's line in place; other hosts'
lines stay. The table lives between two markers::

    <!-- hosts:begin (bench/host_table.py) -->
    | host | ... |
    <!-- hosts:end -->
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

BEGIN = "<!-- hosts:begin (bench/host_table.py) -->"
END = "<!-- hosts:end -->"
COLUMNS = ("host", "flags", "caches", "python_loop_3m_ms", "load", "commit", "date", "database", "size",
           "full-text p95", "hybrid p95", "hybrid new question p95", "remember p95", "search while rebuilding")
# the phases of bench/search_latency.py whose p95 a line shows, in COLUMNS' order
PHASES = ("fulltext", "hybrid", "hybrid_fresh", "remember")


def _short_flags(flags: str) -> str:
    """avx2 / avx512 (with vnni) / amx: enough to tell the kernels' code paths apart in a table cell."""
    present = set(flags.split())
    short = [name for name in ("avx2", "fma") if name in present]
    if any(flag.startswith("avx512") for flag in present):
        short.append("avx512" + ("+vnni" if "avx512_vnni" in present else ""))
    short += ["amx"] if any(flag.startswith("amx") for flag in present) else []
    return " ".join(short) or "-"


def host_key(machine: dict[str, Any]) -> str:
    """What names a host in the table: its CPU model and id (a VM may call two CPUs the same)."""
    return f"{machine.get('cpu', '?')} ({machine.get('cpu_id', '?')})"


def _largest(sizes: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    return max(sizes.items(), key=lambda item: int(item[0])) if sizes else None


def line_for(result: dict[str, Any]) -> dict[str, str]:
    """The host's line from a suite result (bench/suite.py's summary.json)."""
    machine = result["machine"]
    step = result["steps"].get("latency") or {}
    latency = step.get("summary") or {}
    size, figures = _largest(latency) or ("-", {})
    cells = {"host": host_key(machine), "flags": _short_flags(str(machine.get("cpu_flags", ""))),
             "caches": str(machine.get("cpu_caches", "?")), "python_loop_3m_ms": str(machine.get("python_loop_3m_ms", "?")),
             "load": str(step.get("load_before", "?")).split()[0],
             "commit": str(machine.get("revision", "?")).split()[0][:12], "date": result["started"][:10],
             "database": str(step.get("database", "SQLite")), "size": f"{int(size):,}" if size != "-" else "-"}
    for column, phase in zip(COLUMNS[9:13], PHASES, strict=True):
        value = figures.get(f"{phase}_p95_ms")
        cells[column] = "-" if value is None else f"{value} ms"
    rebuilding = figures.get("rebuilding_fulltext_ms")
    cells["search while rebuilding"] = "-" if rebuilding is None else f"{rebuilding} ms"
    return cells


def _row(cells: dict[str, str]) -> str:
    return "| " + " | ".join(cells.get(column, "-").replace("|", "/") for column in COLUMNS) + " |"


def _parse(lines: list[str]) -> dict[str, str]:
    """Host -> its row, from the table's lines (the header and separator skipped)."""
    rows: dict[str, str] = {}
    for line in lines:
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0] not in ("host", "") and not re.fullmatch(r"-+", cells[0]):
            rows[cells[0]] = line.strip()
    return rows


def updated(text: str, cells: dict[str, str]) -> str:
    """``text`` (the page) with the host's line replaced, or added; the table created at the end of
    the page when it has no markers yet."""
    if BEGIN not in text or END not in text:
        text = text.rstrip("\n") + f"\n\n{BEGIN}\n{END}\n"
    head, rest = text.split(BEGIN, 1)
    body, tail = rest.split(END, 1)
    rows = _parse(body.strip().splitlines())
    rows[cells["host"]] = _row(cells)
    table = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS), *(rows[key] for key in sorted(rows))]
    return head + BEGIN + "\n" + "\n".join(table) + "\n" + END + tail


def update(page: Path, result: dict[str, Any]) -> dict[str, str]:
    """Write the host's line of ``result`` into ``page`` (docs/performance.md); returns the line's cells."""
    cells = line_for(result)
    page.write_text(updated(page.read_text(), cells))
    return cells
