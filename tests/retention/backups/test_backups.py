"""Whole-store backups: the .bhgb container, a lossless live restore, and the original's backups."""
from __future__ import annotations

import hashlib
import json
import sqlite3
import struct
from pathlib import Path

import pytest
from django.utils import timezone

from bhgbrain_site.core.calls import CallContext, Principal
from bhgbrain_site.core.errors import Forbidden, InvalidInput, NotFound
from bhgbrain_site.registry import call_tool
from categories.models import Category
from categories.services import category_set
from memories.indexes.embedded import EmbeddedVectorIndex
from memories.models import AuditLog, Memory, MemoryRevision
from memories.services import memories_vector_sync, memory_forget
from retention.backups import bhgb_format, create, restore
from retention.models import ArchivedMemory, BackupRecord
from search.selectors import memories_search
from tests.conftest import remember

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _data_dir(settings, tmp_path: Path) -> Path:  # noqa: ANN001 - pytest-django's settings fixture
    settings.BHGBRAIN_DATA_DIR = tmp_path
    return tmp_path


def _search(query: str, mode: str = "fulltext", namespace: str = "global") -> list[str]:
    hits = memories_search(query=query, namespace=namespace, collection=None, mode=mode, limit=10)
    return [str(h.memory.id) for h in hits]


def _container(path: Path) -> tuple[dict, bytes]:
    raw = path.read_bytes()
    (size,) = struct.unpack("<I", raw[:4])
    return json.loads(raw[4 : 4 + size]), raw[4 + size :]


def test_create_writes_a_checksummed_container_and_lists_it(hash_embedder, tmp_path: Path) -> None:
    remember("The billing service retries webhooks three times")
    remember("Alice owns the deploy pipeline", namespace="team")
    info = create.backup_create(actor="test")
    path = Path(info.path)
    assert path.parent == tmp_path / "backups" and path.suffix == ".bhgb"
    header, db_bytes = _container(path)
    assert header["version"] == 1 and header["memory_count"] == 2 == info.memory_count
    assert header["checksum"] == hashlib.sha256(db_bytes).hexdigest()
    assert header["embedding_model"] == hash_embedder.model_id and header["embedding_dimensions"] == 64
    assert info.size_bytes == path.stat().st_size
    assert BackupRecord.objects.get(path=info.path).memory_count == 2
    assert AuditLog.objects.filter(operation="BACKUP").count() == 1
    copied = tmp_path / "backups" / "from-another-machine.bhgb"
    copied.write_bytes(path.read_bytes())
    listed = [b.path for b in bhgb_format.backups_list()]
    assert set(listed) == {info.path, str(copied)}
    assert not list((tmp_path / "backups").glob(".partial-*"))  # nothing half-written is left


def test_restore_is_lossless_live_and_undoable(hash_embedder) -> None:
    kept = remember("Deploys happen on Tuesdays after the release review", tags=["deploy", "process"], retention_tier="T0")
    remember("Deploys happen on Tuesdays after the release review, with a rollback plan", retention_tier="T0")
    forgotten = remember("The staging cluster has three nodes", namespace="infra", collection="clusters")
    category_set(namespace="global", name="values", slot="company-values", content="Safety first", actor="test")
    before = {m.id: (m.content, m.tags, bytes(m.embedding), m.retention_tier, m.expires_at) for m in Memory.objects.all()}
    revisions = MemoryRevision.objects.count()
    saved = create.backup_create(actor="test")

    memory_forget(memory_id=forgotten.id, namespace="infra", actor="test")
    added = remember("A memory written after the backup")
    category_set(namespace="global", name="values", slot="company-values", content="Speed first", actor="test")
    assert _search("staging cluster", namespace="infra") == []

    result = restore.backup_restore(path=saved.path, actor="test")

    assert result["activated"] is True and result["memory_count"] == 3 and result["vectors_pending"] == 0
    after = {m.id: (m.content, m.tags, bytes(m.embedding), m.retention_tier, m.expires_at) for m in Memory.objects.all()}
    assert after == before
    assert MemoryRevision.objects.count() == revisions
    assert Category.objects.get(namespace="global", name="values").content == "Safety first"
    assert _search("staging cluster", namespace="infra") == [forgotten.id]  # the text index reloaded
    assert _search("staging cluster", mode="semantic", namespace="infra")[0] == forgotten.id  # vectors came back
    assert added.id not in _search("memory written after the backup", mode="hybrid")
    assert kept.id in _search("Tuesdays release review")
    assert AuditLog.objects.filter(operation="RESTORE").count() == 1

    undo = restore.backup_restore(path=result["previous_backup"], actor="test")  # the pre-restore snapshot
    assert undo["memory_count"] == 3
    assert Memory.objects.filter(id=added.id).exists() and not Memory.objects.filter(id=forgotten.id).exists()
    assert Category.objects.get(namespace="global", name="values").content == "Speed first"


