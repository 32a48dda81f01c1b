""".bhgb backups and fact chains (issue 42): the file carries each memory's validity, successor and
key, live and archived; a restore keeps every chain, following the ids it changes; the original
BHGBrain's backups (none of these columns) still load, valid from their creation."""
from __future__ import annotations

import hashlib
import json
import sqlite3
import struct
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memories.models import Memory
from memories.services import memory_forget
from memories.temporal import fact_chain, supersede
from retention.archive import memory_archive
from retention.backups import bhgb_format, create, restore
from retention.models import ArchivedMemory
from tests.conftest import remember
from tests.retention.backups.test_backups import _original_backup

pytestmark = pytest.mark.django_db

TEMPORAL = ("valid_from", "valid_until", "superseded_by", "fact_key")
JAN, MAR, MAY = (datetime(2026, month, 1, tzinfo=UTC) for month in (1, 3, 5))


@pytest.fixture(autouse=True)
def _data_dir(settings, tmp_path: Path) -> Path:  # noqa: ANN001 - pytest-django's settings fixture
    settings.BHGBRAIN_DATA_DIR = tmp_path
    return tmp_path


def _fields(row: Memory | ArchivedMemory) -> tuple:
    return tuple(getattr(row, name) for name in TEMPORAL)


def _store() -> dict[str, tuple]:
    live = {str(m.id): _fields(m) for m in Memory.objects.all()}
    archived = {f"archived:{a.memory_id}": _fields(a) for a in ArchivedMemory.objects.all()}
    return live | archived


def _a_store_with_chains() -> dict[str, str]:
    """A key's three versions (one of them a late arrival), an explicit chain whose older version is
    archived, and a plain memory."""
    ids = {
        "lyon": remember("Alice lives in Lyon", namespace="alice", key="alice/home-city", valid_from=MAR).id,
        "berlin": remember("Alice lives in Berlin", namespace="alice", key="alice/home-city", valid_from=MAY).id,
        "paris": remember("Alice lives in Paris", namespace="alice", key="alice/home-city", valid_from=JAN).id,
        "kong": remember("The API gateway is Kong", namespace="ops").id,
        "envoy": remember("We moved the API gateway to Envoy", namespace="ops").id,
        "mesh": remember("The gateway now runs inside the service mesh", namespace="ops").id,
        "plain": remember("The lunch menu changes on Mondays", namespace="ops").id,
    }
    supersede(older=[uuid.UUID(ids["kong"])], newer=uuid.UUID(ids["envoy"]), actor="test")
    supersede(older=[uuid.UUID(ids["envoy"])], newer=uuid.UUID(ids["mesh"]), actor="test")
    Memory.objects.filter(id=ids["kong"]).update(retention_tier="T3")
    return ids


def _container(path: Path) -> tuple[dict, bytes]:
    raw = path.read_bytes()
    (size,) = struct.unpack("<I", raw[:4])
    return json.loads(raw[4:4 + size]), raw[4 + size:]


def _rewrite(path: Path, edit: str, *params: tuple) -> None:
    """Change the database inside a .bhgb with SQL statements, and seal it again (new checksum)."""
    header, body = _container(path)
    db_path = path.with_suffix(".sqlite3")
    db_path.write_bytes(body)
    db = sqlite3.connect(db_path)
    for statement, values in zip(edit.split(";"), params, strict=True):
        db.execute(statement, values)
    db.commit()
    db.close()
    body = db_path.read_bytes()
    db_path.unlink()
    header["checksum"] = hashlib.sha256(body).hexdigest()
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<I", len(raw)) + raw + body)


