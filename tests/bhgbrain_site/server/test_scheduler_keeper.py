"""The scheduler's keeper ends the whole process group, even a job that ignores SIGTERM."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from bhgbrain_site.server.scheduler_keeper import GRACE_SECONDS

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

# A "cluster" whose main process and its child both ignore SIGTERM, like a worker in a long job.
STUBBORN = textwrap.dedent(
    """
    import os, signal, subprocess, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen([sys.executable, "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"])
    print(os.getpid(), child.pid, flush=True)
    time.sleep(300)
    """
)

# The "server": starts the keeper, prints the keeper's pid, then waits to be killed.
SERVER = textwrap.dedent(
    """
    import subprocess, sys, time
    keeper = subprocess.Popen([sys.executable, "-m", "bhgbrain_site.server.scheduler_keeper", "--", sys.executable, "-c", sys.argv[1]])
    print(keeper.pid, flush=True)
    time.sleep(300)
    """
)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _start(tmp_path: Path) -> tuple[subprocess.Popen[str], list[int]]:
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, STUBBORN], stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[3]
    )
    keeper = int(server.stdout.readline())
    cluster, job = (int(p) for p in server.stdout.readline().split())
    return server, [keeper, cluster, job]


def _wait_gone(pids: list[int], within: float) -> float:
    started = time.monotonic()
    while alive := [pid for pid in pids if _alive(pid)]:
        assert time.monotonic() - started < within, f"still running: {alive}"
        time.sleep(0.1)
    return time.monotonic() - started


def test_a_killed_server_takes_the_whole_group_with_it(tmp_path: Path) -> None:
    server, pids = _start(tmp_path)
    os.kill(server.pid, signal.SIGKILL)
    server.wait()
    elapsed = _wait_gone(pids, within=GRACE_SECONDS + 10)
    assert elapsed >= GRACE_SECONDS - 1  # SIGTERM was tried first; the grace ran out, then SIGKILL


def test_a_stopping_server_ends_the_group(tmp_path: Path) -> None:
    server, pids = _start(tmp_path)
    try:
        os.kill(pids[0], signal.SIGTERM)  # what the server does on a clean stop
        _wait_gone(pids, within=GRACE_SECONDS + 10)
    finally:
        server.kill()
        server.wait()


def test_a_cluster_that_exits_ends_the_keeper_with_its_code() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bhgbrain_site.server.scheduler_keeper", "--", sys.executable, "-c", "raise SystemExit(3)"],
        cwd=Path(__file__).parents[3], timeout=30,
    )
    assert done.returncode == 3
