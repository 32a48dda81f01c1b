"""bench/host_table.py: ``make bench`` keeps one line per host in docs/performance.md, replaced in
place by the next run on that host, other hosts' lines kept."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import host_table  # noqa: E402

PAGE = "# Performance\n\n## Hosts\n\nText before.\n\n## Next section\n\nText after.\n"


def _result(cpu_id: str, loop: str, commit: str, fulltext_p95: float) -> dict:
    machine = {"cpu": "AMD EPYC", "cpu_id": cpu_id, "cpu_flags": "avx2 fma avx512f avx512_vnni",
               "cpu_caches": "L1d 32K L2 1024K L3 32768K", "python_loop_3m_ms": loop, "revision": f"{commit} (clean)"}
    latency = {"1000": {"fulltext_p95_ms": 1.0}, "100000": {"fulltext_p95_ms": fulltext_p95, "hybrid_p95_ms": 14.2,
                                                          "hybrid_fresh_p95_ms": 40.1, "remember_p95_ms": 48.0,
                                                          "rebuilding_fulltext_ms": 210.5}}
    return {"machine": machine, "started": "2026-12-05T08:00:00+00:00",
            "steps": {"latency": {"status": "ok", "summary": latency, "load_before": "2.10 1.50 1.20"}}}


def _table(page: str) -> list[str]:
    body = page.split(host_table.BEGIN)[1].split(host_table.END)[0]
    return [line for line in body.strip().splitlines() if line.startswith("| AMD")]


def test_a_host_has_one_line_replaced_in_place_and_other_hosts_stay() -> None:
    page = PAGE.replace("Text before.\n", f"Text before.\n\n{host_table.BEGIN}\n{host_table.END}\n")
    first = host_table.updated(page, host_table.line_for(_result("family 25, model 17", "89", "aaaa111", 65.0)))
    (line,) = _table(first)
    assert "| avx2 fma avx512+vnni |" in line and "| 89 | 2.10 |" in line and "| aaaa111 |" in line
    assert "| SQLite | 100,000 | 65.0 ms | 14.2 ms | 40.1 ms | 48.0 ms | 210.5 ms |" in line

    other = host_table.updated(first, host_table.line_for(_result("family 6, model 106", "80", "bbbb222", 6.4)))
    again = host_table.updated(other, host_table.line_for(_result("family 25, model 17", "91", "cccc333", 9.5)))
    lines = _table(again)
    assert len(lines) == 2
    assert any("model 17" in line and "cccc333" in line and "9.5 ms" in line for line in lines)
    assert not any("aaaa111" in line for line in lines)
    assert any("model 106" in line and "bbbb222" in line for line in lines)
    assert again.index("Text before.") < again.index(host_table.BEGIN) < again.index("## Next section")
    assert again.endswith("Text after.\n")


def test_a_page_without_the_table_gets_one() -> None:
    page = host_table.updated(PAGE, host_table.line_for(_result("family 25, model 17", "89", "aaaa111", 65.0)))
    assert page.startswith(PAGE.rstrip("\n")) and len(_table(page)) == 1
