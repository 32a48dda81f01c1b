"""Nothing outlives the server: ``bhgbrain server start`` (as ``make run`` starts it) is stopped the
ways a process manager or a terminal stops it, and within a few seconds of the first signal no
process it started is left: not its HTTP workers, not the scheduler's keeper, not the django-q2
cluster (leader, sentinel, worker, monitor, pusher) in its own process group.

(a) SIGTERM to the server's process group, SIGKILL to the group 2 s later (a process manager);
(b) SIGKILL to the server process alone (a crash, the OOM killer);
(c) SIGINT to the group, again 0.3 s later (Ctrl-C twice in a terminal);
(d) SIGKILL to the server's process group at once (server and keeper: the cluster, in its own
    group, must go by its parent-death signal);
(e) SIGTERM to the server process alone (systemd's KillMode=mixed; docker stop through tini).

Every process is recorded before the signals: the server's whole tree, every member of every
process group in it, and any process whose command line or environment names the test's data
dir (a re-parented orphan leaves the tree but keeps its environment)."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.live_server import descendants, free_port, process_table, server_env

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

ROOT = Path(__file__).resolve().parents[3]
BHGBRAIN = Path(sys.executable).with_name("bhgbrain")  # the console script `make run` runs
STARTUP_SECONDS = 240  # a loaded 2-CPU machine, with the embedding model warming in each worker
GONE_WITHIN = 5.0  # seconds after the first signal: the manager's 2 s window, and room to reap
MANAGER_WINDOW = 2.0  # `kill -TERM -PGID; sleep 2; kill -KILL -PGID`
CLUSTER_PROCESSES = 3  # under the sentinel: one django-q2 worker (Q_CLUSTER workers=1), the monitor, the pusher

Identity = tuple[int, str]  # pid and start time: a pid reused by a new process is not "still alive"


def _stat(pid: int) -> list[str] | None:
    """/proc/<pid>/stat after the command name: [state, ppid, pgid, ...]; None if there is no such process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()


def _identity(pid: int) -> Identity | None:
    fields = _stat(pid)
    return None if fields is None else (pid, fields[19])  # field 22, starttime


def _alive(identity: Identity) -> bool:
    """Running or stopped; a zombie (dead, waiting to be reaped) or a reused pid counts as gone."""
    pid, started = identity
    fields = _stat(pid)
    return fields is not None and fields[19] == started and fields[0] not in ("Z", "X")


def _mentions(pid: int, text: str) -> bool:
    for part in ("cmdline", "environ"):
        with contextlib.suppress(OSError):
            if text.encode() in Path(f"/proc/{pid}/{part}").read_bytes():
                return True
    return False


def _everything_started_by(server: int, home: Path) -> dict[Identity, str]:
    """Identity → command line of the server, its tree, the members of its tree's process groups
    and every process that names ``home``."""
    table = process_table()
    tree = {server, *descendants(table, server)}
    groups = {table[pid][1] for pid in tree if pid in table} - {os.getpgrp()}
    pids = tree | {pid for pid, (_, pgid, _) in table.items() if pgid in groups}
    pids |= {pid for pid in table if pid != os.getpid() and _mentions(pid, str(home))}
    found = {}
    for pid in pids:
        identity = _identity(pid)
        if identity is not None and pid in table:
            found[identity] = table[pid][2]
    return found


def _scheduler(server: int) -> tuple[int, int, int] | None:
    """(keeper, cluster leader, sentinel) once the sentinel has its worker, monitor and pusher."""
    table = process_table()
    for keeper, (ppid, _, cmd) in table.items():
        if ppid != server or "scheduler_keeper" not in cmd:
            continue
        for leader in (pid for pid, (ppid, _, _) in table.items() if ppid == keeper):
            for sentinel in (pid for pid, (ppid, _, _) in table.items() if ppid == leader):
                if sum(1 for ppid, _, _ in table.values() if ppid == sentinel) >= CLUSTER_PROCESSES:
                    return keeper, leader, sentinel
    return None


def _wait_until_ready(server: subprocess.Popen[bytes], home: Path, port: int) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    health = False
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise AssertionError(f"the server exited ({server.returncode}): {(home / 'server.stderr').read_text()}")
        if not health:
            with contextlib.suppress(httpx.TransportError):
                health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code in (200, 503)
        if health and _scheduler(server.pid) is not None:
            return
        time.sleep(0.25)
    raise AssertionError(f"not ready in {STARTUP_SECONDS} s (health: {health}): {(home / 'server.stderr').read_text()}")


