"""Storage faults against a real server process (tests/live_server.py) over real HTTP: the data
directory full, the data directory read-only, a restore killed half-way, and PostgreSQL restarted
under load.

The data directory is a small tmpfs mounted for the test (root, as here and in CI); where mounting
is not permitted the tests skip, and fail when BHGBRAIN_REQUIRE_SERVICES is set. The config file
and the server's stderr stay outside it (LiveServer's home), so only the store is affected.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import pty
import re
import select
import shutil
import signal
import sqlite3
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.faults.conftest import ROOT, cli
from tests.live_server import LiveServer, free_port, server_env, unavailable

# Degraded mode (no embedder): what is stored matters here, not its meaning, and the local model
# needs seconds for each of the large memories that fill the disk.
QUICK = {"security": {"rate_limit_rpm": 1_000_000}, "embedding": {"provider": "none"}}
STORAGE = "STORAGE_UNAVAILABLE"


# ---------------------------------------------------------------------------------------------
# helpers


def _run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


@contextlib.contextmanager
def _tmpfs(path: Path, size: str = "40m") -> Iterator[Path]:
    """A tmpfs of ``size`` mounted on ``path`` for the block; skipped (failed in CI) when mounting is
    not permitted."""
    path.mkdir(parents=True, exist_ok=True)
    mounted = _run("mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)) if shutil.which("mount") else None
    if mounted is None or mounted.returncode != 0:
        unavailable(f"cannot mount a tmpfs for the data directory: {mounted.stderr if mounted else 'no mount command'}")
    try:
        yield path
    finally:
        if _run("umount", str(path)).returncode != 0:
            _run("umount", "-l", str(path))  # a process still holds a file: detach it now, freed when closed


def _fill(directory: Path) -> Path:
    """Write a filler file until the file system refuses one more byte."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (1 << 20, 1 << 12, 1):
            while True:
                try:
                    os.write(fd, b"\0" * size)
                except OSError as exc:
                    assert exc.errno in (errno.ENOSPC, errno.EDQUOT), exc
                    break
    finally:
        os.close(fd)
    return filler


def _server(base: Path, data: Path, **config: Any) -> LiveServer:
    """A server whose data directory is ``data`` (its config and stderr stay in ``base``)."""
    return LiveServer(home=base, config={**QUICK, "data_dir": str(data), **config})


def _remember(live: LiveServer, content: str) -> httpx.Response:
    return live.post("remember", {"content": content, "namespace": "faults"})


def _storage_error(response: httpx.Response) -> dict[str, Any]:
    """The response is the clear, retryable storage envelope (never a 500, never a traceback)."""
    assert response.status_code == 503, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "retryable"}, body
    assert body["error"]["code"] == STORAGE and body["error"]["retryable"] is True, body
    assert "Traceback" not in response.text
    return body["error"]


def _integrity(db_path: Path) -> str:
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=30)
    try:
        return db.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        db.close()


def _stored(db_path: Path) -> dict[str, str]:
    """memory id (32 hex digits, as SQLite stores it) → content, of every memory in the file."""
    db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=30)
    try:
        return {row[0]: row[1] for row in db.execute("SELECT id, content FROM memories")}
    finally:
        db.close()


def _hex(memory_id: str) -> str:
    return uuid.UUID(memory_id).hex


def _assert_serves(live: LiveServer, acknowledged: dict[str, str]) -> None:
    """Every acknowledged memory is read back by id, and a full-text search finds one."""
    for memory_id, content in acknowledged.items():
        response = httpx.get(f"{live.url}/resource", params={"uri": f"memory://{memory_id}?namespace=faults"}, timeout=30)
        assert response.status_code == 200, response.text
        assert content in response.text
    word = next(iter(acknowledged.values())).split()[-1]
    found = live.post("search", {"query": word, "namespace": "faults", "mode": "fulltext"})
    assert found.status_code == 200, found.text
    assert found.json()["results"], found.text


