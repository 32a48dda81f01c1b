"""Prometheus metrics (prometheus-client): tool calls, their durations (bucketed histograms, so
p50/p95/p99 come from ``histogram_quantile``) and rate-limit refusals.

The registry records every operation call here, the HTTP guard every 429; ``GET /metrics``
(bhgbrain_site.server.views) renders them. A server with several workers sets
``PROMETHEUS_MULTIPROC_DIR`` before its workers start: each worker then writes its values to
files there and a scrape, whichever worker answers it, sums every worker's files
(prometheus-client's multiprocess mode). One process keeps them in memory.
"""
from __future__ import annotations

import glob
import os
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram, disable_created_metrics, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

disable_created_metrics()  # no *_created series: the text stays what it was before prometheus-client


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._calls = Counter("bhgbrain_tool_calls", "Tool calls by tool and outcome.", ["tool", "outcome"],
                              registry=self.registry)
        self._durations = Histogram("bhgbrain_tool_duration_seconds", "Tool call duration.", ["tool"],
                                    buckets=BUCKETS, registry=self.registry)
        self._limited = Counter("bhgbrain_rate_limited", "Requests refused with 429.", registry=self.registry)
        self._model_seconds = Counter("bhgbrain_embedding_model_seconds", "Seconds the local model spent embedding, by kind.",
                                      ["kind"], registry=self.registry)
        self._model_wait = Histogram("bhgbrain_embedding_wait_seconds", "Time a call waited for the local model, by kind.",
                                     ["kind"], buckets=BUCKETS, registry=self.registry)

    def model_call(self, kind: str, waited: float, seconds: float) -> None:
        """One call of the local embedding model: how long it queued, how long it ran."""
        self._model_wait.labels(kind=kind).observe(waited)
        self._model_seconds.labels(kind=kind).inc(seconds)

    def tool_call(self, tool: str, outcome: str, seconds: float) -> None:
        self._calls.labels(tool=tool, outcome=outcome).inc()
        self._durations.labels(tool=tool).observe(seconds)

    def rate_limited(self) -> None:
        self._limited.inc()

    def _recorded(self) -> CollectorRegistry:
        """Every worker's values in multiprocess mode, else this process's."""
        directory = os.environ.get(MULTIPROC_ENV)
        if not directory:
            return self.registry
        merged = CollectorRegistry()
        _WorkerFiles(merged, path=directory)
        return merged

    def render(self, *, memory_count: int, rate_limit_buckets: int) -> str:
        gauges = CollectorRegistry()
        gauges.register(_Gauges(memory_count, rate_limit_buckets))
        return (generate_latest(self._recorded()) + generate_latest(gauges)).decode()


class _WorkerFiles(MultiProcessCollector):
    """Every worker's files, except one a process is creating this instant.

    prometheus-client opens a process's new file empty and only then sizes it; a scrape reading it
    in between failed (``struct.error`` on the missing header: the scrape answered 500 while a
    scheduler or worker process started). A file still empty holds no value yet, and files only
    grow, so leaving it out loses nothing.
    """

    def collect(self) -> Iterable[Metric]:
        files = [name for name in glob.glob(os.path.join(self._path, "*.db")) if _has_header(name)]
        return self.merge(files, accumulate=True)


def _has_header(name: str) -> bool:
    try:
        return os.stat(name).st_size >= 8
    except FileNotFoundError:  # a dead process's file removed meanwhile
        return False


class _Gauges:
    """Values read at scrape time from the store and the shared rate-limit cache."""

    def __init__(self, memory_count: int, rate_limit_buckets: int) -> None:
        self.values = (memory_count, rate_limit_buckets)

    def collect(self) -> list[GaugeMetricFamily]:
        memory_count, buckets = self.values
        return [
            GaugeMetricFamily("bhgbrain_memory_count", "Live memories.", value=memory_count),
            GaugeMetricFamily("bhgbrain_rate_limit_buckets",
                              "Client addresses with a rate-limit window opened in the last 60-70 s.", value=buckets),
        ]


metrics = Metrics()
