"""The write funnel: every write path reaches a registered indexer, the audit log and the change
feed through memories.funnel, and an index failure after commit only flags rows."""
from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from datetime import timedelta

import pytest
from django.utils import timezone

from categories.services import category_set
from memories import funnel
from memories.access import memories_record_access
from memories.curation.edits import memory_edit
from memories.indexes import embedded
from memories.models import AuditLog, ChangeFeedEntry, Memory
from memories.services import collection_delete, memory_forget, memory_tag
from retention.archive import archive_restore
from retention.backups.create import backup_create
from retention.backups.restore import backup_restore
from retention.cleanup import retention_cleanup
from tests.conftest import remember

pytestmark = pytest.mark.django_db


class RecordingIndexer:
    """A new index, as a future app would add one: one registration, no other wiring."""

    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []

    def written(self, memories: Sequence[Memory], fields: frozenset[str] | None) -> None:
        self.events += [("written", (str(m.id), fields)) for m in memories]

    def removed(self, memory_ids: Sequence[uuid.UUID]) -> None:
        self.events += [("removed", str(i)) for i in memory_ids]

    def cleared(self) -> None:
        self.events.append(("cleared", None))

    def kinds(self, memory_id: str) -> list[str]:
        return [kind for kind, value in self.events if value == memory_id or
                (isinstance(value, tuple) and value[0] == memory_id)]


@pytest.fixture
def indexer() -> Iterator[RecordingIndexer]:
    recording = RecordingIndexer()
    funnel.register_indexer(recording)
    yield recording
    funnel._indexers.remove(recording)  # noqa: SLF001 - undo this test's registration


def test_every_write_path_reaches_a_registered_index(indexer: RecordingIndexer, hash_embedder, bhg_config) -> None:
    first = remember("The billing service runs on Kubernetes", retention_tier="T3").id
    memory_tag(memory_id=first, add=["infra"], remove=[], namespace=None, actor="test")
    memory_edit(memory_id=first, changes={"content": "The billing service runs on Nomad"}, actor="test")
    memory_forget(memory_id=first, namespace=None, actor="test")
    assert indexer.kinds(first) == ["written", "written", "written", "removed"]

    second = remember("Deploys are frozen during the release week", collection="ops", retention_tier="T3").id
    collection_delete(namespace="global", name="ops", force=True, actor="test")
    assert indexer.kinds(second) == ["written", "removed"]

    third = remember("Lunch is at noon on Fridays", retention_tier="T3").id
    Memory.objects.filter(id=third).update(expires_at=timezone.now() - timedelta(hours=1))
    retention_cleanup()
    archive_restore(memory_id=third, namespace="global", actor="test")
    assert indexer.kinds(third) == ["written", "removed", "written"]

    saved = backup_create(actor="test")
    indexer.events.clear()
    backup_restore(path=saved.path, actor="test")
    assert indexer.events[0] == ("cleared", None) and ("written", (third, None)) in indexer.events


def test_each_memory_write_leaves_one_audit_row_and_one_feed_row(hash_embedder) -> None:
    memory_id = remember("The search service is written in Rust").id
    memory_tag(memory_id=memory_id, add=["search"], remove=[], namespace=None, actor="alice")
    memory_forget(memory_id=memory_id, namespace=None, actor="bob")
    audit = list(AuditLog.objects.filter(memory_id=memory_id).order_by("id").values_list("operation", "client_id"))
    assert audit == [("ADD", "test"), ("TAG", "alice"), ("FORGET", "bob")]
    feed = list(ChangeFeedEntry.objects.filter(memory_id=memory_id).order_by("id").values_list("op", flat=True))
    assert feed == ["upsert", "upsert", "delete"]


def test_writes_no_index_can_see_append_no_feed_row(hash_embedder, bhg_config) -> None:
    """An access that moves no expiry and no tier only counts: nothing for the indexes to replay."""
    bhg_config.retention.sliding_window_enabled = False
    memory_id = remember("Architecture decision: one database per service").id  # T0: no expiry to slide
    before = ChangeFeedEntry.objects.count()
    memories_record_access([(uuid.UUID(memory_id), 1, timezone.now())])
    assert Memory.objects.get(id=memory_id).access_count == 1
    assert ChangeFeedEntry.objects.count() == before


def test_writes_that_change_no_memory_are_audited_by_the_funnel_helper(hash_embedder) -> None:
    category_set(namespace="global", name="stack", slot="architecture", content="Django", actor="carol")
    row = AuditLog.objects.get(operation="CATEGORY_SET")
    assert (row.namespace, row.memory_id, row.client_id, row.details["revision"]) == ("global", None, "carol", 1)


def test_an_index_failure_after_commit_flags_the_row_and_loses_nothing(hash_embedder, monkeypatch: pytest.MonkeyPatch,
                                                                       django_capture_on_commit_callbacks) -> None:
    index = embedded.get_vector_index()
    assert index is not None

    def broken(memory: Memory, *, change_id: int | None = None) -> None:
        raise RuntimeError("index down")

    monkeypatch.setattr(index, "upsert", broken)
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        memory_id = remember("The cache TTL is five minutes").id
    assert callbacks  # the index update ran after commit, and failed
    memory = Memory.objects.get(id=memory_id)
    assert memory.vector_synced is False  # flagged for the scheduled vector_sync
    assert ChangeFeedEntry.objects.filter(memory_id=memory_id, op="upsert").exists()  # the feed keeps it
