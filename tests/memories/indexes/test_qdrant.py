"""The Qdrant vector index (local mode, the real qdrant-client engine) and repair from it."""
from __future__ import annotations

import io
import json
import uuid
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone
from qdrant_client import models

from bhgbrain_site.core.errors import InvalidInput
from memories import funnel
from memories.indexes.qdrant import QdrantVectorIndex
from memories.indexes.qdrant.points import collection_name
from memories.interop.repair import repair_from_index
from memories.models import Memory
from memories.services import collection_delete, memories_vector_sync, memory_forget, memory_tag
from memories.tasks import vector_sync
from search import fulltext
from search.selectors import memories_search
from tests.conftest import remember

pytestmark = pytest.mark.django_db(transaction=True)


def _point(index: QdrantVectorIndex, memory_id: str, namespace: str = "global", collection: str = "general"):  # noqa: ANN202
    found = index.client().retrieve(collection_name(namespace, collection), ids=[memory_id], with_payload=True)
    return found[0] if found else None


def _semantic(query: str, namespace: str = "global", collection: str | None = None) -> list[str]:
    hits = memories_search(query=query, namespace=namespace, collection=collection, mode="semantic", limit=10)
    return [str(h.memory.id) for h in hits]


def test_writes_reach_qdrant_in_the_original_layout(qdrant: QdrantVectorIndex, hash_embedder) -> None:
    created = remember("The on-call rotation changes every Monday", tags=["oncall"], importance=0.7)
    point = _point(qdrant, created.id)
    assert point is not None
    payload = point.payload
    assert payload["content"] == "The on-call rotation changes every Monday" and payload["namespace"] == "global"
    assert payload["tags"] == ["oncall"] and payload["importance"] == 0.7 and payload["device_id"] == "test-device"
    memory = Memory.objects.get(id=created.id)
    assert payload["expires_at"] == int(memory.expires_at.timestamp()) and payload["decay_eligible"] is True
    assert _semantic("The on-call rotation changes every Monday") == [created.id]
    assert qdrant.health()[0] == "healthy"

    memory_tag(memory_id=created.id, add=["team-a"], remove=[], namespace=None, actor="test")
    assert _point(qdrant, created.id).payload["tags"] == ["oncall", "team-a"]  # tags reach the payload
    memory_forget(memory_id=created.id, namespace=None, actor="test")
    assert _point(qdrant, created.id) is None


def test_expiry_namespace_and_collection_filters(qdrant: QdrantVectorIndex) -> None:
    live = remember("Alpha: the cache TTL is five minutes", collection="infra")
    expiring = remember("Alpha: temporary feature flag for the beta", retention_tier="T3")
    funnel.update_memories([expiring.id], {"expires_at": timezone.now() - timedelta(hours=1)}, audit=None,
                           at=timezone.now())
    qdrant.sync()
    assert _semantic("Alpha: temporary feature flag for the beta") == [live.id]  # the expired one is filtered out
    assert _semantic("Alpha: the cache TTL is five minutes", collection="general") == []
    # names collide (a_b + c vs a + b_c): the payload filter keeps the namespaces apart
    left = remember("Collision: left side", namespace="a_b", collection="c")
    right = remember("Collision: right side", namespace="a", collection="b_c")
    assert collection_name("a_b", "c") == collection_name("a", "b_c")
    assert _semantic("Collision: left side", namespace="a") == [right.id]
    assert _semantic("Collision: right side", namespace="a_b") == [left.id]
    collection_delete(namespace="global", name="infra", force=True, actor="test")
    assert _point(qdrant, live.id, collection="infra") is None