def test_another_process_index_sees_the_restore(hash_embedder) -> None:
    first = remember("Rotate the signing keys every ninety days")
    saved = create.backup_create(actor="test")
    memory_forget(memory_id=first.id, namespace=None, actor="test")
    later = remember("Backups are kept for thirty days")
    other = EmbeddedVectorIndex(hash_embedder.model_id, hash_embedder.dimensions)  # loaded before the restore
    assert other.size() == 1
    restore.backup_restore(path=saved.path, actor="test")
    hits = other.search(hash_embedder.embed_query("Rotate the signing keys every ninety days"), namespace="global",
                        collection=None, limit=5, now=timezone.now())
    assert [h.memory_id for h in hits] == [first.id]
    assert later.id not in {h.memory_id for h in hits}


def test_a_corrupt_backup_is_refused_and_nothing_is_lost(hash_embedder) -> None:
    remember("Snapshot me")
    saved = Path(create.backup_create(actor="test").path)
    remember("Written after the snapshot")
    raw = bytearray(saved.read_bytes())
    raw[-100] ^= 0xFF
    saved.write_bytes(bytes(raw))
    with pytest.raises(InvalidInput, match="Backup integrity check failed"):
        restore.backup_restore(path=str(saved), actor="test")
    assert Memory.objects.count() == 2
    assert len(bhgb_format.backups_list()) == 1  # no pre-restore snapshot was taken for a refused file


@pytest.mark.parametrize("payload", [b"", b"\x05\x00\x00\x00{bad", b"\xff\xff\xff\xff", b"\x02\x00\x00\x00[]"])
def test_files_that_are_not_backups_are_refused(payload: bytes, tmp_path: Path) -> None:
    path = bhgb_format.backups_dir() / "junk.bhgb"
    path.write_bytes(payload)
    with pytest.raises(InvalidInput, match="Not a BHGBrain backup"):
        restore.backup_restore(path=str(path), actor="test")


def test_a_valid_container_around_something_else_is_refused() -> None:
    body = b"definitely not sqlite" * 10
    header = json.dumps({"version": 1, "checksum": hashlib.sha256(body).hexdigest()}).encode()
    path = bhgb_format.backups_dir() / "fake.bhgb"
    path.write_bytes(struct.pack("<I", len(header)) + header + body)
    with pytest.raises(InvalidInput, match="not an SQLite database"):
        restore.backup_restore(path=str(path), actor="test")


def test_restore_paths_are_confined_to_the_backups_folder(tmp_path: Path, hash_embedder) -> None:
    with pytest.raises(InvalidInput, match="absolute"):
        restore.backup_restore(path="backups/x.bhgb", actor="test")
    with pytest.raises(InvalidInput, match=".bhgb"):
        restore.backup_restore(path="/etc/passwd", actor="test")
    outside = tmp_path / "elsewhere.bhgb"
    outside.write_bytes(Path(create.backup_create(actor="test").path).read_bytes())
    with pytest.raises(InvalidInput, match="only"):
        restore.backup_restore(path=str(outside), actor="test")
    with pytest.raises(InvalidInput, match="only"):
        restore.backup_restore(path=str(bhgb_format.backups_dir() / ".." / "elsewhere.bhgb"), actor="test")
    with pytest.raises(NotFound):
        restore.backup_restore(path=str(bhgb_format.backups_dir() / "missing.bhgb"), actor="test")
    assert restore.backup_restore(path=str(outside), actor="cli", allow_any_path=True)["activated"] is True


def test_only_one_restore_runs_at_a_time(hash_embedder) -> None:
    saved = create.backup_create(actor="test")
    with restore.exclusive_restore():  # a restore in progress
        with pytest.raises(InvalidInput, match="already in progress"):
            restore.backup_restore(path=saved.path, actor="test")


