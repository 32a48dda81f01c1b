"""The curation services behind the console's actions (memories/curation/edits.py): the same rules as
the tools, one audit row each, nothing written when nothing changes."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from bhgbrain_site.core.errors import Conflict, EmbeddingUnavailable, InvalidInput, NotFound
from memories.curation.edits import (
    memory_extend_expiry,
    memory_keep,
    memory_move,
    memory_reembed,
    memory_review_confirm,
    memory_set_tier,
    memory_unpin,
)
from memories.models import AuditLog, Collection, Memory
from tests.conftest import remember

pytestmark = pytest.mark.django_db


@pytest.fixture
def memory_id(hash_embedder) -> str:
    return remember("The staging database is restored every night", namespace="alice").id


def test_set_tier_writes_only_a_change(memory_id) -> None:
    assert memory_set_tier(memory_id=memory_id, tier="T2", actor="test") is False
    assert memory_set_tier(memory_id=memory_id, tier="T1", actor="test", namespace="alice") is True
    memory = Memory.objects.get(pk=memory_id)
    assert memory.retention_tier == "T1" and memory.review_due is not None
    assert AuditLog.objects.filter(operation="EDIT").count() == 1
    with pytest.raises(NotFound):
        memory_set_tier(memory_id=memory_id, tier="T3", actor="test", namespace="bob")
    with pytest.raises(InvalidInput, match="retention_tier"):
        memory_set_tier(memory_id=memory_id, tier="T7", actor="test")


def test_unpin_makes_a_pinned_memory_t1(memory_id) -> None:
    assert memory_unpin(memory_id=memory_id, actor="test") is False
    memory_set_tier(memory_id=memory_id, tier="T0", actor="test")
    assert memory_unpin(memory_id=memory_id, actor="test") is True
    memory = Memory.objects.get(pk=memory_id)
    assert (memory.retention_tier, memory.decay_eligible) == ("T1", True)
    assert memory.expires_at > timezone.now() + timedelta(days=364)


def test_extend_counts_from_the_expiry_or_from_now(memory_id) -> None:
    expires = Memory.objects.get(pk=memory_id).expires_at
    assert memory_extend_expiry(memory_id=memory_id, actor="test").expires_at == expires + timedelta(days=90)
    Memory.objects.filter(pk=memory_id).update(expires_at=timezone.now() - timedelta(days=3))
    extended = memory_extend_expiry(memory_id=memory_id, actor="test").expires_at
    assert timezone.now() + timedelta(days=89) < extended <= timezone.now() + timedelta(days=90)
    assert AuditLog.objects.filter(operation="EXTEND").count() == 2
    memory_set_tier(memory_id=memory_id, tier="T0", actor="test")
    with pytest.raises(InvalidInput, match="never expire"):
        memory_extend_expiry(memory_id=memory_id, actor="test")


def test_review_confirm_is_for_t1(memory_id) -> None:
    with pytest.raises(InvalidInput, match="only T1"):
        memory_review_confirm(memory_id=memory_id, actor="test")
    memory_set_tier(memory_id=memory_id, tier="T1", actor="test")
    Memory.objects.filter(pk=memory_id).update(review_due=timezone.now() - timedelta(days=2))
    confirmed = memory_review_confirm(memory_id=memory_id, actor="test")
    assert confirmed.review_due > timezone.now() + timedelta(days=364)
    assert AuditLog.objects.get(operation="REVIEW").details["review_due_before"] is not None


def test_keep_clears_stale_and_renews(memory_id) -> None:
    with pytest.raises(InvalidInput, match="not a consolidation candidate"):
        memory_keep(memory_id=memory_id, actor="test")
    Memory.objects.filter(pk=memory_id).update(stale=True, expires_at=timezone.now() - timedelta(seconds=1))
    kept = memory_keep(memory_id=memory_id, actor="test")
    stored = Memory.objects.get(pk=memory_id)
    assert not stored.stale and stored.expires_at == kept.expires_at > timezone.now() + timedelta(days=89)


def test_move_creates_the_collection_and_respects_its_lock(memory_id, hash_embedder) -> None:
    assert memory_move(memory_id=memory_id, collection="general", actor="test") is False
    assert memory_move(memory_id=memory_id, collection="ops", actor="test") is True
    assert Collection.objects.get(namespace="alice", name="ops").embedding_model == hash_embedder.model_id
    Collection.objects.create(namespace="alice", name="old", embedding_model="other/model", embedding_dimensions=3)
    with pytest.raises(Conflict, match="other/model"):
        memory_move(memory_id=memory_id, collection="old", actor="test")
    with pytest.raises(InvalidInput, match="collection"):
        memory_move(memory_id=memory_id, collection="no/slashes", actor="test")
    assert Memory.objects.get(pk=memory_id).collection == "ops"


def test_reembed_needs_an_embedder(memory_id, no_embedder) -> None:
    with pytest.raises(EmbeddingUnavailable):
        memory_reembed(memory_id=memory_id, actor="test")
    with pytest.raises(NotFound):
        memory_reembed(memory_id=memory_id, actor="test", namespace="bob")