def _write_some(live: LiveServer, prefix: str, count: int) -> dict[str, str]:
    written = {}
    for i in range(count):
        content = f"{prefix} fact number {i}: the {prefix}{i}marker lives in rack {i}"
        response = _remember(live, content)
        assert response.status_code == 200 and response.json()["operation"] == "ADD", response.text
        written[response.json()["id"]] = content
    return written


# ---------------------------------------------------------------------------------------------
# 1. the data directory fills up


def test_a_full_data_directory_refuses_writes_cleanly_keeps_reads_and_recovers_without_restart(tmp_path: Path) -> None:
    with _tmpfs(tmp_path / "data") as data:
        live = _server(tmp_path / "base", data, observability={"metrics_enabled": True}).start(timeout=120)
        try:
            acknowledged = _write_some(live, "before", 10)
            filler = _fill(data)
            # A write may still fit in space SQLite already holds (its log is reused); keep writing
            # bigger memories until the disk refuses one: each answer is a success or the envelope.
            refused = None
            for i in range(40):
                content = f"while full {i} " + "payload " * 8_000 + f"fullmarker{i}"
                response = _remember(live, content)
                if response.status_code == 200:
                    acknowledged[response.json()["id"]] = content
                    continue
                refused = _storage_error(response)
                break
            assert refused is not None, "the disk never filled up"
            assert "full" in refused["message"].lower(), refused
            metrics = httpx.get(f"{live.url}/metrics", timeout=30).text  # counted as what it is, not as a bug
            assert 'bhgbrain_tool_calls_total{outcome="STORAGE_UNAVAILABLE",tool="remember"} 1.0' in metrics
            assert 'outcome="INTERNAL"' not in metrics
            _storage_error(live.post("backup", {"action": "create"}))
            by_cli = cli(tmp_path / "base", {}, "backup", "create")
            out, err = by_cli.communicate(timeout=120)
            assert by_cli.returncode == 1 and json.loads(out)["error"]["code"] == STORAGE, out + err[-2000:]
            leftovers = [p.name for p in (data / "backups").iterdir() if p.name.startswith(".")] if (data / "backups").exists() else []
            assert leftovers in ([], [".restore.lock"]), leftovers  # a refused backup leaves no partial file
            _assert_serves(live, acknowledged)
            assert _integrity(data / "bhgbrain.sqlite3") == "ok"

            filler.unlink()
            after = _write_some(live, "after", 3)
            created = live.post("backup", {"action": "create"})
            assert created.status_code == 200, created.text
            assert live.proc is not None and live.proc.poll() is None  # the same process all along
            acknowledged |= after
            _assert_serves(live, acknowledged)
        finally:
            live.stop()
        assert _integrity(data / "bhgbrain.sqlite3") == "ok"
        stored = _stored(data / "bhgbrain.sqlite3")
        assert {_hex(k): v for k, v in acknowledged.items()}.items() <= stored.items()


# ---------------------------------------------------------------------------------------------
# 2. the data directory turns read-only
#
# The kernel refuses `mount -o remount,ro` while a process holds a file open for writing (a running
# server always does: its database, log and WAL), and root writes through any file mode. A running
# server's data directory turns read-only the way a real one does: an ext4 file system mounted
# with errors=remount-ro meets an error (ext4's own trigger_fs_error, for testing) and the kernel
# switches it to read-only under the open files. Such a file system is writable again only after
# an unmount and a check, so the server is stopped for that, then started on the repaired disk.


