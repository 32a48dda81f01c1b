"""GET /health from a snapshot in memory, refreshed in the background.

A probe must be cheap (load balancers and supervisors call it every few seconds) and honest.
The snapshot is recomputed by one daemon thread every ``REFRESH_S`` seconds, or less often
when computing it is slow (a big store: at most ~5 % of one core), and only while someone
asks: after ``IDLE_S`` seconds without a probe the thread waits for the next one. A probe gets
the snapshot with ``checked_at`` and ``snapshot_age_ms`` saying how old it is. It is recomputed
on the spot when it is older than ``STALE_AFTER`` refreshes (the thread is stuck or was idle)
or when a write of this process finished after it was taken (``generation``), so a probe never
misses this server's own writes and sees other processes' within a few seconds.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from time import monotonic
from typing import Any

from asgiref.sync import sync_to_async

logger = logging.getLogger("bhgbrain.health")

REFRESH_S = 2.0
IDLE_S = 60.0
STALE_AFTER = 3  # refresh intervals
COST_SHARE = 20  # the interval is at least this many times the last computation's duration


class HealthSnapshots:
    def __init__(self, compute: Callable[[], dict[str, Any]], generation: Callable[[], int], *,
                 refresh_s: float = REFRESH_S) -> None:
        self._compute = compute
        self._generation = generation
        self._refresh_s = refresh_s
        self._lock = threading.Lock()
        self._asked = threading.Event()
        # (snapshot, monotonic() it was taken at, the write generation it saw): replaced whole
        self._state: tuple[dict[str, Any], float, int] | None = None
        self._interval = refresh_s
        self._last_asked = 0.0
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._background = False

    @property
    def interval(self) -> float:
        """Seconds between two refreshes: ``refresh_s``, or more for a slow computation."""
        return self._interval

    def start_background(self) -> None:
        """Serve from memory from now on (the server does; without it every probe computes)."""
        self._background = True

    def get(self) -> dict[str, Any] | None:
        """The current snapshot, or None when there is no fresh one: the caller then computes
        one with :meth:`refresh`, off the event loop."""
        if not self._background:
            return None
        now = monotonic()
        self._last_asked = now
        self._ensure_thread()
        state = self._state
        if state is None:
            return None
        snapshot, taken, generation = state
        if now - taken > STALE_AFTER * self._interval or generation != self._generation():
            return None
        return self._stamped(snapshot, now - taken)

    async def current(self) -> dict[str, Any]:
        """What a probe gets: the snapshot in memory, or one computed now in a worker thread."""
        snapshot = self.get()
        if snapshot is None:
            snapshot = await sync_to_async(self.refresh, thread_sensitive=False)()
        return snapshot

    def refresh(self) -> dict[str, Any]:
        """Compute the snapshot now (a worker thread: it queries the database)."""
        began, generation = monotonic(), self._generation()
        snapshot = self._compute()
        ended = monotonic()
        with self._lock:
            self._state = (snapshot, ended, generation)
            self._interval = max(self._refresh_s, COST_SHARE * (ended - began))
        return self._stamped(snapshot, 0.0)

    @staticmethod
    def _stamped(snapshot: dict[str, Any], age: float) -> dict[str, Any]:
        checked_at = datetime.fromtimestamp(time.time() - age, UTC)
        body = {**snapshot, "checked_at": checked_at.isoformat(timespec="milliseconds"),
                "snapshot_age_ms": round(age * 1000, 1)}
        if "uptime_seconds" in body:
            body["uptime_seconds"] = int(snapshot["uptime_seconds"] + age)
        return body

    def _ensure_thread(self) -> None:
        if self._pid != os.getpid():  # a forked worker: the parent's thread did not come along
            self._pid, self._thread = os.getpid(), None
        if self._thread is None or not self._thread.is_alive():
            with self._lock:
                if self._thread is None or not self._thread.is_alive():
                    self._thread = threading.Thread(target=self._run, name="bhgbrain-health", daemon=True)
                    self._thread.start()
        self._asked.set()

    def _run(self) -> None:
        from django.db import connection

        while True:
            if monotonic() - self._last_asked > IDLE_S:
                self._asked.clear()
                connection.close()  # idle: hold no database connection
                self._asked.wait()
            try:
                self.refresh()
            except Exception:  # noqa: BLE001 - the probe then computes (and reports) it itself
                logger.exception("health snapshot failed")
                connection.close()
            time.sleep(self._interval)