def test_a_backup_carries_validity_successors_and_keys_and_restores_every_chain(hash_embedder) -> None:
    ids = _a_store_with_chains()
    memory_archive(memory_id=ids["envoy"], actor="test", namespace="ops")  # kong goes with it, to the archive
    before = _store()
    assert before[f"archived:{ids['kong']}"][2] == uuid.UUID(ids["envoy"])
    assert before[ids["paris"]] == (JAN, MAR, uuid.UUID(ids["lyon"]), "alice/home-city")
    saved = create.backup_create(actor="test")
    memory_forget(memory_id=ids["berlin"], namespace="alice", actor="test")
    ArchivedMemory.objects.all().delete()

    restore.backup_restore(path=saved.path, actor="test")

    assert _store() == before
    chain = fact_chain(uuid.UUID(ids["berlin"]), namespaces=None)
    assert [str(m.id) for m in chain] == [ids["paris"], ids["lyon"], ids["berlin"]]


def test_a_restore_follows_the_ids_it_changes(hash_embedder) -> None:
    """A second live copy of a fact is dropped (the original's stores could hold one) and an id that
    is not a UUID gets a new one: a ``superseded_by`` naming either still reaches its successor."""
    old = remember("The build server is Jenkins", namespace="ops").id
    new = remember("The build server is GitHub Actions", namespace="ops").id
    older = remember("The build server was a cron job", namespace="ops").id
    supersede(older=[uuid.UUID(older)], newer=uuid.UUID(old), actor="test")
    supersede(older=[uuid.UUID(old)], newer=uuid.UUID(new), actor="test")
    saved = Path(create.backup_create(actor="test").path)
    copy = str(uuid.uuid4())
    _rewrite(saved,
             "INSERT INTO memories SELECT ?, namespace, collection, type, category, content, summary, tags, source, "
             "checksum, importance, retention_tier, expires_at, decay_eligible, review_due, access_count, last_operation, "
             "merged_from, stale, archived, vector_synced, device_id, created_at, updated_at, last_accessed, embedding, "
             "embedding_model, thread, speaker, occurred_at, message_id, event_at, valid_until, status, valid_from, "
             "superseded_by, fact_key FROM memories WHERE id = ?;"
             "UPDATE memories SET superseded_by = ? WHERE id = ?;"
             "UPDATE memories SET id = 'legacy-7' WHERE id = ?;"
             "UPDATE memories SET superseded_by = 'legacy-7' WHERE id = ?",
             (copy, new), (copy, old), (old,), (older,))

    result = restore.backup_restore(path=str(saved), actor="test")

    assert result["duplicates_skipped"] == 1 and Memory.objects.count() == 3
    renamed = Memory.objects.get(content="The build server is Jenkins")
    assert renamed.id not in {uuid.UUID(old), uuid.UUID(new), uuid.UUID(older)}
    assert Memory.objects.get(id=older).superseded_by == renamed.id
    assert renamed.superseded_by == uuid.UUID(new)  # it named the dropped copy: it reaches the first one
    assert Memory.objects.get(id=new).superseded_by is None


def test_a_backup_without_the_temporal_columns_loads_valid_from_its_creation(hash_embedder) -> None:
    path = bhgb_format.backups_dir() / "original-1.4.bhgb"
    _original_backup(path)

    restore.backup_restore(path=str(path), actor="test")

    memory = Memory.objects.get()
    assert _fields(memory) == (datetime(2026, 1, 1, 10, tzinfo=UTC), None, None, None)
    archived = ArchivedMemory.objects.get()
    assert _fields(archived) == (datetime(2025, 1, 1, tzinfo=UTC), None, None, None)


def test_two_current_facts_of_one_key_in_a_file_keep_the_key_on_the_first_only(hash_embedder) -> None:
    first = remember("The office is in Leeds", namespace="ops", key="office").id
    other = remember("The office dog is called Rex", namespace="ops").id
    saved = Path(create.backup_create(actor="test").path)
    _rewrite(saved, "UPDATE memories SET fact_key = 'office' WHERE id = ?", (other,))

    restore.backup_restore(path=str(saved), actor="test")

    keys = dict(Memory.objects.values_list("id", "fact_key"))
    assert keys == {uuid.UUID(first): "office", uuid.UUID(other): None}  # the file's first row keeps it