@contextlib.contextmanager
def _ext4(path: Path, image: Path, *, make: bool = True) -> Iterator[Path]:
    """A 64 MB ext4 image (made first unless ``make`` is false) loop-mounted on ``path`` with errors=remount-ro."""
    path.mkdir(parents=True, exist_ok=True)
    if make:
        with image.open("wb") as out:
            out.truncate(64 << 20)
        made = _run("mkfs.ext4", "-q", "-F", str(image)) if shutil.which("mkfs.ext4") else None
        if made is None or made.returncode != 0:
            unavailable(f"cannot make an ext4 image: {made.stderr if made else 'no mkfs.ext4'}")
    mounted = _run("mount", "-o", "loop,errors=remount-ro", str(image), str(path))
    if mounted.returncode != 0:
        unavailable(f"cannot loop-mount an ext4 image: {mounted.stderr}")
    try:
        yield path
    finally:
        if _run("umount", str(path)).returncode != 0:
            _run("umount", "-l", str(path))


def _device(path: Path) -> str:
    return Path(_run("findmnt", "-n", "-o", "SOURCE", str(path)).stdout.strip()).name


def _mount_options(path: Path) -> set[str]:
    return set(_run("findmnt", "-n", "-o", "OPTIONS", str(path)).stdout.strip().split(","))


def test_b_a_data_directory_turned_read_only_refuses_writes_cleanly_keeps_reads_and_loses_nothing(tmp_path: Path) -> None:
    image = tmp_path / "data.ext4"
    with _ext4(tmp_path / "data", image) as data:
        trigger = Path(f"/sys/fs/ext4/{_device(data)}/trigger_fs_error")
        if not trigger.exists():
            unavailable(f"this kernel has no {trigger}")
        live = _server(tmp_path / "base", data).start(timeout=120)
        try:
            acknowledged = _write_some(live, "before", 10)
            _run("sync")  # written back, as a checkpoint would have (synchronous=NORMAL: a commit is not an fsync)
            trigger.write_text("bhgbrain fault test\n")
            assert _mount_options(data) & {"ro", "emergency_ro"}  # newer kernels say emergency_ro
            for i in range(3):
                refused = _storage_error(_remember(live, f"While read-only {i}: the romarker{i} is not stored"))
                assert "read-only" in refused["message"], refused
            _storage_error(live.post("backup", {"action": "create"}))
            _assert_serves(live, acknowledged)
            assert _integrity(data / "bhgbrain.sqlite3") == "ok"
            assert live.proc is not None and live.proc.poll() is None
        finally:
            live.stop()
    checked = _run("e2fsck", "-fy", str(image))
    assert checked.returncode in (0, 1), checked.stdout  # 1: errors corrected (the injected one)
    with _ext4(tmp_path / "data", image, make=False) as data:
        live = _server(tmp_path / "base", data).start(timeout=120)
        try:
            acknowledged |= _write_some(live, "after", 3)
            _assert_serves(live, acknowledged)
        finally:
            live.stop()
        assert _integrity(data / "bhgbrain.sqlite3") == "ok"
        assert {_hex(k): v for k, v in acknowledged.items()}.items() <= _stored(data / "bhgbrain.sqlite3").items()
        assert not [content for content in _stored(data / "bhgbrain.sqlite3").values() if "romarker" in content]


# ---------------------------------------------------------------------------------------------
# 3. a restore killed half-way

BACKUP_MEMORIES = 12_000


