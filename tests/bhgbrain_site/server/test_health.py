"""GET /health's snapshot in memory: served without recomputing, honest about its age,
recomputed after this process's writes, when stale, and never before the server turns it on."""
from __future__ import annotations

import itertools
import time
from typing import Any

import pytest

from bhgbrain_site.server import health
from bhgbrain_site.server.health import HealthSnapshots


class Store:
    def __init__(self) -> None:
        self.computed = 0
        self.generation = 0

    def compute(self) -> dict[str, Any]:
        self.computed += 1
        return {"status": "healthy", "memory_count": self.computed, "uptime_seconds": 100}


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> Store:
    monkeypatch.setattr(HealthSnapshots, "_ensure_thread", lambda self: None)  # the refresher: tested apart
    return Store()


def _snapshots(store: Store) -> HealthSnapshots:
    snapshots = HealthSnapshots(store.compute, lambda: store.generation)
    snapshots.start_background()
    return snapshots


def test_without_the_server_every_probe_computes(store: Store) -> None:
    snapshots = HealthSnapshots(store.compute, lambda: store.generation)
    snapshots.refresh()
    assert snapshots.get() is None


def test_a_snapshot_is_served_again_with_its_age(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = itertools.count(1000.0, 0.5)
    monkeypatch.setattr(health, "monotonic", lambda: next(clock))
    snapshots = _snapshots(store)
    assert snapshots.get() is None  # nothing yet: the probe computes one
    first = snapshots.refresh()
    assert first["snapshot_age_ms"] == 0.0 and "checked_at" in first
    again = snapshots.get()
    assert again is not None and again["memory_count"] == 1 and store.computed == 1
    assert again["snapshot_age_ms"] > 0 and again["checked_at"] <= first["checked_at"]
    assert again["uptime_seconds"] == 100  # grows with the age (whole seconds)


def test_a_write_of_this_process_makes_the_snapshot_stale(store: Store) -> None:
    snapshots = _snapshots(store)
    snapshots.refresh()
    assert snapshots.get() is not None
    store.generation += 1
    assert snapshots.get() is None
    assert snapshots.refresh()["memory_count"] == 2
    assert snapshots.get() is not None


def test_an_old_snapshot_is_not_served(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    now = [1000.0]
    monkeypatch.setattr(health, "monotonic", lambda: now[0])
    snapshots = _snapshots(store)
    snapshots.refresh()
    now[0] += health.STALE_AFTER * health.REFRESH_S - 0.1
    assert snapshots.get() is not None
    now[0] += 0.2
    assert snapshots.get() is None


def test_a_slow_computation_stretches_the_interval(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    ticks = iter([0.0, 0.5])  # the computation took 0.5 s
    monkeypatch.setattr(health, "monotonic", lambda: next(ticks))
    snapshots = _snapshots(store)
    snapshots.refresh()
    assert snapshots.interval == pytest.approx(health.COST_SHARE * 0.5)


def test_the_refresher_thread_keeps_the_snapshot_current(monkeypatch: pytest.MonkeyPatch) -> None:
    store = Store()
    monkeypatch.setattr(health, "REFRESH_S", 0.05)
    snapshots = HealthSnapshots(store.compute, lambda: store.generation, refresh_s=0.05)
    snapshots.start_background()
    monkeypatch.setattr("django.db.connection.close", lambda: None)
    snapshots.get()  # starts the thread
    deadline = time.monotonic() + 10
    while store.computed < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert store.computed >= 3  # refreshed over and over without a probe computing
