"""Moving a store (``bhgbrain store migrate``): this test store, with real e5 vectors, copied
into a fresh PostgreSQL database (and Qdrant's local mode) by the real child process, then
compared table by table and search by search; a run stopped part-way continues on the next."""
from __future__ import annotations

import contextlib
import os
import sys
import textwrap
import uuid
from collections.abc import Iterator
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission, User
from django.utils import timezone

from bhgbrain_site.cli.store_migrate import equivalent, redacted, store_migrate
from categories.services import category_set
from memories.api_tokens import token_create
from memories.curation.edits import memory_edit
from memories.models import AccessDay, BootstrapSession, CuratorScope, Memory
from retention.archive import memory_archive
from retention.models import BackupRecord
from retention.store_copy import COPIED
from tests.conftest import remember

psycopg = pytest.importorskip("psycopg")
pytestmark = pytest.mark.django_db(transaction=True)  # the child process reads what this test committed

SERVER = "postgresql://postgres@127.0.0.1:5432"
TOPICS = [
    "The staging cluster runs in eu-west-1 behind the corporate VPN",
    "Alice prefers green tea in the afternoon and espresso in the morning",
    "Deploys happen on Tuesdays at 10:00 UTC after the change review",
    "The billing service stores invoices in the archive bucket for seven years",
    "Bob is allergic to peanuts, so team lunches avoid Thai satay",
    "周五下午团队一起去爬山，然后吃火锅",
    "The on-call rotation changes every Monday at noon",
    "Our design system uses an eight pixel grid and the Inter typeface",
    "Backups of the production database run nightly at 02:00",
    "Carol leads the mobile team and works from Lisbon",
    "The quarterly budget review is due on the last Friday of March",
    "Kubernetes upgrades are tested on the canary cluster first",
]


