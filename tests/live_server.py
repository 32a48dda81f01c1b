"""Start the real server (``bhgbrain server start``) in a subprocess for HTTP tests."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


PG_ADMIN = "postgres://postgres@127.0.0.1:5432/postgres"


def unavailable(reason: str) -> None:
    """Skip on a developer's machine without the service; fail in CI (.ci/run sets
    BHGBRAIN_REQUIRE_SERVICES), where PostgreSQL and Redis are started first."""
    import pytest

    if os.environ.get("BHGBRAIN_REQUIRE_SERVICES"):
        pytest.fail(reason)
    pytest.skip(reason)


@contextlib.contextmanager
def fresh_postgres(prefix: str) -> Iterator[str]:
    """A new PostgreSQL database for the servers of a test module (its URL); dropped afterwards."""
    import warnings

    import psycopg

    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    try:
        admin = psycopg.connect(PG_ADMIN, autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as exc:
        unavailable(f"PostgreSQL is not reachable at {PG_ADMIN}: {exc}")
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield f"postgres://postgres@127.0.0.1:5432/{name}"
        finally:
            admin.execute("SET statement_timeout = '60s'")  # a drop waits for every backend of the cluster
            try:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            except psycopg.errors.QueryCanceled:  # another session's long statement holds every drop up
                warnings.warn(f"could not drop the test database {name} within 60 s: drop it by hand", stacklevel=1)


def process_table() -> dict[int, tuple[int, int, str]]:
    """pid → (parent pid, process group, command line) of every process."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        table[int(entry.name)] = (int(fields[1]), int(fields[2]), cmdline)
    return table


def descendants(table: dict[int, tuple[int, int, str]], root: int) -> set[int]:
    found, frontier = set(), {root}
    while frontier:
        frontier = {pid for pid, (ppid, _, _) in table.items() if ppid in frontier} - found
        found |= frontier
    return found


def server_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The test process's env without the test settings, DB URL and Redis URL: the server uses its
    own SQLite and no Redis unless ``extra`` says otherwise."""
    dropped = ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "BHGBRAIN_CONFIG", "REDIS_URL", "BHGBRAIN_WORKERS",
               "PROMETHEUS_MULTIPROC_DIR")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env.update(extra or {})
    return env


@dataclass
class LiveServer:
    home: Path
    config: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    scheduler: bool = False
    port: int = field(default_factory=free_port)
    workers: int | None = None  # --workers N (None: the config's transport.http.workers)
    own_session: bool = False  # its own session and process group (a test can kill the whole group)
    proc: subprocess.Popen[str] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def config_path(self) -> Path:
        return self.home / "config.json"

    def command(self, *extra: str) -> list[str]:
        args = [sys.executable, "-m", "bhgbrain_site.cli.main", f"--config={self.config_path}", "server", "start", f"--port={self.port}"]
        if not self.scheduler:
            args.append("--no-scheduler")
        if self.workers is not None:
            args.append(f"--workers={self.workers}")
        return args + list(extra)

    def start(self, timeout: float = 60) -> LiveServer:
        self.home.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(json.dumps(self.config))
        log = open(self.home / "server.stderr", "w")  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(self.command(), stdout=subprocess.PIPE, stderr=log, text=True, env=server_env(self.env),
                                     start_new_session=self.own_session)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {(self.home / 'server.stderr').read_text()}")
            try:
                httpx.get(self.url + "/health", timeout=2)
                return self
            except httpx.TransportError:
                time.sleep(0.2)
        raise RuntimeError("server did not start in time")

    def stop(self) -> int:
        assert self.proc is not None
        self.proc.terminate()
        try:
            return self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def kill(self) -> None:
        """SIGKILL the server and everything it started (workers, the scheduler's keeper and its
        cluster's own process group) at once: a crash, with no process left to tidy up."""
        assert self.proc is not None
        table = process_table()
        tree = {self.proc.pid, *descendants(table, self.proc.pid)}
        for group in {table[pid][1] for pid in tree if pid in table}:
            if group != os.getpgrp():
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(group, signal.SIGKILL)
        for pid in tree:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait()

    def post(self, tool: str, body: Any = None, *, raw: bytes | None = None, headers: dict[str, str] | None = None) -> httpx.Response:
        content = raw if raw is not None else json.dumps(body).encode()
        headers = {"content-type": "application/json", **(headers or {})}
        return httpx.post(f"{self.url}/tool/{tool}", content=content, headers=headers, timeout=60)

    def stderr(self) -> str:
        return (self.home / "server.stderr").read_text()
