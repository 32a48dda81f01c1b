"""The embedded vector index: filters, expiry, cross-process freshness via the change feed."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from memories.models import Memory, VectorChange
from memories.services import memory_forget
from memories.vector_index import EmbeddedVectorIndex
from tests.conftest import remember

pytestmark = pytest.mark.django_db


def _fresh_index(embedder) -> EmbeddedVectorIndex:  # noqa: ANN001
    """A second index, as another process would hold."""
    return EmbeddedVectorIndex(embedder.model_id, embedder.dimensions)


def test_search_filters_namespace_and_collection(hash_embedder) -> None:
    a = remember("Alpha fact", namespace="alice", collection="one")
    b = remember("Beta fact", namespace="alice", collection="two")
    remember("Gamma fact", namespace="bob", collection="one")
    index = _fresh_index(hash_embedder)
    query = hash_embedder.embed_query("Alpha fact")
    now = timezone.now()
    assert {h.memory_id for h in index.search(query, namespace="alice", collection=None, limit=10, now=now)} == {a.id, b.id}
    hits = index.search(query, namespace="alice", collection="one", limit=10, now=now)
    assert [h.memory_id for h in hits] == [a.id] and hits[0].cosine == pytest.approx(1.0, abs=1e-5)
    assert index.search(query, namespace="carol", collection=None, limit=10, now=now) == []


def test_expired_memories_are_not_returned_but_non_decaying_are(hash_embedder) -> None:
    t3 = remember("Transient fact", retention_tier="T3")
    t0 = remember("Foundational fact", retention_tier="T0")
    index = _fresh_index(hash_embedder)
    later = timezone.now() + timedelta(days=31)
    ids = {h.memory_id for h in index.search(hash_embedder.embed_query("x"), namespace="global", collection=None, limit=10, now=later)}
    assert ids == {t0.id}
    assert t3.id not in ids


def test_other_process_changes_are_replayed(hash_embedder) -> None:
    index = _fresh_index(hash_embedder)
    query = hash_embedder.embed_query("Alpha fact")
    now = timezone.now()
    assert index.search(query, namespace="global", collection=None, limit=5, now=now) == []
    created = remember("Alpha fact")  # written "elsewhere": this index never saw an upsert call
    assert [h.memory_id for h in index.search(query, namespace="global", collection=None, limit=5, now=now)] == [created.id]
    memory_forget(memory_id=created.id, namespace=None, actor="test")
    assert index.search(query, namespace="global", collection=None, limit=5, now=now) == []
    assert VectorChange.objects.filter(memory_id=created.id).count() == 2


def test_archived_rows_leave_the_index(hash_embedder) -> None:
    created = remember("Alpha fact")
    index = _fresh_index(hash_embedder)
    assert index.size() == 1
    Memory.objects.filter(pk=created.id).update(archived=True)
    VectorChange.objects.create(memory_id=created.id, op="upsert")
    assert index.size() == 0


def test_limit_and_ordering(hash_embedder) -> None:
    ids = [remember(f"Fact number {i}").id for i in range(30)]
    index = _fresh_index(hash_embedder)
    hits = index.search(hash_embedder.embed_query("Fact number 7"), namespace="global", collection=None, limit=5, now=timezone.now())
    assert len(hits) == 5 and hits[0].memory_id == ids[7]
    assert [h.cosine for h in hits] == sorted((h.cosine for h in hits), reverse=True)


def test_growth_beyond_initial_capacity(hash_embedder) -> None:
    index = _fresh_index(hash_embedder)
    index._GROW = 4  # noqa: SLF001 - force several growth steps
    for i in range(10):
        remember(f"Fact {i}")
    assert index.size() == 10
