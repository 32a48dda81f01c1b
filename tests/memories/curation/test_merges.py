"""Every dedup merge keeps a revision; undo puts the memory back as it was (memories/curation/merges.py)."""
from __future__ import annotations

import numpy as np
import pytest

from bhgbrain_site.core.errors import Conflict, NotFound
from memories.conversations import passage
from memories.curation.edits import memory_edit
from memories.curation.merges import memory_undo_merge, merges_for_review, word_diff
from memories.embeddings import from_bytes
from memories.models import AuditLog, ChangeFeedEntry, Memory, MemoryRevision
from tests.conftest import remember

pytestmark = pytest.mark.django_db

BEFORE = "The mobile release ships on Monday"
AFTER = "The mobile release ships on Monday at noon"


@pytest.fixture(autouse=True)
def _merges_in_place(bhg_config) -> None:
    """Merges revised in place (an elaboration under the default update_mode is a new version
    instead: tests/memories/test_temporal.py); a rewording is revised in place in every mode but
    "supersede", and its revision is what this page reviews and undoes."""
    bhg_config.deduplication.update_mode = "in_place"


@pytest.fixture
def merged(e5) -> str:
    first = remember(BEFORE, namespace="alice", tags=["mobile"], retention_tier="T3", importance=0.3)
    again = remember(AFTER, namespace="alice", tags=["release"], importance=0.8)
    assert (again.operation, again.id) == ("UPDATE", first.id)
    return first.id


def test_a_merge_keeps_the_previous_content_and_fields(merged) -> None:
    revision = MemoryRevision.objects.get(memory_id=merged)
    assert (revision.operation, revision.revision, revision.content) == ("MERGE", 1, BEFORE)
    assert revision.state["tags"] == ["mobile"] and revision.state["importance"] == 0.3
    assert revision.state["retention_tier"] == "T3" and revision.state["last_operation"] == "ADD"
    assert revision.state["after_checksum"] == Memory.objects.get(pk=merged).checksum


def test_undo_restores_content_fields_and_vector(merged, e5) -> None:
    before_feed = ChangeFeedEntry.objects.count()
    memory = memory_undo_merge(memory_id=merged, actor="admin:root", namespace="alice")
    stored = Memory.objects.get(pk=merged)
    assert (stored.content, stored.summary, stored.tags) == (BEFORE, BEFORE, ["mobile"])
    assert (stored.importance, stored.retention_tier, stored.last_operation) == (0.3, "T3", "ADD")
    assert stored.checksum == memory.checksum != MemoryRevision.objects.get(operation="MERGE").state["after_checksum"]
    assert np.allclose(from_bytes(stored.embedding), e5.embed_passage(passage(stored)), atol=1e-5)
    assert stored.vector_synced
    assert ChangeFeedEntry.objects.count() == before_feed + 1
    audit = AuditLog.objects.get(operation="UNDO_MERGE")
    assert (audit.memory_id.hex, audit.client_id, audit.details["revision"]) == (stored.id.hex, "admin:root", 1)
    aside = MemoryRevision.objects.get(operation="UNDO_MERGE")
    assert (aside.revision, aside.content, aside.state["undid"]) == (2, AFTER, 1)


def test_undo_is_refused_once_the_memory_changed(merged) -> None:
    memory_edit(memory_id=merged, changes={"content": AFTER + " sharp"}, actor="test")
    with pytest.raises(Conflict, match="changed since"):
        memory_undo_merge(memory_id=merged, actor="test")
    assert Memory.objects.get(pk=merged).content == AFTER + " sharp"
    assert merges_for_review(namespaces=None)[0].status == "changed"


def test_undo_twice_and_other_namespaces_are_refused(merged) -> None:
    with pytest.raises(NotFound):
        memory_undo_merge(memory_id=merged, actor="test", namespace="bob")
    memory_undo_merge(memory_id=merged, actor="test")
    with pytest.raises(Conflict):
        memory_undo_merge(memory_id=merged, actor="test")
    with pytest.raises(NotFound):
        memory_undo_merge(memory_id=remember("Unrelated fact about tea", namespace="alice").id, actor="test")


def test_undo_refuses_to_duplicate_a_live_memory(merged, hash_embedder) -> None:
    twin = remember(BEFORE, namespace="alice", collection="other")  # the old words are live again
    assert twin.operation == "ADD"
    with pytest.raises(Conflict, match="another live memory"):
        memory_undo_merge(memory_id=merged, actor="test")
    assert Memory.objects.get(pk=merged).content == AFTER
    assert not MemoryRevision.objects.filter(operation="UNDO_MERGE").exists()


def test_review_list_is_scoped_and_shows_the_diff(merged) -> None:
    [review] = merges_for_review(namespaces=frozenset({"alice"}))
    assert review.status == "undoable" and ("insert", " at noon") in review.diff
    assert merges_for_review(namespaces=frozenset({"bob"})) == []


def test_t0_edits_still_keep_a_revision_and_other_edits_do_not(hash_embedder) -> None:
    pinned = remember("Architecture decision: one write funnel", retention_tier="T0").id
    plain = remember("Lunch is at noon", retention_tier="T2").id
    memory_edit(memory_id=pinned, changes={"content": "Architecture decision: one write funnel for every write"},
                actor="test")
    memory_edit(memory_id=plain, changes={"content": "Lunch is at one"}, actor="test")
    revision = MemoryRevision.objects.get(memory_id=pinned)
    assert (revision.operation, revision.content) == ("EDIT", "Architecture decision: one write funnel")
    assert not MemoryRevision.objects.filter(memory_id=plain).exists()


def test_word_diff_splits_cjk_into_characters() -> None:
    assert word_diff("数据库每天备份", "数据库每周备份") == [("equal", "数据库每"), ("delete", "天"), ("insert", "周"),
                                                          ("equal", "备份")]
    assert word_diff("ships on Monday", "ships on Friday") == [("equal", "ships on "), ("delete", "Monday"),
                                                               ("insert", "Friday")]
