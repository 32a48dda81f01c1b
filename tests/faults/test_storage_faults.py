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
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from tests.faults.conftest import cli, unavailable
from tests.live_server import LiveServer, server_env

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
        live = _server(tmp_path / "base", data).start(timeout=120)
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
            _storage_error(live.post("backup", {"action": "create"}))
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
# 3. a restore killed half-way

BACKUP_MEMORIES = 12_000


def _big_backup(path: Path, count: int) -> None:
    """A .bhgb file (the product's format) holding ``count`` memories, written directly: thousands
    of remember calls would take minutes."""
    from retention.backup_format import FORMAT_VERSION, SCHEMA, sha256_of

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
    command = [sys.executable, "-m", "bhgbrain_site.cli", f"--config={home / 'config.json'}", "backup", "restore", str(backup)]
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
