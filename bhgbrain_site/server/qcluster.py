"""django-q2's cluster with a stop that always ends: ``python -m bhgbrain_site.server.qcluster``,
the command the scheduler's keeper runs (in place of ``python -m django qcluster``).

django-q2's own ``qcluster`` can hang for ever when it is stopped: its SIGTERM/SIGINT handler
(``Cluster.sig_handler`` → ``Cluster.stop``) sets a ``multiprocessing.Event`` the sentinel waits
on, and ``Event.set`` blocks, with no timeout, until every process waiting on it wakes; a sentinel
already killed by the same group SIGTERM (it keeps SIGTERM's default action) never does. The
process then sits in its signal handler and every later SIGTERM/SIGINT runs the handler again,
which returns at once (the sentinel is gone): the cluster ignores them. Even a clean stop waits,
unbounded, for a worker's running task.

Here, the same ``Cluster`` with:

- every process the cluster forks (the sentinel; its worker, monitor, pusher, and any it forks
  again) SIGKILLed by Linux when its parent dies (PR_SET_PDEATHSIG): killing this process ends the
  whole cluster, and the keeper arms the same signal in this process;
- SIGTERM/SIGINT (or the keeper gone: the portable check, every ``POLL_SECONDS``) start django-q2's
  stop (the pusher stops, an idle worker exits) and, ``STOP_SECONDS`` later, a SIGKILL to the
  process group, whatever the stop is doing. A task cut short is not acknowledged, so django-q2
  runs it again (after ``Q_CLUSTER["retry"]``), and the jobs commit in transactions: nothing is lost.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time

from bhgbrain_site.server.scheduler_keeper import forks_die_with_parent

STOP_SECONDS = 1.0  # stop requested → SIGKILL of the group; under the keeper's grace (1.2 s)
POLL_SECONDS = 0.2
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _kill_cluster() -> None:
    """SIGKILL the process group when this process leads it (the keeper starts it so), else this
    process alone (the processes it forked follow by their parent-death signal)."""
    if os.getpgrp() == os.getpid():
        os.killpg(os.getpid(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


class Deadline:
    """Once requested (a signal handler may request it), ``_kill_cluster`` runs ``seconds`` later
    on a thread of its own, wherever the main thread is stuck."""

    def __init__(self, seconds: float) -> None:
        self.requested = threading.Event()
        self._seconds = seconds
        threading.Thread(target=self._run, name="cluster-stop-deadline", daemon=True).start()

    def request(self, signum: int = 0, frame: object = None) -> None:
        self.requested.set()

    def _run(self) -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)  # they go to the main thread, which can hold them
        self.requested.wait()
        time.sleep(self._seconds)
        _kill_cluster()


def run() -> int:
    deadline = Deadline(STOP_SECONDS)
    for signum in STOP_SIGNALS:
        signal.signal(signum, deadline.request)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bhgbrain_site.settings")
    import django

    django.setup()
    from django_q.cluster import Cluster

    keeper = os.getppid()
    forks_die_with_parent(signal.SIGKILL)
    signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)  # until ours replace the handlers Cluster() installs
    cluster = Cluster()
    for signum in STOP_SIGNALS:
        signal.signal(signum, deadline.request)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    if deadline.requested.is_set():
        return 0  # asked to stop before the cluster started: nothing was forked
    cluster.start()
    while not deadline.requested.is_set() and os.getppid() == keeper and cluster.sentinel.is_alive():
        time.sleep(POLL_SECONDS)
    asked = deadline.requested.is_set() or os.getppid() != keeper
    deadline.request()
    cluster.stop()  # django-q2's own stop (a no-op if the sentinel is gone); the deadline bounds it
    return 0 if asked else 1  # 1: the sentinel died on its own


if __name__ == "__main__":
    sys.exit(run())