def _big_backup(path: Path, count: int) -> None:
    """A .bhgb file (the product's format) holding ``count`` memories, written directly: thousands
    of remember calls would take minutes."""
    from retention.backups.bhgb_format import FORMAT_VERSION, SCHEMA, sha256_of

    db_path = path.with_suffix(".sqlite3")
    db = sqlite3.connect(db_path)
    db.executescript(SCHEMA)
    now = "2026-01-01T00:00:00+00:00"
    rows = [(uuid.uuid4().hex, "faults", "general", "semantic", f"Restored fact {i}: the backupmarker{i} sits on shelf {i % 97}",
             f"Restored fact {i}", "[]", "import", uuid.uuid4().hex, 0.5, "T2", None, 0, None, 0, "ADD", 0, 0, 0, now, now)
            for i in range(count)]
    db.executemany(
        "INSERT INTO memories (id, namespace, collection, type, content, summary, tags, source, checksum, importance,"
        " retention_tier, expires_at, decay_eligible, review_due, access_count, last_operation, stale, archived,"
        " vector_synced, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    db.commit()
    db.close()
    header = json.dumps({"version": FORMAT_VERSION, "producer": "bhgbrain-django", "memory_count": count,
                         "checksum": sha256_of(db_path), "created_at": now}).encode()
    with path.open("wb") as out:
        out.write(struct.pack("<I", len(header)) + header + db_path.read_bytes())
    db_path.unlink()


def _restore_on_a_terminal(home: Path, backup: Path) -> tuple[subprocess.Popen[bytes], int]:
    """``bhgbrain backup restore`` with stderr on a pseudo-terminal, so it draws its progress bar."""
    primary, secondary = pty.openpty()
    command = [sys.executable, "-m", "bhgbrain_site.cli.main", f"--config={home / 'config.json'}", "backup", "restore", str(backup)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=secondary, env=server_env({}),
                            cwd=Path(__file__).resolve().parents[2])
    os.close(secondary)
    return proc, primary


def _kill_inside_the_replacement(proc: subprocess.Popen[bytes], terminal: int) -> str:
    """SIGKILL the restore as soon as its bar shows memories loaded into the new store (inside the
    one transaction that replaces the store) but not all of them; what the bar drew."""
    drawn, deadline = b"", time.monotonic() + 120
    progress = re.compile(rb"restoring memories.*?(\d+)/(\d+)")
    while time.monotonic() < deadline:
        ready, _, _ = select.select([terminal], [], [], 1)
        if ready:
            try:
                drawn += os.read(terminal, 65536)
            except OSError:  # the process closed the terminal: it ended
                break
            loaded = [(int(done), int(total)) for done, total in progress.findall(drawn)]
            if any(0 < done < total for done, total in loaded):
                proc.send_signal(signal.SIGKILL)
                break
        if proc.poll() is not None:
            break
    proc.wait(timeout=60)
    os.close(terminal)
    return drawn.decode(errors="replace")


def test_c_a_restore_killed_half_way_leaves_the_previous_store_serving_and_a_second_restore_completes(tmp_path: Path) -> None:
    live = LiveServer(home=tmp_path, config=QUICK).start(timeout=120)
    try:
        before = _write_some(live, "kept", 5)
        backup = tmp_path / "big.bhgb"
        _big_backup(backup, BACKUP_MEMORIES)

        proc, terminal = _restore_on_a_terminal(tmp_path, backup)
        drawn = _kill_inside_the_replacement(proc, terminal)
        assert proc.returncode == -signal.SIGKILL, (proc.returncode, drawn[-2000:])

        assert _integrity(tmp_path / "bhgbrain.sqlite3") == "ok"
        assert _stored(tmp_path / "bhgbrain.sqlite3") == {_hex(k): v for k, v in before.items()}  # nothing of the backup
        _assert_serves(live, before)
        assert _remember(live, "Written after the failed restore, kept until the next one").status_code == 200

        again = cli(tmp_path, {}, "backup", "restore", str(backup))
        out, err = again.communicate(timeout=300)
        assert again.returncode == 0, err[-3000:]
        assert json.loads(out)["memory_count"] == BACKUP_MEMORIES
        assert not [p.name for p in (tmp_path / "backups").iterdir() if p.name.startswith((".restore-", ".export-", ".partial-"))]
        assert _integrity(tmp_path / "bhgbrain.sqlite3") == "ok"
        found = live.post("search", {"query": "backupmarker4321", "namespace": "faults", "mode": "fulltext"})
        assert found.status_code == 200 and found.json()["results"], found.text
        assert found.json()["results"][0]["content"].startswith("Restored fact 4321:")
        gone = httpx.get(f"{live.url}/resource", params={"uri": f"memory://{next(iter(before))}"}, timeout=30)
        assert gone.status_code == 404, gone.text
    finally:
        live.stop()


# ---------------------------------------------------------------------------------------------
# 4. PostgreSQL restarted under load (a throwaway cluster of the test's own, never the machine's)


class ThrowawayPostgres:
    """A PostgreSQL cluster in a temporary folder owned by the ``postgres`` OS user (initdb refuses
    to run as root), on a free port; stopped and removed at the end."""

    def __init__(self) -> None:
        binaries = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
        if not binaries or not shutil.which("runuser"):
            unavailable("no PostgreSQL server binaries (/usr/lib/postgresql/*/bin) or no runuser to run them")
        self.bin = binaries[-1].parent
        self.root = Path(tempfile.mkdtemp(prefix="bhgbrain-pg-", dir="/tmp"))
        shutil.chown(self.root, "postgres")
        self.port = free_port()
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/postgres"

    def _as_postgres(self, *command: str) -> subprocess.CompletedProcess[str]:
        return _run("runuser", "-u", "postgres", "--", *command)

    def init(self) -> ThrowawayPostgres:
        made = self._as_postgres(str(self.bin / "initdb"), "-D", str(self.root / "data"), "-U", "postgres",
                                 "--auth=trust", "-N")
        if made.returncode != 0:
            unavailable(f"initdb failed: {made.stderr[-500:]}")
        self.start()
        return self

    def start(self) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        started = self._as_postgres(str(self.bin / "pg_ctl"), "-D", str(self.root / "data"), "-o", options,
                                    "-l", str(self.root / "log"), "-w", "start")
        assert started.returncode == 0, started.stdout + started.stderr

    def stop(self, mode: str = "immediate") -> None:
        stopped = self._as_postgres(str(self.bin / "pg_ctl"), "-D", str(self.root / "data"), "-m", mode, "-w", "stop")
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr

    def remove(self) -> None:
        if (self.root / "data" / "postmaster.pid").exists():
            self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def throwaway_postgres() -> Iterator[ThrowawayPostgres]:
    cluster = ThrowawayPostgres()
    try:
        yield cluster.init()
    finally:
        cluster.remove()


class Load:
    """Clients in threads, each writing a new memory then searching, until stopped; every answer
    (status, error code, seconds, phase) is kept, and every acknowledged memory."""

    def __init__(self, live: LiveServer, clients: int = 4) -> None:
        self.live, self.clients = live, clients
        self.phase = "before"
        self.answers: list[tuple[int, str | None, float, str]] = []
        self.acknowledged: dict[str, str] = {}
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._client, args=(n,), daemon=True) for n in range(clients)]

    def _call(self, tool: str, body: dict[str, Any]) -> httpx.Response | None:
        phase, started = self.phase, time.monotonic()
        try:
            response = httpx.post(f"{self.live.url}/tool/{tool}", json=body, timeout=REQUEST_BOUND_S)
        except httpx.TimeoutException:
            self.answers.append((0, "TIMEOUT", time.monotonic() - started, phase))
            return None
        code = response.json()["error"]["code"] if response.status_code != 200 else None
        self.answers.append((response.status_code, code, time.monotonic() - started, phase))
        return response

    def _client(self, n: int) -> None:
        i = 0
        while not self._stop.is_set():
            content = f"Client {n} load fact {i}: the pgmarker{n}x{i} sits in bay {i}"
            written = self._call("remember", {"content": content, "namespace": "faults"})
            if written is not None and written.status_code == 200:
                self.acknowledged[written.json()["id"]] = content
            self._call("search", {"query": f"pgmarker{n}x{i}", "namespace": "faults", "mode": "fulltext"})
            i += 1

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=2 * REQUEST_BOUND_S)

    def ok_since(self, phase: str) -> int:
        return sum(1 for status, _, _, p in self.answers if p == phase and status == 200)


