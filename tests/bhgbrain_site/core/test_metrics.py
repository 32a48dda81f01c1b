"""The metrics text of several workers (prometheus-client's multiprocess files), read while a
process is creating its file."""
from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.mmap_dict import MmapedDict, mmap_key
from prometheus_client.parser import text_string_to_metric_families

from bhgbrain_site.core.metrics import MULTIPROC_ENV, Metrics


def _worker_file(path: Path, search_calls: float) -> None:
    """A worker's counter file as prometheus-client writes it."""
    values = MmapedDict(str(path))
    key = mmap_key("bhgbrain_tool_calls", "bhgbrain_tool_calls_total", ["tool", "outcome"], ["search", "ok"],
                   "Tool calls by tool and outcome.")
    values.write_value(key, search_calls, 0.0)
    values.close()


def _search_calls(text: str) -> float:
    return sum(sample.value for family in text_string_to_metric_families(text) for sample in family.samples
               if sample.name == "bhgbrain_tool_calls_total" and sample.labels == {"tool": "search", "outcome": "ok"})


def test_a_scrape_sums_the_workers_files_while_a_process_creates_its_own(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    _worker_file(tmp_path / "counter_101.db", 3)
    _worker_file(tmp_path / "counter_102.db", 4)
    (tmp_path / "counter_103.db").touch()  # opened by a starting process, not yet sized
    monkeypatch.setenv(MULTIPROC_ENV, str(tmp_path))
    text = Metrics().render(memory_count=5, rate_limit_buckets=0)
    assert _search_calls(text) == 7
    assert "bhgbrain_memory_count 5.0" in text
