"""The scheduler's keeper: runs django-q2's cluster in its own process group and ends the whole
group (cluster, sentinel, workers, pusher, monitor) when the server stops or dies.

``python -m bhgbrain_site.server.scheduler_keeper <command...>``. The server is this process's parent:

- on SIGTERM/SIGINT (the server stopping, or Linux's parent-death signal when the server is
  killed, even by SIGKILL), or when the parent disappears (the portable check, once a second),
  it asks the group to stop with SIGTERM, waits ``GRACE_SECONDS`` for a running job to finish,
  then SIGKILLs the group;
- if the cluster exits on its own, it exits with the cluster's code.

A graceful django-q2 stop waits for the task a worker is running (the first ``vector_sync``
can take several seconds on a loaded machine): the grace bounds that wait, so nothing outlives
the server by more than a few seconds. An interrupted job is retried by django-q2 (its task
stays queued) and every job here is transactional, so a kill loses no data.

Standard library only: it must start fast and never import Django.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

GRACE_SECONDS = 8.0
POLL_SECONDS = 0.2


def die_with_parent() -> None:
    """Linux: SIGTERM to this process when its parent dies, however it dies (PR_SET_PDEATHSIG);
    at once if the parent died before the signal was armed. Used by the keeper and by every
    spawned server worker."""
    if sys.platform.startswith("linux"):
        import ctypes

        parent = os.getppid()
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGTERM)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def stop_group(child: subprocess.Popen[bytes], grace: float = GRACE_SECONDS) -> None:
    """SIGTERM the child's group, wait up to ``grace`` seconds, then SIGKILL what is left."""
    pgid = child.pid
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        child.poll()  # reap the leader so it does not linger as a zombie
        if not _group_alive(pgid):
            return
        time.sleep(POLL_SECONDS)
    _signal_group(pgid, signal.SIGKILL)
    child.wait()


def supervise(command: list[str]) -> int:
    parent = os.getppid()
    stopping = False

    def request_stop(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    die_with_parent()  # a server already gone sends SIGTERM at once: request_stop runs
    child = subprocess.Popen(command, start_new_session=True)
    while not stopping:
        code = child.poll()
        if code is not None:
            return code
        if os.getppid() != parent:
            break
        time.sleep(POLL_SECONDS)
    stop_group(child)
    return 0


def main() -> int:
    command = sys.argv[1:]
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        print("usage: python -m bhgbrain_site.server.scheduler_keeper [--] command [args...]", file=sys.stderr)
        return 2
    return supervise(command)


if __name__ == "__main__":
    sys.exit(main())