REQUEST_BOUND_S = 20  # no request may take longer, outage or not


def _wait_for(condition: Any, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return False


def test_d_postgresql_restarted_under_load_fails_requests_cleanly_and_recovers_without_restart(
        tmp_path: Path, throwaway_postgres: ThrowawayPostgres) -> None:
    live = LiveServer(home=tmp_path, config=QUICK, env={"DATABASE_URL": throwaway_postgres.url}).start(timeout=180)
    try:
        with Load(live) as load:
            assert _wait_for(lambda: load.ok_since("before") >= 20, 60), load.answers[-5:]
            throwaway_postgres.stop("immediate")
            load.phase = "outage"
            time.sleep(4)
            health = httpx.get(f"{live.url}/health", timeout=REQUEST_BOUND_S)
            throwaway_postgres.start()
            load.phase = "after"
            assert _wait_for(lambda: load.ok_since("after") >= 20, 60), load.answers[-5:]
        assert live.proc is not None and live.proc.poll() is None  # the same server process throughout
        after_restart = live.post("search", {"query": "pgmarker0x0", "namespace": "faults", "mode": "fulltext"})
        acknowledged = dict(load.acknowledged)
    finally:
        live.stop()

    assert health.status_code == 503 and health.json()["status"] == "unhealthy", health.text
    outcomes = {(status, code) for status, code, _, _ in load.answers}
    assert outcomes <= {(200, None), (503, STORAGE)}, outcomes  # never a 500, never a timeout
    assert (503, STORAGE) in {(s, c) for s, c, _, phase in load.answers if phase == "outage"}
    assert max(seconds for _, _, seconds, _ in load.answers) < REQUEST_BOUND_S
    assert after_restart.status_code == 200 and after_restart.json()["results"], after_restart.text
    import psycopg

    with psycopg.connect(throwaway_postgres.url) as db:
        stored = {row[0].hex: row[1] for row in db.execute("SELECT id, content FROM memories")}
    assert {_hex(k): v for k, v in acknowledged.items()}.items() <= stored.items()  # no acknowledged write lost


def _start_refused(config: Path) -> subprocess.CompletedProcess[str]:
    """``bhgbrain server start`` on this config: it must refuse at once, in one clear line."""
    command = [sys.executable, "-m", "bhgbrain_site.cli.main", f"--config={config}", "server", "start",
               f"--port={free_port()}", "--no-scheduler"]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=server_env(), cwd=ROOT)