@contextlib.contextmanager
def _server(home: Path, workers: int) -> Iterator[subprocess.Popen[bytes]]:
    """``bhgbrain server start`` with its own session and process group, its config (port,
    workers) and data dir in ``home``; whatever is left of it afterwards is SIGKILLed."""
    port = free_port()
    (home / "config.json").write_text(json.dumps({"transport": {"http": {"port": port, "workers": workers}}}))
    env = server_env({"BHGBRAIN_CONFIG": str(home / "config.json")})
    with open(home / "server.stderr", "wb") as stderr:
        server = subprocess.Popen([str(BHGBRAIN), "server", "start"], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True)
    try:
        _wait_until_ready(server, home, port)
        yield server
    finally:
        for identity in _everything_started_by(server.pid, home):
            if _alive(identity):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(identity[0], signal.SIGKILL)
        server.kill()
        server.wait()


def _group_signal(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signum)


def _manager_stop(server: subprocess.Popen[bytes]) -> None:
    _group_signal(server.pid, signal.SIGTERM)
    time.sleep(MANAGER_WINDOW)
    _group_signal(server.pid, signal.SIGKILL)


def _kill_server_alone(server: subprocess.Popen[bytes]) -> None:
    os.kill(server.pid, signal.SIGKILL)


def _ctrl_c_twice(server: subprocess.Popen[bytes]) -> None:
    _group_signal(server.pid, signal.SIGINT)
    time.sleep(0.3)
    _group_signal(server.pid, signal.SIGINT)


def _kill_the_group_at_once(server: subprocess.Popen[bytes]) -> None:
    _group_signal(server.pid, signal.SIGKILL)  # server and keeper at once: the cluster has nobody to stop it


def _sigterm_to_the_server_alone(server: subprocess.Popen[bytes]) -> None:
    os.kill(server.pid, signal.SIGTERM)  # systemd's KillMode=mixed, docker stop through tini


STOPS: dict[str, Callable[[subprocess.Popen[bytes]], None]] = {
    "a-sigterm-then-sigkill-to-the-group": _manager_stop,
    "b-sigkill-to-the-server-alone": _kill_server_alone,
    "c-ctrl-c-twice": _ctrl_c_twice,
    "d-sigkill-to-the-group-at-once": _kill_the_group_at_once,
    "e-sigterm-to-the-server-alone": _sigterm_to_the_server_alone,
}


def _assert_all_gone(started: dict[Identity, str], since: float, server: subprocess.Popen[bytes]) -> None:
    while True:
        server.poll()  # reap the server: it is the test's child
        alive = {identity: cmd for identity, cmd in started.items() if _alive(identity)}
        if not alive or time.monotonic() - since > GONE_WITHIN:
            break
        time.sleep(0.1)
    assert not alive, (f"{len(alive)} process(es) still running {GONE_WITHIN} s after the first signal: "
                       + "; ".join(f"{pid} [{_stat(pid)[0] if _stat(pid) else '?'}] {cmd}" for (pid, _), cmd in alive.items()))


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("stop", list(STOPS))
def test_no_process_outlives_the_server(tmp_path: Path, stop: str, workers: int) -> None:
    with _server(tmp_path, workers) as server:
        started = _everything_started_by(server.pid, tmp_path)
        http_workers = workers if workers > 1 else 0  # one worker: the server process serves HTTP itself
        assert len(started) >= 1 + http_workers + 3 + CLUSTER_PROCESSES, started  # + keeper, leader, sentinel
        first_signal = time.monotonic()
        STOPS[stop](server)
        _assert_all_gone(started, first_signal, server)


def test_a_cluster_whose_own_stop_hangs_is_ended_by_its_deadline(tmp_path: Path) -> None:
    """django-q2's stop blocks while the sentinel cannot answer (here: stopped with SIGSTOP); with
    the keeper frozen too, only the cluster's own deadline can end it."""
    with _server(tmp_path, 1) as server:
        scheduler = _scheduler(server.pid)
        assert scheduler is not None
        keeper, leader, sentinel = scheduler
        table = process_table()
        cluster = {_identity(pid): table[pid][2] for pid in table if table[pid][1] == leader}
        assert len(cluster) >= 2 + CLUSTER_PROCESSES, cluster
        os.kill(keeper, signal.SIGSTOP)
        try:
            os.kill(sentinel, signal.SIGSTOP)
            first_signal = time.monotonic()
            os.kill(leader, signal.SIGTERM)  # what the keeper sends
            _assert_all_gone(cluster, first_signal, server)
        finally:
            os.kill(keeper, signal.SIGCONT)