def _original_backup(path: Path) -> None:
    """A .bhgb as the original BHGBrain 1.4 writes it: its schema, no vectors, global categories."""
    db_path = path.with_suffix(".sqlite3")
    db = sqlite3.connect(db_path)
    db.executescript(
        """
        CREATE TABLE memories (id TEXT PRIMARY KEY, namespace TEXT, collection TEXT, type TEXT, category TEXT,
          content TEXT, summary TEXT, tags TEXT, source TEXT, checksum TEXT, importance REAL, retention_tier TEXT,
          expires_at TEXT, decay_eligible INTEGER, review_due TEXT, access_count INTEGER, last_operation TEXT,
          merged_from TEXT, stale INTEGER, archived INTEGER, vector_synced INTEGER, device_id TEXT,
          created_at TEXT, updated_at TEXT, last_accessed TEXT);
        CREATE TABLE memories_fts (id TEXT, namespace TEXT, content TEXT, summary TEXT, tags TEXT);
        CREATE TABLE categories (name TEXT PRIMARY KEY, slot TEXT, content TEXT, revision INTEGER, updated_at TEXT);
        CREATE TABLE collections (namespace TEXT, name TEXT, embedding_model TEXT, embedding_dimensions INTEGER,
          created_at TEXT, PRIMARY KEY (namespace, name));
        CREATE TABLE audit_log (id INTEGER PRIMARY KEY, timestamp TEXT, namespace TEXT, operation TEXT,
          memory_id TEXT, client_id TEXT, details TEXT);
        CREATE TABLE memory_archive (id INTEGER PRIMARY KEY, memory_id TEXT, summary TEXT, tier TEXT,
          namespace TEXT, created_at TEXT, expired_at TEXT, access_count INTEGER, tags TEXT);
        """
    )
    rows = [
        ("7f1c1d6e-0000-4000-8000-000000000001", "global", "general", "semantic", None,
         "Our API gateway is Kong, configured with declarative YAML", "Our API gateway is Kong", '["gateway"]',
         "agent", "c1", 0.7, "T1", "2027-06-01T00:00:00.000Z", 1, "2027-06-01T00:00:00.000Z", 4, "ADD", None, 0, 0, 1,
         "laptop-a", "2026-01-01T10:00:00.000Z", "2026-01-02T10:00:00.000Z", "2026-03-01T10:00:00.000Z"),
        ("7f1c1d6e-0000-4000-8000-000000000002", "global", "general", "weird-type", None,
         "Our API gateway is Kong, configured with declarative YAML", "dup", "not json", "agent", "c1", 7.0, "T9",
         None, 1, None, 0, "ADD", None, 0, 0, 1, None, "2026-01-01T11:00:00.000Z", "2026-01-01T11:00:00.000Z", None),
    ]
    db.executemany(f"INSERT INTO memories VALUES ({', '.join('?' * 25)})", rows)  # noqa: S608 - placeholders only
    db.execute("INSERT INTO categories VALUES ('coding', 'coding-requirements', 'Type hints everywhere', 3, '2026-01-01T00:00:00Z')")
    db.execute("INSERT INTO audit_log VALUES (1, '2026-01-01T10:00:00Z', 'global', 'ADD', ?, 'claude', '{}')", [rows[0][0]])
    db.execute("INSERT INTO memory_archive VALUES (1, '7f1c1d6e-0000-4000-8000-000000000009', 'Old on-call rota: weekly',"
               " 'T3', 'global', '2025-01-01T00:00:00Z', '2025-03-01T02:00:00Z', 2, '[\"oncall\"]')")
    db.commit()
    db.close()
    body = db_path.read_bytes()
    header = json.dumps({"version": 1, "memory_count": 2, "checksum": hashlib.sha256(body).hexdigest(),
                         "created_at": "2026-03-15T12:00:00Z", "embedding_model": "text-embedding-3-small",
                         "embedding_dimensions": 1536}).encode()
    path.write_bytes(struct.pack("<I", len(header)) + header + body)
    db_path.unlink()


def test_a_backup_of_the_original_bhgbrain_restores(hash_embedder) -> None:
    path = bhgb_format.backups_dir() / "original-1.4.bhgb"
    _original_backup(path)
    result = restore.backup_restore(path=str(path), actor="test")
    assert result["memory_count"] == 1 and result["duplicates_skipped"] == 1 and result["vectors_pending"] == 1
    memory = Memory.objects.get()
    assert memory.tags == ["gateway"] and memory.retention_tier == "T1" and memory.access_count == 4
    assert memory.expires_at is not None and memory.expires_at.year == 2027  # the original's expiry is kept
    assert memory.device_id == "laptop-a" and memory.embedding is None and memory.vector_synced is False
    assert Category.objects.get(name="coding").namespace == "global" and Category.objects.get(name="coding").revision == 3
    assert _search("Kong gateway") == [str(memory.id)]  # full-text works before any vector exists
    archived = ArchivedMemory.objects.get()  # the original archived only a summary: it becomes the content
    assert archived.content == "Old on-call rota: weekly" and archived.tags == ["oncall"] and archived.tier == "T3"
    assert memories_vector_sync()["synced"] == 1
    assert _search("Kong gateway", mode="semantic")[0] == str(memory.id)


def test_the_backup_tool_needs_the_master_token_and_checks_its_input(hash_embedder) -> None:
    scoped = CallContext(actor="t", principal=Principal(name="alice", namespaces=frozenset({"global"})))
    for arguments in ({"action": "list"}, {"action": "create"}):
        with pytest.raises(Forbidden, match="master token"):
            call_tool("backup", arguments, scoped)
    with pytest.raises(InvalidInput, match="path is required"):
        call_tool("backup", {"action": "restore"}, CallContext(actor="t"))
    with pytest.raises(InvalidInput, match="only used by restore"):
        call_tool("backup", {"action": "create", "path": "/tmp/x.bhgb"}, CallContext(actor="t"))
    created = call_tool("backup", {"action": "create"}, CallContext(actor="t"))
    assert call_tool("backup", {"action": "list"}, CallContext(actor="t"))["backups"][0]["path"] == created["path"]
    restored = call_tool("backup", {"action": "restore", "path": created["path"]}, CallContext(actor="t"))
    assert restored["activated"] is True