def test_e_a_server_on_a_read_only_or_impossible_data_directory_refuses_to_start_with_a_clear_error(tmp_path: Path) -> None:
    with _tmpfs(tmp_path / "ro", size="4m") as mounted:
        (mounted / "data").mkdir()
        assert _run("mount", "-o", "remount,ro", str(mounted)).returncode == 0
        config = tmp_path / "config.json"
        config.write_text(json.dumps({"device": {"id": "ro-test"}, "data_dir": str(mounted / "data")}))
        refused = _start_refused(config)
        assert refused.returncode == 2
        assert f"the data directory {mounted / 'data'} cannot be used: Read-only file system" in refused.stderr
        assert "Traceback" not in refused.stderr and refused.stdout == ""
    (tmp_path / "a-file").write_text("")
    config.write_text(json.dumps({"device": {"id": "ro-test"}, "data_dir": str(tmp_path / "a-file" / "data")}))
    refused = _start_refused(config)
    assert refused.returncode == 2 and "cannot be used: Not a directory" in refused.stderr and "Traceback" not in refused.stderr
    unwritable = Path("/proc") / f"bhgbrain-{uuid.uuid4().hex}" / "config.json"  # no one can create a folder there
    refused = _start_refused(unwritable)
    assert refused.returncode == 2 and f"cannot write the config file {unwritable}" in refused.stderr
    assert "Traceback" not in refused.stderr