def test_an_expiry_only_change_sets_two_payload_keys_without_pushing_the_point_again(
        qdrant: QdrantVectorIndex, hash_embedder, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: ANN001
    created = remember("Expiry: the staging database is wiped every Sunday", retention_tier="T3")
    before = _point(qdrant, created.id)
    pushed: list[set] = []
    push = qdrant.push
    monkeypatch.setattr(qdrant, "push", lambda ids, reset: (pushed.append(set(ids)), push(ids, reset)))
    now, later = timezone.now(), timezone.now() + timedelta(days=400)
    funnel.update_memories([created.id], {"expires_at": later}, audit=None, at=now)  # syncs after commit
    point = _point(qdrant, created.id)
    assert point.payload["expires_at"] == int(later.timestamp()) and pushed == []
    assert {key: value for key, value in point.payload.items() if key != "expires_at"} == \
        {key: value for key, value in before.payload.items() if key != "expires_at"}
    query = hash_embedder.embed_query("Expiry: the staging database is wiped every Sunday")
    found = qdrant.search(query, namespace="global", collection=None, limit=5, now=now + timedelta(days=200))
    assert [hit.memory_id for hit in found] == [created.id]  # past the old expiry (T3), before the new one
    funnel.update_memories([created.id], {"decay_eligible": False}, audit=None, at=now)  # pushed whole: a
    assert _point(qdrant, created.id).payload["expires_at"] is None and len(pushed) == 1  # null key is kept
    memory_forget(memory_id=created.id, namespace=None, actor="test")
    assert _point(qdrant, created.id) is None and len(pushed) == 2  # a deletion is pushed as before


def test_an_expiry_only_change_of_a_point_qdrant_lost_pushes_it_whole(qdrant: QdrantVectorIndex) -> None:
    kept = remember("Expiry: the backup window is at 02:00")
    lost = remember("Expiry: the VPN gateway restarts nightly")
    name = collection_name("global", "general")
    qdrant.client().delete(name, points_selector=models.PointIdsList(points=[lost.id]), wait=True)  # lost by hand
    later = timezone.now() + timedelta(days=400)
    funnel.update_memories([kept.id, lost.id], {"expires_at": later}, audit=None, at=timezone.now())
    for memory_id in (kept.id, lost.id):
        point = _point(qdrant, memory_id)
        assert point is not None and point.payload["expires_at"] == int(later.timestamp())
    assert _point(qdrant, lost.id).payload["content"] == "Expiry: the VPN gateway restarts nightly"


def test_an_outage_delays_changes_but_loses_none(qdrant: QdrantVectorIndex, monkeypatch: pytest.MonkeyPatch) -> None:
    kept = remember("Outage: written before the outage")
    real_client = qdrant.client()

    def down() -> object:
        raise ConnectionError("qdrant is down")

    monkeypatch.setattr(qdrant.store, "client", down)  # the Qdrant the index talks to
    during = remember("Outage: written during the outage")
    memory_forget(memory_id=kept.id, namespace=None, actor="test")
    assert Memory.objects.get(id=during.id).vector_synced is False  # flagged, never lost
    assert qdrant.health()[0] == "unhealthy"
    monkeypatch.setattr(qdrant.store, "client", lambda: real_client)
    assert real_client.retrieve(collection_name("global", "general"), ids=[kept.id])  # the delete has not landed

    result = vector_sync()  # the scheduled job

    assert result["synced"] == 1 and "feed_rows_applied" in result
    assert real_client.retrieve(collection_name("global", "general"), ids=[kept.id]) == []
    assert _point(qdrant, during.id) is not None and Memory.objects.get(id=during.id).vector_synced is True


def _forget_locally() -> None:
    """A device whose database lost everything (or a new device): Qdrant still has the points."""
    for memory_id in Memory.objects.values_list("id", flat=True):
        fulltext.remove_memory(memory_id)
    Memory.objects.all().delete()


def test_repair_rebuilds_the_store_from_qdrant(qdrant: QdrantVectorIndex, hash_embedder) -> None:
    first = remember("Repair: the build cache lives on S3", tags=["ci"], retention_tier="T1")
    second = remember("Repair: releases are cut on Thursdays", namespace="team")
    before = {m.id: (m.content, m.expires_at.replace(microsecond=0), m.device_id, m.retention_tier, m.tags)
              for m in Memory.objects.all()}
    name = collection_name("global", "general")
    qdrant.client().upsert(name, points=[
        models.PointStruct(id=str(uuid.uuid4()), vector=hash_embedder.embed_passage("old").tolist(),
                           payload={"namespace": "global", "type": "semantic", "tags": []}),  # pre-1.3: no content
        models.PointStruct(id=str(uuid.uuid4()), vector=hash_embedder.embed_passage("laptop").tolist(),
                           payload={"namespace": "global", "collection": "general", "content": "From the laptop: use pnpm",
                                    "device_id": "laptop-b", "retention_tier": "T2", "decay_eligible": True,
                                    "expires_at": int((timezone.now() + timedelta(days=40)).timestamp()),
                                    "created_at": "2026-01-05T10:00:00Z"}),
    ])
    _forget_locally()

    preview = repair_from_index(dry_run=True, device_id=None, actor="test")
    assert (preview.recovered, preview.skipped_no_content, preview.points_scanned) == (3, 1, 4)
    assert not Memory.objects.exists()

    report = repair_from_index(dry_run=False, device_id=None, actor="test")

    assert report.recovered == 3 and report.errors == 0 and report.collections_scanned == 2
    after = {m.id: (m.content, m.expires_at.replace(microsecond=0), m.device_id, m.retention_tier, m.tags)
             for m in Memory.objects.filter(id__in=list(before))}
    assert after == before  # expiry, tier, tags and device kept
    laptop = Memory.objects.get(device_id="laptop-b")
    assert laptop.created_at.year == 2026 and laptop.expires_at > timezone.now() + timedelta(days=39)
    assert all(m.vector_synced for m in Memory.objects.all())  # vectors came from Qdrant
    assert [str(h.memory.id) for h in memories_search(query="build cache S3", namespace="global", collection=None,
                                                      mode="fulltext", limit=5)] == [first.id]
    assert _semantic("Repair: releases are cut on Thursdays", namespace="team") == [second.id]
    again = repair_from_index(dry_run=False, device_id=None, actor="test")
    assert (again.recovered, again.already_in_sqlite) == (0, 3)


def test_repair_can_take_one_device_only(qdrant: QdrantVectorIndex, bhg_config) -> None:
    remember("Device filter: mine")
    _forget_locally()
    report = repair_from_index(dry_run=False, device_id="someone-else", actor="test")
    assert (report.recovered, report.skipped_other_device) == (0, 1)
    assert repair_from_index(dry_run=False, device_id="test-device", actor="test").recovered == 1


def test_restore_never_touches_other_devices_points(qdrant: QdrantVectorIndex, hash_embedder) -> None:
    from retention.backups import create, restore

    kept = remember("Restore: in the backup")
    saved = create.backup_create(actor="test")
    later = remember("Restore: written after the backup")
    foreign = str(uuid.uuid4())
    qdrant.client().upsert(collection_name("global", "general"), points=[models.PointStruct(
        id=foreign, vector=hash_embedder.embed_passage("x").tolist(), payload={"namespace": "global", "content": "other device"})])
    restore.backup_restore(path=saved.path, actor="test")
    client = qdrant.client()
    name = collection_name("global", "general")
    assert client.retrieve(name, ids=[later.id]) == []  # this store's removed memory: its point goes
    assert client.retrieve(name, ids=[kept.id]) and client.retrieve(name, ids=[foreign])  # the rest stays


def test_repair_needs_the_qdrant_index(hash_embedder) -> None:
    with pytest.raises(InvalidInput, match="vector_index"):
        repair_from_index(dry_run=True, device_id=None, actor="test")


def test_vector_sync_retries_embedding_too(qdrant: QdrantVectorIndex) -> None:
    created = remember("Sync: a memory whose vector went missing")
    Memory.objects.filter(id=created.id).update(vector_synced=False, embedding=None)
    assert memories_vector_sync()["synced"] == 1
    assert _point(qdrant, created.id) is not None


def test_vector_sync_refills_a_qdrant_that_lost_its_points(qdrant: QdrantVectorIndex) -> None:
    """A wiped Qdrant (a lost volume, a collection deleted by hand): the feed cursor says all was
    pushed, so only the refill brings the points back, from the database (no embedding)."""
    kept = remember("Refill: the staging database lives in eu-west-1")
    other = remember("Refill: the billing queue is named invoices-v2", namespace="team", collection="ops")
    forgotten = remember("Refill: a memory that was forgotten before the loss")
    memory_forget(memory_id=str(forgotten.id), namespace="global", actor="test")
    assert vector_sync()["refilled"] == 0  # nothing missing: nothing pushed
    client = qdrant.client()
    for name in qdrant.collections(fresh=True):
        client.delete_collection(name)
    assert qdrant.collections(fresh=True) == []

    result = vector_sync()
    assert (result["feed_rows_applied"], result["refilled"]) == (0, 2)
    assert _point(qdrant, kept.id) is not None and _point(qdrant, forgotten.id) is None
    assert _point(qdrant, other.id, "team", "ops").payload["content"].startswith("Refill: the billing")
    assert _semantic("where does the staging database live") == [str(kept.id)]
    assert vector_sync()["refilled"] == 0


def test_another_devices_memories_come_back_from_the_payload(qdrant: QdrantVectorIndex, settings) -> None:  # noqa: ANN001
    """The seed's multi-device search: another device's point without a local row is shown from its payload."""
    from search.services import search_run

    settings.BHGBRAIN_DEVICE_ID = "laptop-a"  # written on the other device ...
    shared = remember("Multi-device: the staging database password rotates monthly", tags=["db"])
    _forget_locally()  # ... which this device's store never held
    settings.BHGBRAIN_DEVICE_ID = "test-device"
    assert _semantic("Multi-device: the staging database password rotates monthly") == [shared.id]
    result = search_run(query="Multi-device: the staging database password rotates monthly", namespace="global",
                        collection=None, mode="semantic", limit=5)
    hit = result["results"][0]
    assert hit["id"] == shared.id and hit["content"].startswith("Multi-device") and hit["tags"] == ["db"]
    assert hit["device_id"] == "laptop-a"
    assert _semantic("Multi-device: the staging database password rotates monthly", namespace="other") == []
    assert not Memory.objects.exists()  # nothing was written by reading


def test_a_deletion_not_yet_pushed_never_shows_as_a_remote_memory(qdrant: QdrantVectorIndex, monkeypatch) -> None:  # noqa: ANN001
    """E.g. the scheduler's cleanup could not reach Qdrant: its DELETE waits in the feed."""
    gone = remember("Pending delete: the old build server was jenkins-01")
    with monkeypatch.context() as patched:
        patched.setattr(qdrant, "sync", lambda: 0)  # another process: it records, it cannot push
        memory_forget(memory_id=gone.id, namespace=None, actor="test")
    assert _point(qdrant, gone.id) is not None  # still in Qdrant ...
    assert _semantic("Pending delete: the old build server was jenkins-01") == []  # ... never shown
    assert _point(qdrant, gone.id) is None  # the search pushed the pending DELETE first


def test_own_points_without_a_row_are_not_shown_until_repair(qdrant: QdrantVectorIndex) -> None:
    mine = remember("Own device: the VPN config lives in the infra repo")
    _forget_locally()  # a lost store: repair brings it back
    assert _semantic("Own device: the VPN config lives in the infra repo") == []
    assert repair_from_index(dry_run=False, device_id=None, actor="test").recovered == 1
    assert _semantic("Own device: the VPN config lives in the infra repo") == [mine.id]


class _Terminal(io.StringIO):
    """An output that says it is a terminal (the progress bar draws only on one)."""

    def isatty(self) -> bool:
        return True


def _manage_repair(*args: str, stderr: io.StringIO | None = None) -> dict:
    out = io.StringIO()
    call_command("repair", *args, stdout=out, stderr=stderr or io.StringIO())
    return json.loads(out.getvalue())


def test_manage_py_repair(qdrant: QdrantVectorIndex) -> None:
    mine = remember("Manage repair: the on-call rota lives in PagerDuty")
    remember("Manage repair: staging deploys need a green build", namespace="team")
    _forget_locally()
    quiet = io.StringIO()
    preview = _manage_repair("--dry-run", stderr=quiet)
    assert (preview["dry_run"], preview["recovered"], preview["points_scanned"]) == (True, 2, 2)
    assert not Memory.objects.exists() and quiet.getvalue() == ""  # not a terminal: no progress bar
    assert _manage_repair("--device-id", "someone-else")["skipped_other_device"] == 2
    terminal = _Terminal()
    report = _manage_repair(stderr=terminal)
    assert report["recovered"] == 2 and Memory.objects.count() == 2
    assert Memory.objects.get(id=mine.id).content == "Manage repair: the on-call rota lives in PagerDuty"
    assert "repair: bhgbrain_" in terminal.getvalue() and "2/?" in terminal.getvalue()
    assert _manage_repair()["already_in_sqlite"] == 2


def test_manage_py_repair_without_qdrant_is_a_command_error(hash_embedder) -> None:
    with pytest.raises(CommandError, match="vector_index"):
        _manage_repair()
