"""Retention cleanup (gc, consolidate, feed pruning) and the lossless archive (list, search, restore)."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.test import Client
from django.utils import timezone

from bhgbrain_site.core.errors import Conflict, InvalidInput, NotFound
from memories import funnel
from memories.indexes import feed
from memories.indexes.embedded import EmbeddedVectorIndex
from memories.models import AuditLog, ChangeFeedEntry, Memory
from retention.archive import archive_entries, archive_restore
from retention.cleanup import retention_cleanup
from retention.models import ArchivedMemory
from search.selectors import memories_search
from tests.conftest import remember
from tests.live_server import server_env

pytestmark = pytest.mark.django_db


def _expire(memory_id: str, days_ago: float = 1) -> None:
    Memory.objects.filter(id=memory_id).update(expires_at=timezone.now() - timedelta(days=days_ago))


def _found(query: str, mode: str = "fulltext", namespace: str = "global") -> list[str]:
    return [str(h.memory.id) for h in memories_search(query=query, namespace=namespace, collection=None, mode=mode, limit=10)]


def test_expired_memories_are_archived_whole_then_deleted(hash_embedder) -> None:
    gone = remember("The old VPN gateway lived at vpn-old.example.com", tags=["vpn", "legacy"], retention_tier="T3",
                    importance=0.4)
    kept_t0 = remember("Company value: customers first", retention_tier="T0")
    kept_live = remember("The VPN gateway now lives at vpn.example.com", retention_tier="T2")
    original = Memory.objects.get(id=gone.id)
    other_process = EmbeddedVectorIndex(hash_embedder.model_id, hash_embedder.dimensions)
    assert other_process.size() == 3
    _expire(gone.id)
    Memory.objects.filter(id=kept_t0.id).update(expires_at=timezone.now() - timedelta(days=9))  # T0 never decays

    report = retention_cleanup()

    assert report.as_dict() | {"feed_rows_pruned": 0, "compaction": {}} == {
        "expired": 1, "archived": 1, "deleted": 1, "with_successor": 0, "consolidated": 0, "feed_rows_pruned": 0,
        "dry_run": False, "tier": None, "trimmed": {"T1": 0, "T2": 0, "T3": 0}, "quota_trimmed": {},
        "compaction": {}}
    assert {str(i) for i in Memory.objects.values_list("id", flat=True)} == {kept_t0.id, kept_live.id}
    archived = ArchivedMemory.objects.get()
    assert str(archived.memory_id) == gone.id and archived.content == original.content
    assert archived.tags == ["vpn", "legacy"] and archived.tier == "T3" and archived.importance == 0.4
    assert bytes(archived.embedding) == bytes(original.embedding)
    audit = AuditLog.objects.get(operation="FORGET", memory_id=gone.id)
    assert audit.client_id == "system" and audit.details["reason"] == "expired"
    assert gone.id not in _found("VPN gateway")
    query = hash_embedder.embed_query("The old VPN gateway lived at vpn-old.example.com")
    hits = other_process.search(query, namespace="global", collection=None, limit=5, now=timezone.now())
    assert gone.id not in {h.memory_id for h in hits}  # the delete reached another process's index
    assert retention_cleanup().expired == 0


def test_dry_run_counts_and_tier_limits(hash_embedder) -> None:
    t3 = remember("Dry run: transient note", retention_tier="T3")
    t2 = remember("Dry run: standard note", retention_tier="T2")
    _expire(t3.id)
    _expire(t2.id)
    preview = retention_cleanup(dry_run=True)
    assert (preview.expired, preview.archived, preview.deleted) == (2, 2, 0)
    assert Memory.objects.count() == 2 and not ArchivedMemory.objects.exists()
    only_t3 = retention_cleanup(tier="T3")
    assert only_t3.deleted == 1 and {str(i) for i in Memory.objects.values_list("id", flat=True)} == {t2.id}


def test_without_archive_before_delete_expired_memories_are_only_deleted(hash_embedder, bhg_config) -> None:
    bhg_config.retention.archive_before_delete = False
    gone = remember("Temporary note", retention_tier="T3")
    _expire(gone.id)
    report = retention_cleanup()
    assert (report.deleted, report.archived) == (1, 0)
    assert not ArchivedMemory.objects.exists() and not Memory.objects.exists()


def test_consolidate_marks_long_unused_unimportant_memories_and_they_go_this_cycle(hash_embedder) -> None:
    old = timezone.now() - timedelta(days=200)
    unused = remember("A stale scratch note about lunch", importance=0.3)
    important = remember("An important but unused decision", importance=0.9)
    categorised = remember("A categorised unused note", importance=0.2, category="architecture")
    recent = remember("A recently used note", importance=0.2)
    foundational = remember("Foundational unused note", importance=0.2, retention_tier="T0")
    Memory.objects.exclude(id=recent.id).update(created_at=old, last_accessed=None)
    Memory.objects.filter(id=recent.id).update(created_at=old, last_accessed=timezone.now() - timedelta(days=3))

    report = retention_cleanup(consolidate=True)

    assert (report.consolidated, report.archived) == (1, 1)
    assert str(ArchivedMemory.objects.get().memory_id) == unused.id
    remaining = {str(i) for i in Memory.objects.values_list("id", flat=True)}
    assert remaining == {important.id, categorised.id, recent.id, foundational.id}
    assert AuditLog.objects.filter(operation="STALE", memory_id=unused.id).exists()


def test_old_feed_rows_are_pruned_and_an_idle_index_reloads(hash_embedder, monkeypatch: pytest.MonkeyPatch) -> None:
    first = remember("Feed: first memory")
    idle = EmbeddedVectorIndex(hash_embedder.model_id, hash_embedder.dimensions)
    assert idle.size() == 1
    funnel.delete_memories([Memory.objects.get(id=first.id)], audit=None, at=timezone.now())  # a deletion whose feed row ...
    ChangeFeedEntry.objects.update(created_at=timezone.now() - timedelta(days=8))  # ... is older than the feed keeps
    recent = remember("Feed: second memory")
    assert retention_cleanup().feed_rows_pruned >= 2
    assert [str(m) for m in ChangeFeedEntry.objects.values_list("memory_id", flat=True)] == [recent.id]
    idle.feed.caught_up_at = time.monotonic() - feed.RELOAD_AFTER_IDLE - 1  # idle for 6+ days
    hits = idle.search(hash_embedder.embed_query("Feed: first memory"), namespace="global", collection=None,
                       limit=5, now=timezone.now())
    assert [h.memory_id for h in hits] == [recent.id]  # reloaded: the pruned deletion is not missed


def _archive_three(hash_embedder) -> dict[str, str]:  # noqa: ANN001
    ids = {
        "deploy": remember("Deploys used to need a manual approval from the release manager", tags=["deploy"]).id,
        "db": remember("The reporting database was MySQL 5.7 before the migration").id,
        "other_ns": remember("Deploy approvals in the other team", namespace="team-b").id,
    }
    for memory_id in ids.values():
        _expire(memory_id)
    retention_cleanup()
    return ids


def test_archive_lists_and_searches_within_one_namespace(hash_embedder) -> None:
    ids = _archive_three(hash_embedder)
    listed = archive_entries(namespace="global")
    assert {e["id"] for e in listed} == {ids["deploy"], ids["db"]}
    assert listed[0]["content"] and listed[0]["expired_at"]
    found = archive_entries(namespace="global", query="manual deploy approval")
    assert [e["id"] for e in found][0] == ids["deploy"]
    assert archive_entries(namespace="global", query="MySQL")[0]["id"] == ids["db"]
    assert archive_entries(namespace="global", query="kubernetes") == []
    assert [e["id"] for e in archive_entries(namespace="team-b", query="deploy")] == [ids["other_ns"]]
    assert archive_entries(namespace="global", query="%_\"'*") == []  # any string is safe


def test_restore_brings_the_memory_back_losslessly(hash_embedder) -> None:
    ids = _archive_three(hash_embedder)
    archived = ArchivedMemory.objects.get(memory_id=ids["deploy"])
    result = archive_restore(memory_id=ids["deploy"], namespace="global", actor="test")
    assert result["restored"] is True and result["retention_tier"] == "T2" and result["vector_synced"] is True
    memory = Memory.objects.get(id=ids["deploy"])
    assert memory.content == archived.content and memory.tags == ["deploy"] and memory.created_at == archived.created_at
    assert bytes(memory.embedding) == bytes(archived.embedding) and memory.expires_at > timezone.now()
    assert _found("manual approval release manager") == [ids["deploy"]]
    assert _found("Deploys used to need a manual approval from the release manager", mode="semantic")[0] == ids["deploy"]
    assert ids["deploy"] not in {e["id"] for e in archive_entries(namespace="global")}
    assert AuditLog.objects.filter(operation="RESTORE_ARCHIVE", memory_id=ids["deploy"]).exists()
    with pytest.raises(NotFound):
        archive_restore(memory_id=ids["deploy"], namespace="global", actor="test")  # already restored
    with pytest.raises(NotFound):
        archive_restore(memory_id=ids["other_ns"], namespace="global", actor="test")  # another namespace's
    with pytest.raises(InvalidInput):
        archive_restore(memory_id="not-a-uuid", namespace="global", actor="test")
    with pytest.raises(InvalidInput):
        archive_restore(memory_id=ids["db"], namespace="global", actor="test", tier="T9")
    remember("The reporting database was MySQL 5.7 before the migration")  # written again meanwhile
    with pytest.raises(Conflict, match="same content"):
        archive_restore(memory_id=ids["db"], namespace="global", actor="test")
    assert archive_restore(memory_id=ids["other_ns"], namespace="team-b", actor="test", tier="T0")["expires_at"] is None


def test_archive_over_rest(hash_embedder) -> None:
    ids = _archive_three(hash_embedder)
    client = Client()
    listing = client.get("/api/archive/", {"namespace": "global", "q": "MySQL"})
    assert listing.status_code == 200 and listing.json()["entries"][0]["id"] == ids["db"]
    for params in ({"limit": "0"}, {"limit": "x"}, {"q": "x" * 501}):
        bad = client.get("/api/archive/", params)
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "INVALID_INPUT"
    restored = client.post(f"/api/archive/{ids['db']}/restore/?namespace=global", {"tier": "T1"}, content_type="application/json")
    assert restored.status_code == 200 and restored.json()["retention_tier"] == "T1"
    again = client.post(f"/api/archive/{ids['db']}/restore/?namespace=global", content_type="application/json")  # no body
    assert again.status_code == 404 and again.json()["error"]["code"] == "NOT_FOUND"
    odd = client.post(f"/api/archive/{ids['deploy']}/restore/", {"tier": "T1", "x": 1}, content_type="application/json")
    assert odd.status_code == 400


def test_backups_carry_the_archive(hash_embedder, settings, tmp_path: Path) -> None:  # noqa: ANN001
    from retention.backups import create, restore

    settings.BHGBRAIN_DATA_DIR = tmp_path
    ids = _archive_three(hash_embedder)
    saved = create.backup_create(actor="test")
    archive_restore(memory_id=ids["db"], namespace="global", actor="test")
    restore.backup_restore(path=saved.path, actor="test")
    assert {e["id"] for e in archive_entries(namespace="global")} == {ids["deploy"], ids["db"]}
    assert not Memory.objects.filter(id=ids["db"]).exists()


def test_gc_and_archive_commands(tmp_path: Path) -> None:
    """The console script, as an operator runs it, on its own store."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"data_dir": str(tmp_path), "embedding": {"provider": "none"}}))
    bhgbrain = [str(Path(sys.executable).parent / "bhgbrain"), "--config", str(config)]

    def run(*args: str) -> dict:
        proc = subprocess.run([*bhgbrain, *args], capture_output=True, text=True, env=server_env(), timeout=120)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    memory = run("tool", "remember", json.dumps({"content": "Scratch: call the plumber", "retention_tier": "T3"}))
    assert run("gc")["archived"] == 0  # a T3 memory lives 30 days
    subprocess.run([*bhgbrain, "manage", "shell", "-c",
                    "from datetime import timedelta; from django.utils import timezone; from memories.models import Memory; "
                    "Memory.objects.update(expires_at=timezone.now() - timedelta(days=1))"],
                   check=True, capture_output=True, env=server_env(), timeout=120)
    assert run("gc", "--dry-run")["expired"] == 1
    assert run("gc", "--tier", "T2")["archived"] == 0
    assert run("gc")["archived"] == 1
    entries = run("archive", "search", "plumber")["entries"]
    assert [e["id"] for e in entries] == [memory["id"]]
    assert run("archive", "restore", memory["id"], "--tier", "T2")["restored"] is True
    assert run("archive", "list")["entries"] == []


def test_the_scheduler_runs_the_cleanup_on_the_configured_cron(bhg_config, hash_embedder) -> None:
    from django_q.models import Schedule

    from bhgbrain_site.server.schedules import register_schedules
    from retention.tasks import cleanup

    bhg_config.retention.cleanup_schedule = "30 3 * * *"
    register_schedules()
    job = Schedule.objects.get(name="bhgbrain.retention_cleanup")
    assert (job.func, job.schedule_type, job.cron) == ("retention.tasks.cleanup", Schedule.CRON, "30 3 * * *")
    assert Schedule.objects.get(name="bhgbrain.vector_sync").minutes == 5
    gone = remember("Expired scratch note", retention_tier="T3")
    _expire(gone.id)
    assert cleanup()["archived"] == 1  # what the scheduled job runs
