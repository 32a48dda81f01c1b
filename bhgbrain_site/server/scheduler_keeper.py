"""The scheduler's keeper: runs django-q2's cluster in its own process group and ends the whole
group (cluster leader, sentinel, worker, pusher, monitor) when the server stops or dies, within
``GRACE_SECONDS``: well inside the 2 s a process manager gives before its SIGKILL.

``python -m bhgbrain_site.server.scheduler_keeper <command...>``. The server is this process's parent:

- on SIGTERM/SIGINT (the server stopping, a signal to the server's process group, or Linux's
  parent-death signal when the server is killed, even by SIGKILL), or when the parent disappears
  (the portable check, every ``POLL_SECONDS``), it asks the command (the group's leader) to stop
  with SIGTERM, waits up to ``GRACE_SECONDS`` for the group to go, then SIGKILLs the group;
- the command gets SIGKILL from Linux if this keeper dies (PR_SET_PDEATHSIG, armed before it
  starts), so a keeper SIGKILLed in the middle of its grace leaves nothing behind;
- if the command exits on its own, the keeper exits with its code.

The cluster's own stop (``bhgbrain_site.server.qcluster``) ends within a shorter deadline than
this grace. A job cut short is retried by django-q2 (its task is acknowledged only when it
finishes) and every job here commits in transactions, so a kill loses no data.

Standard library only: it must start fast and never import Django.
"""
from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

GRACE_SECONDS = 1.2
POLL_SECONDS = 0.1
PR_SET_PDEATHSIG = 1


@functools.cache
def _prctl() -> Callable[..., int] | None:
    """libc's prctl on Linux (resolved once, before any fork: a forked child must not load libraries)."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    return ctypes.CDLL(None, use_errno=True).prctl


def die_with_parent(signum: int = signal.SIGTERM, parent: int | None = None) -> None:
    """Linux: ``signum`` to this process when its parent dies, however it dies (PR_SET_PDEATHSIG);
    at once if the parent (``parent``, default: the current one) is already gone. The keeper and
    every spawned server worker take SIGTERM (they stop in order); the cluster's processes SIGKILL."""
    prctl = _prctl()
    if prctl is None:
        return
    parent = os.getppid() if parent is None else parent
    prctl(PR_SET_PDEATHSIG, signum)
    if os.getppid() != parent:
        os.kill(os.getpid(), signum)


def forks_die_with_parent(signum: int = signal.SIGKILL) -> None:
    """Linux: every process forked from now on, here or in a forked child (multiprocessing's fork
    context: django-q2's sentinel, worker, pusher, monitor), gets ``signum`` when the process that
    forked it dies."""
    if _prctl() is None:
        return
    forker = [os.getpid()]

    def before() -> None:
        forker[0] = os.getpid()

    os.register_at_fork(before=before, after_in_child=lambda: die_with_parent(signum, parent=forker[0]))


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
    """SIGTERM the child (its group's leader), wait up to ``grace`` seconds for the whole group
    to go, then SIGKILL what is left of the group."""
    pgid = child.pid
    if child.poll() is None:
        child.send_signal(signal.SIGTERM)
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
    # preexec_fn runs in the child between fork and exec; safe here: the keeper has one thread.
    child = subprocess.Popen(command, start_new_session=True,
                             preexec_fn=functools.partial(die_with_parent, signal.SIGKILL, parent=os.getpid()))
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