@pytest.fixture
def target() -> Iterator[str]:
    """A brand-new, uniquely named PostgreSQL database, dropped afterwards."""
    name = f"bhgbrain_move_{uuid.uuid4().hex[:12]}"
    try:
        admin = psycopg.connect(f"{SERVER}/postgres", autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as exc:
        reason = f"PostgreSQL on 127.0.0.1:5432 is unreachable ({exc}); CI runs it"
        if os.environ.get("BHGBRAIN_REQUIRE_SERVICES"):  # set by .ci/run: there it must run
            pytest.fail(reason)
        pytest.skip(reason)
    with admin:
        admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield f"{SERVER}/{name}"
        finally:
            # DROP DATABASE waits for every backend of the server to acknowledge it: bounded, so
            # another client's runaway query cannot hang the suite (the database is left behind then)
            admin.execute("SET statement_timeout = '60s'")
            with contextlib.suppress(psycopg.errors.QueryCanceled):
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _query(url: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(url) as conn:
        return conn.execute(sql, params).fetchall()


def _build_store() -> dict[str, Any]:
    """A small store with every kind of row the migration copies."""
    ids = [remember(text, tags=["t" + str(n % 3)], namespace="global" if n % 4 else "infra").id
           for n, text in enumerate(TOPICS)]
    now = timezone.now()
    for turn, (speaker, text) in enumerate([("alice", "Shall we move the retro to Thursday?"),
                                            ("bob", "Thursday works, but after lunch please"),
                                            ("alice", "Great, Thursday at two then")]):
        remember(text, thread="retro-planning", speaker=speaker, occurred_at=now + timedelta(minutes=turn))
    pinned = remember("The company values: candour, care and craft", retention_tier="T0").id
    memory_edit(memory_id=pinned, changes={"content": "The company values: candour, care, craft and calm"}, actor="test")
    memory_archive(memory_id=ids[-1], actor="test")
    category_set(namespace="global", name="values", slot="company-values", content="Candour first", actor="test")
    category_set(namespace="global", name="values", slot="company-values", content="Candour and care", actor="test")
    token_create(name="ci", namespaces=["infra"], read_only=True)
    group = Group.objects.create(name="curators")
    group.permissions.add(Permission.objects.get(codename="view_memory"))
    alice = User.objects.create_user("alice", password="s3cret-pass", is_staff=True)
    alice.groups.add(group)
    alice.user_permissions.add(Permission.objects.get(codename="change_memory"))
    CuratorScope.objects.create(user=alice, namespaces=["infra"])
    AccessDay.objects.create(day=date(2026, 11, 1), namespace="global", accesses=7)
    BootstrapSession.objects.create(namespace="global", section_number=1, status="complete", memory_ids=[pinned])
    BackupRecord.objects.create(path="/nowhere/x.bhgb", size_bytes=10, memory_count=3, checksum="0" * 64,
                                created_at=now)
    return {"memories": Memory.objects.count(), "password": alice.password}


def _assert_copied(report: dict[str, Any]) -> None:
    assert report["ok"] is True, report
    tables = report["verification"]["tables"]
    assert all(entry["ok"] for entry in tables.values()), tables
    for label in ("memories", "memory_revisions", "audit_log", "memory_archive", "categories", "category_revisions",
                  "api_tokens", "auth_user", "auth_group_permissions", "auth_user_user_permissions", "curator_scopes",
                  "access_days", "bootstrap_sessions", "backup_metadata", "collections"):
        assert tables[label]["source"] > 0, label  # the store really had such rows: the check compared something
    assert report["searches"]["ok"] and report["searches"]["compared"] == 24
    # the same ids, each query's scores equal to float32 noise (the two processes embed the query apart)
    assert {mode: entry["equivalent"] for mode, entry in report["searches"]["modes"].items()} == \
        {"fulltext": 8, "semantic": 8, "hybrid": 8}


def test_a_store_moves_to_postgresql_and_searches_the_same(e5, target: str) -> None:
    built = _build_store()
    report = store_migrate(target_url=target, batch_size=4)
    _assert_copied(report)
    assert report["inserted"]["memories"] == built["memories"]
    # Straight from PostgreSQL: the rows, the vectors byte for byte, the full-text rows, the mapped permissions
    assert _query(target, "SELECT count(*) FROM memories")[0][0] == built["memories"]
    source_vectors = {str(m.id): bytes(m.embedding) for m in Memory.objects.all()}
    assert {str(i): bytes(v) for i, v in _query(target, "SELECT id, embedding FROM memories")} == source_vectors
    assert _query(target, "SELECT count(*) FROM memory_search")[0][0] == Memory.objects.filter(archived=False).count()
    assert _query(target, "SELECT password FROM auth_user WHERE username = 'alice'")[0][0] == built["password"]
    assert sorted(r[0] for r in _query(target, """
        SELECT p.codename FROM auth_user_user_permissions up JOIN auth_permission p ON p.id = up.permission_id
        UNION ALL SELECT p.codename FROM auth_group_permissions gp JOIN auth_permission p ON p.id = gp.permission_id
    """)) == ["change_memory", "view_memory"]
    assert _query(target, "SELECT count(*) FROM vector_index_cursors")[0][0] == 0  # device-local: not copied
    # a second run finds everything there: it copies nothing and verifies again
    again = store_migrate(target_url=target, batch_size=4)
    assert again["ok"] and set(again["inserted"].values()) == {0}
    # the sequences moved past the copied keys: the target's next row does not collide
    [(new_id,)] = _query(target, "INSERT INTO categories (namespace, name, slot, content, revision, updated_at) "
                         "VALUES ('global', 'fresh', 'custom', 'x', 1, now()) RETURNING id")
    assert new_id > max(r[0] for r in _query(target, "SELECT id FROM categories WHERE name <> 'fresh'"))


CRASH = textwrap.dedent("""
    import sys
    from bhgbrain_site.cli.store_migrate import child_main

    def crash(table, done):
        if table == {table!r} and done >= {rows}:
            raise RuntimeError("crash in the middle of the copy")

    raise SystemExit(child_main(sys.argv[1:], on_batch=crash))
""")


@pytest.mark.parametrize("table", ["memories", "audit_log"])
def test_an_interrupted_migration_continues_without_duplicates(e5, target: str, tmp_path: Path, table: str) -> None:
    built = _build_store()
    script = tmp_path / "crash.py"
    script.write_text(CRASH.format(table=table, rows=8))
    stopped = store_migrate(target_url=target, batch_size=4, child=[sys.executable, str(script)])
    assert stopped["ok"] is False and stopped["complete"] is False and "run the same command again" in stopped["error"]
    copied = _query(target, f"SELECT count(*) FROM {table}")[0][0]  # noqa: S608 - a test constant
    assert copied == 8  # two whole batches of four committed, nothing after
    if table == "audit_log":
        assert _query(target, "SELECT count(*) FROM memories")[0][0] == built["memories"]

    report = store_migrate(target_url=target, batch_size=4)
    _assert_copied(report)  # equal counts and checksums: nothing twice, nothing missing
    if table == "memories":
        assert report["inserted"]["memories"] == built["memories"] - 8
    else:
        assert report["inserted"]["memories"] == 0 and report["inserted"]["audit_log"] == \
            report["verification"]["tables"]["audit_log"]["source"] - 8


def test_a_store_moves_to_qdrant_and_finds_the_same_by_meaning(e5, target: str, tmp_path: Path) -> None:
    _build_store()
    folder = tmp_path / "qdrant"
    report = store_migrate(target_url=target, vector_index="qdrant", qdrant_path=str(folder))
    assert report["ok"] is True, report
    qdrant = report["verification"]["qdrant"]
    live = Memory.objects.filter(archived=False, embedding__isnull=False).count()
    assert qdrant == {"expected": live, "found": live, "collections": 2, "ok": True}
    modes = report["searches"]["modes"]
    assert modes["semantic"]["required"] and modes["semantic"]["equivalent"] == 8
    assert not modes["fulltext"]["required"]  # Qdrant's BM25 is its own: measured, not required equal
    from qdrant_client import QdrantClient

    client = QdrantClient(path=str(folder))
    try:
        names = [c.name for c in client.get_collections().collections]
        assert sum(client.count(name, exact=True).count for name in names) >= live
    finally:
        client.close()


def test_refuses_a_target_that_holds_another_store(e5, target: str) -> None:
    remember("Only in the other store: the lighthouse keeper's log")
    first = store_migrate(target_url=target)
    assert first["ok"]
    Memory.objects.all().delete()  # this store no longer has that memory: the target is another store
    remember("A different store altogether: the orchard's harvest dates")
    report = store_migrate(target_url=target)
    assert report["ok"] is False and report["error"]["code"] == "CONFLICT"
    assert "another store" in report["error"]["message"]


def test_the_password_never_reaches_the_report() -> None:
    assert redacted("postgres://bob:hunter2@db.example:5433/brain") == "postgres://bob:***@db.example:5433/brain"
    assert redacted("postgres://bob@db/brain") == "postgres://bob@db/brain"


def test_ties_may_come_back_in_any_order_but_nothing_else_may_differ() -> None:
    a = [["x", 0.9], ["y", 0.5], ["z", 0.5], ["w", 0.1]]
    assert equivalent(a, [["x", 0.9], ["z", 0.5], ["y", 0.5], ["w", 0.1]])
    assert equivalent(a, [["x", 0.9], ["y", 0.5], ["z", 0.5], ["v", 0.1]])  # the last group is cut by the limit
    assert not equivalent(a, [["y", 0.9], ["x", 0.5], ["z", 0.5], ["w", 0.1]])
    assert not equivalent(a, [["x", 0.9], ["y", 0.5], ["z", 0.4], ["w", 0.1]])
    assert not equivalent(a, "EMBEDDING_UNAVAILABLE")


def test_the_cli_moves_a_store_and_says_so_in_json(tmp_path: Path, target: str) -> None:
    """As an operator runs it: the console script on its own (degraded, no embedder) SQLite store."""
    import json
    import subprocess

    from tests.live_server import server_env

    config = tmp_path / "config.json"
    config.write_text(json.dumps({"data_dir": str(tmp_path / "data"), "embedding": {"provider": "none"}}))
    bhgbrain = [str(Path(sys.executable).parent / "bhgbrain"), "--config", str(config)]
    for text in ("CLI move: the wiki lives on the intranet", "CLI move: the VPN needs a hardware key"):
        subprocess.run([*bhgbrain, "tool", "remember", json.dumps({"content": text})], check=True, env=server_env(),
                       capture_output=True, timeout=120)
    proc = subprocess.run([*bhgbrain, "store", "migrate", "--to-database", target, "--samples", "2"],
                          capture_output=True, text=True, env=server_env(), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["ok"] and report["inserted"]["memories"] == 2 and report["verification"]["tables"]["memories"]["ok"]
    semantic = report["searches"]["modes"]["semantic"]
    assert semantic["compared"] == 2 and semantic["equivalent"] == 2  # EMBEDDING_UNAVAILABLE on both sides
    assert _query(target, "SELECT count(*) FROM memories")[0][0] == 2
    assert "\x1b[" not in proc.stderr and "2/2" not in proc.stderr  # piped: no bar
    from tests.bhgbrain_site.cli.test_main import _on_terminal

    code, out, terminal = _on_terminal("--config", str(config), "store", "migrate", "--to-database", target)
    assert code == 0 and json.loads(out)["inserted"]["memories"] == 0  # the second run copies nothing
    assert "store migrate: verified" in terminal and f"{len(COPIED)}/{len(COPIED)}" in terminal
    refused = subprocess.run([*bhgbrain, "store", "migrate", "--to-database", "mysql://x@y/z"],
                             capture_output=True, text=True, env=server_env(), timeout=120)
    assert refused.returncode == 1 and json.loads(refused.stdout)["error"]["code"] == "INVALID_INPUT"
