"""Work files a killed backup leaves behind (``.export-*`` folders, ``.partial-*`` files, ``.restore-*``
folders) are recognised by the process and host in their names and removed by the next backup or
``gc``; a running backup's are kept."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from retention.backups import bhgb_format, create
from retention.cleanup import retention_cleanup
from tests.conftest import remember

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _data_dir(settings, tmp_path: Path) -> Path:  # noqa: ANN001 - pytest-django's settings fixture
    settings.BHGBRAIN_DATA_DIR = tmp_path
    return tmp_path


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _leftovers(pid: int, host: str = bhgb_format.HOST) -> list[Path]:
    backups = bhgb_format.backups_dir()
    export = backups / f".export-{pid}@{host}~abc123"
    export.mkdir()
    (export / "store.sqlite3").write_bytes(b"half an export")
    partial = backups / f".partial-{pid}@{host}~def456.bhgb"
    partial.write_bytes(b"half a container")
    restore = backups / f".restore-{pid}@{host}~ghi789"
    restore.mkdir()
    return [export, partial, restore]


def _age(path: Path, seconds: float) -> None:
    stamp = time.time() - seconds
    for item in [path, *path.rglob("*")] if path.is_dir() else [path]:
        os.utime(item, (stamp, stamp))


def test_the_next_backup_removes_what_a_killed_one_left_and_keeps_a_running_ones(hash_embedder) -> None:
    remember("The billing service retries webhooks three times")
    dead = _leftovers(_dead_pid())
    running = _leftovers(os.getppid())  # a live process of this host: a backup still at work
    info = create.backup_create(actor="test")
    assert not any(path.exists() for path in dead)
    assert all(path.exists() for path in running)
    assert Path(info.path).exists()
    names = {path.name for path in bhgb_format.backups_dir().iterdir()}
    assert names == {Path(info.path).name, *(path.name for path in running)}  # its own work is gone too


def test_gc_removes_them_too(hash_embedder) -> None:
    dead = _leftovers(_dead_pid())
    retention_cleanup()
    assert not any(path.exists() for path in dead)


def test_unowned_work_is_removed_only_once_untouched_for_a_day(hash_embedder) -> None:
    backups = bhgb_format.backups_dir()
    old_style = backups / ".export-k2j3h4"  # a release whose names carried no process
    old_style.mkdir()
    (old_style / "store.sqlite3").write_bytes(b"x")
    elsewhere = _leftovers(_dead_pid(), host="another-host")  # its pids mean nothing here
    fresh = backups / ".partial-q9w8e7.bhgb"
    fresh.write_bytes(b"y")
    _age(old_style, bhgb_format.UNOWNED_AFTER_S + 60)
    for path in elsewhere:
        _age(path, bhgb_format.UNOWNED_AFTER_S + 60)
    elsewhere_recent = _leftovers(_dead_pid(), host="another-host-2")
    removed = bhgb_format.leftovers_remove()
    assert set(removed) == {old_style.name, *(path.name for path in elsewhere)}
    assert fresh.exists() and all(path.exists() for path in elsewhere_recent)


def test_a_backups_work_is_named_for_its_process(hash_embedder) -> None:
    for n in range(5):
        remember(f"Memory number {n} about the deploy pipeline")
    seen: list[str] = []

    def look(stage: str, done: int, total: int | None) -> None:
        seen.extend(path.name for path in bhgb_format.backups_dir().iterdir() if path.name.startswith("."))

    create.backup_create(actor="test", progress=look)
    assert seen and all(name.startswith(f".export-{os.getpid()}@{bhgb_format.HOST}~") for name in seen)
    match = bhgb_format.LEFTOVER.match(seen[0])
    assert match is not None and int(match.group(2)) == os.getpid()
