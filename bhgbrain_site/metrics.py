"""In-process Prometheus metrics: counters and real bucketed histograms (p50/p95/p99 derivable).

The registry records every operation call here; ``GET /metrics`` (bhgbrain_site.http) renders them."""
from __future__ import annotations

import bisect
import threading
from collections import defaultdict

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class _Histogram:
    def __init__(self) -> None:
        self.counts = [0] * (len(BUCKETS) + 1)
        self.total = 0.0
        self.n = 0

    def observe(self, seconds: float) -> None:
        self.counts[bisect.bisect_left(BUCKETS, seconds)] += 1
        self.total += seconds
        self.n += 1


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: dict[tuple[str, str], int] = defaultdict(int)
        self._durations: dict[str, _Histogram] = defaultdict(_Histogram)

    def tool_call(self, tool: str, outcome: str, seconds: float) -> None:
        with self._lock:
            self._calls[(tool, outcome)] += 1
            self._durations[tool].observe(seconds)

    def render(self, *, memory_count: int, rate_limit_buckets: int, rate_limited_total: int) -> str:
        lines = [
            "# HELP bhgbrain_tool_calls_total Tool calls by tool and outcome.",
            "# TYPE bhgbrain_tool_calls_total counter",
        ]
        with self._lock:
            for (tool, outcome), count in sorted(self._calls.items()):
                lines.append(f'bhgbrain_tool_calls_total{{tool="{tool}",outcome="{outcome}"}} {count}')
            lines += ["# HELP bhgbrain_tool_duration_seconds Tool call duration.",
                      "# TYPE bhgbrain_tool_duration_seconds histogram"]
            for tool, hist in sorted(self._durations.items()):
                cumulative = 0
                for bound, count in zip((*BUCKETS, float("inf")), hist.counts, strict=True):
                    cumulative += count
                    le = "+Inf" if bound == float("inf") else repr(bound)
                    lines.append(f'bhgbrain_tool_duration_seconds_bucket{{tool="{tool}",le="{le}"}} {cumulative}')
                lines.append(f'bhgbrain_tool_duration_seconds_sum{{tool="{tool}"}} {hist.total:.6f}')
                lines.append(f'bhgbrain_tool_duration_seconds_count{{tool="{tool}"}} {hist.n}')
        lines += [
            "# HELP bhgbrain_memory_count Live memories.", "# TYPE bhgbrain_memory_count gauge",
            f"bhgbrain_memory_count {memory_count}",
            "# HELP bhgbrain_rate_limit_buckets Client addresses tracked by the rate limiter.",
            "# TYPE bhgbrain_rate_limit_buckets gauge", f"bhgbrain_rate_limit_buckets {rate_limit_buckets}",
            "# HELP bhgbrain_rate_limited_total Requests refused with 429.",
            "# TYPE bhgbrain_rate_limited_total counter", f"bhgbrain_rate_limited_total {rate_limited_total}",
        ]
        return "\n".join(lines) + "\n"


metrics = Metrics()

