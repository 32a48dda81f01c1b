"""WAL checkpoints run in a background thread, not inside a request's commit."""
from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from bhgbrain_site.core import sqlite_upkeep


def _database(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA wal_autocheckpoint={sqlite_upkeep.AUTOCHECKPOINT_PAGES}")
    conn.execute("CREATE TABLE t (x TEXT)")
    return conn


def test_a_checkpoint_copies_the_log_and_a_quiet_log_is_left_alone(tmp_path: Path) -> None:
    db = tmp_path / "store.sqlite3"
    conn = _database(db)
    for i in range(200):
        conn.execute("INSERT INTO t VALUES (?)", ("x" * 2000 + str(i),))
    wal_frames = Path(f"{db}-wal").stat().st_size // 4096
    assert wal_frames > 100  # the writes are in the log: the raised autocheckpoint did not run
    checkpointer = sqlite_upkeep.Checkpointer(db)
    assert checkpointer.run_once() is True
    busy, log, done = sqlite_upkeep.checkpoint(db)
    assert busy == 0 and done == log  # nothing left to copy
    assert checkpointer.caught_up and checkpointer.run_once() is False  # no new writes: no work
    conn.execute("INSERT INTO t VALUES ('y')")
    assert checkpointer.run_once() is True
    assert conn.execute("SELECT count(*) FROM t").fetchone()[0] == 201
    conn.close()


def test_the_thread_checkpoints_a_moment_after_writes(tmp_path: Path) -> None:
    db = tmp_path / "store.sqlite3"
    conn = _database(db)
    checkpointer = sqlite_upkeep.Checkpointer(db, interval=0.05)
    checkpointer.start()
    try:
        conn.execute("INSERT INTO t VALUES ('z')")
        deadline = time.monotonic() + 5
        while not checkpointer.caught_up and time.monotonic() < deadline:
            time.sleep(0.02)
        assert checkpointer.caught_up and checkpointer.running
    finally:
        checkpointer.stop()
        conn.close()
    assert not checkpointer.running


def test_statistics_are_refreshed_when_the_memories_table_grows_by_a_quarter(tmp_path: Path) -> None:
    db = tmp_path / "store.sqlite3"
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("CREATE TABLE memories (x TEXT, archived INTEGER)")
    conn.execute("CREATE INDEX live ON memories (x) WHERE NOT archived")
    checkpointer = sqlite_upkeep.Checkpointer(db)
    assert checkpointer.analyze_if_grown() is False  # empty: nothing to learn
    conn.executemany("INSERT INTO memories VALUES (?, 0)", [(str(i),) for i in range(1000)])
    assert checkpointer.analyze_if_grown() is True
    assert conn.execute("SELECT count(*) FROM sqlite_stat1 WHERE idx = 'live'").fetchone()[0] == 1
    conn.executemany("INSERT INTO memories VALUES (?, 0)", [(str(i),) for i in range(100)])
    assert checkpointer.analyze_if_grown() is False  # +10 %: the statistics still hold
    conn.executemany("INSERT INTO memories VALUES (?, 0)", [(str(i),) for i in range(300)])
    assert checkpointer.analyze_if_grown() is True  # +40 %
    assert sqlite_upkeep.analysed_rows(db) == 1400
    another = sqlite_upkeep.Checkpointer(db)  # a new process: the statistics on record still hold
    assert another.analyze_if_grown() is False and another.analyzed_at_size == 1400
    conn.executemany("INSERT INTO memories VALUES (?, 0)", [(str(i),) for i in range(400)])
    assert another.analyze_if_grown() is True and another.analyzed_at_size == 1800
    conn.close()


def test_a_missing_database_is_never_created(tmp_path: Path) -> None:
    with pytest.raises(sqlite3.OperationalError):
        sqlite_upkeep.checkpoint(tmp_path / "gone.sqlite3")
    assert not (tmp_path / "gone.sqlite3").exists()


def test_the_product_sqlite_connection_raises_the_in_commit_checkpoint(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The SQLite settings' init command (what every product connection runs) sets the net."""
    from bhgbrain_site import settings as product_settings

    monkeypatch.delenv("DATABASE_URL", raising=False)
    init = product_settings._database()["OPTIONS"]["init_command"]  # noqa: SLF001 - the settings' own helper
    conn = sqlite3.connect(tmp_path / "store.sqlite3")
    for command in filter(None, (part.strip() for part in init.split(";"))):
        conn.execute(command)
    assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == sqlite_upkeep.AUTOCHECKPOINT_PAGES
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()
