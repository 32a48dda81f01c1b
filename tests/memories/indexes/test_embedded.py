"""The embedded vector index: filters, expiry, cross-process freshness via the change feed."""
from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest
from django.utils import timezone

from memories import funnel
from memories.indexes import embedded, sketch
from memories.indexes.embedded import EmbeddedVectorIndex
from memories.models import ChangeFeedEntry
from memories.services import memory_forget
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
    assert ChangeFeedEntry.objects.filter(memory_id=created.id).count() == 2


def test_archived_rows_leave_the_index(hash_embedder) -> None:
    created = remember("Alpha fact")
    index = _fresh_index(hash_embedder)
    assert index.size() == 1
    funnel.update_memories([created.id], {"archived": True}, audit=None, at=timezone.now())
    assert index.size() == 0


def test_limit_and_ordering(hash_embedder) -> None:
    ids = [remember(f"Fact number {i}").id for i in range(30)]
    index = _fresh_index(hash_embedder)
    hits = index.search(hash_embedder.embed_query("Fact number 7"), namespace="global", collection=None, limit=5, now=timezone.now())
    assert len(hits) == 5 and hits[0].memory_id == ids[7]
    assert [h.cosine for h in hits] == sorted((h.cosine for h in hits), reverse=True)


def test_growth_beyond_initial_capacity(hash_embedder) -> None:
    index = _fresh_index(hash_embedder)
    index.rows.grow_step = 4  # force several growth steps
    for i in range(10):
        remember(f"Fact {i}")
    assert index.size() == 10


def _anisotropic(rng, count: int, basis) -> np.ndarray:  # noqa: ANN001
    """Unit vectors shaped like sentence embeddings: a shared direction, a low-rank spread, noise."""
    import numpy as np

    raw = 3.0 + rng.standard_normal((count, basis.shape[0])) @ basis + 0.05 * rng.standard_normal((count, basis.shape[1]))
    return (raw / np.linalg.norm(raw, axis=1, keepdims=True)).astype(np.float32)


def _filled_index(monkeypatch: pytest.MonkeyPatch, count: int, dims: int = 384):  # noqa: ANN202
    import numpy as np

    monkeypatch.setattr(sketch, "SKETCH_MIN_ROWS", 1000)
    monkeypatch.setattr(sketch, "SKETCH_SAMPLE", 1000)
    monkeypatch.setattr(sketch, "SHORTLIST_MIN", 60)
    monkeypatch.setattr(sketch, "SHORTLIST_PER_RESULT", 6)  # limit 10: 60 of 2,700 candidates re-scored
    rng = np.random.default_rng(7)
    basis = rng.standard_normal((48, dims))
    index = EmbeddedVectorIndex("test/sketch", dims)
    index.mark_loaded()  # rows are put directly; the (empty) change feed is still read
    for i, vector in enumerate(_anisotropic(rng, count, basis)):
        index.put_vector(f"m{i}", vector, namespace="global" if i % 10 else "other", collection="general")
    return index, rng, basis


def test_sketch_prefilter_returns_the_exact_top_scores(monkeypatch: pytest.MonkeyPatch) -> None:
    index, rng, basis = _filled_index(monkeypatch, 3000)
    now = timezone.now()
    for query in _anisotropic(rng, 40, basis):
        served = index.search(query, namespace="global", collection=None, limit=10, now=now)
        exact = index.search(query, namespace="global", collection=None, limit=10, now=now, exact=True)
        assert [round(h.cosine, 5) for h in served] == [round(h.cosine, 5) for h in exact]
        assert all(int(h.memory_id[1:]) % 10 for h in served)  # the namespace filter still applies
    projection = index.rows.projection
    assert projection is not None  # the sketch was really used
    assert sketch.shortlist(projection, index.rows.sketch, query, np.arange(2700), 3000, 1).size == 60


def test_vectors_added_after_the_fit_are_sketched_and_a_doubled_index_refits(monkeypatch: pytest.MonkeyPatch) -> None:
    index, rng, basis = _filled_index(monkeypatch, 1200)
    now = timezone.now()
    index.search(_anisotropic(rng, 1, basis)[0], namespace="global", collection=None, limit=5, now=now)
    assert index.rows.projection is not None and index.rows.projection.fitted_rows == 1200
    newcomer = _anisotropic(rng, 1, basis)[0]
    index.put_vector("new", newcomer, namespace="global", collection="general")
    assert index.search(newcomer, namespace="global", collection=None, limit=1, now=now)[0].memory_id == "new"
    for i, vector in enumerate(_anisotropic(rng, 1300, basis)):
        index.put_vector(f"late{i}", vector, namespace="global", collection="general")
    index.search(newcomer, namespace="global", collection=None, limit=1, now=now)
    assert index.rows.projection.fitted_rows == 2501


def test_small_models_and_small_namespaces_scan_exactly(monkeypatch: pytest.MonkeyPatch) -> None:
    index, rng, basis = _filled_index(monkeypatch, 1500, dims=96)  # 96 // 3 < 64 sketch dimensions
    index.search(_anisotropic(rng, 1, basis)[0], namespace="global", collection=None, limit=5, now=timezone.now())
    assert index.rows.projection is None
    big, rng, basis = _filled_index(monkeypatch, 1500)
    big.search(_anisotropic(rng, 1, basis)[0], namespace="other", collection=None, limit=5, now=timezone.now())
    assert big.rows.projection is None  # 150 candidates: below SKETCH_MIN_ROWS


def _ids(index: EmbeddedVectorIndex, embedder, text: str) -> set[str]:  # noqa: ANN001
    query = embedder.embed_query(text)
    return {h.memory_id for h in index.search(query, namespace="global", collection=None, limit=20, now=timezone.now())}


def test_a_database_error_while_catching_up_loses_no_change(hash_embedder, monkeypatch: pytest.MonkeyPatch) -> None:
    """The feed position moves before the changed rows are fetched: a failed fetch must not skip them."""
    from django.db import OperationalError

    from memories.models import Memory

    index = _fresh_index(hash_embedder)
    first = remember("Alpha fact")
    assert _ids(index, hash_embedder, "Alpha fact") == {first.id}
    second = remember("Beta fact")
    gone = first.id
    memory_forget(memory_id=gone, namespace=None, actor="test")

    def locked(*args: object, **kwargs: object) -> object:
        raise OperationalError("database is locked")

    monkeypatch.setattr(Memory.objects, "filter", locked)
    with pytest.raises(OperationalError):
        _ids(index, hash_embedder, "Beta fact")
    monkeypatch.undo()
    assert _ids(index, hash_embedder, "Beta fact") == {second.id}


def test_a_failure_half_way_through_a_change_discards_the_rows(hash_embedder, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows half-written by a failed catch-up are thrown away and reloaded, never served."""
    index = _fresh_index(hash_embedder)
    first = remember("Alpha fact")
    assert _ids(index, hash_embedder, "Alpha fact") == {first.id}
    second = remember("Beta fact")

    def broken(self: EmbeddedVectorIndex, *args: object, **kwargs: object) -> None:
        raise MemoryError("injected")

    monkeypatch.setattr(EmbeddedVectorIndex, "_put_memory", broken)
    with pytest.raises(MemoryError):
        _ids(index, hash_embedder, "Beta fact")
    assert not index.loaded
    monkeypatch.undo()
    third = remember("Gamma fact")
    assert _ids(index, hash_embedder, "Beta fact") == {first.id, second.id, third.id}


def test_a_load_that_failed_half_way_keeps_no_stale_row(hash_embedder, monkeypatch: pytest.MonkeyPatch) -> None:
    """A memory forgotten between a failed load and the next one must not stay in the index."""
    from django.db import OperationalError

    a, b = remember("Alpha fact"), remember("Beta fact")
    index = _fresh_index(hash_embedder)
    real_from_bytes = embedded.from_bytes  # wrapped to fail once mid-load (on the second row)
    seen = {"n": 0}

    def fail_second(blob: bytes) -> object:
        seen["n"] += 1
        if seen["n"] == 2:
            raise OperationalError("connection lost mid-load")
        return real_from_bytes(blob)

    monkeypatch.setattr(embedded, "from_bytes", fail_second)
    with pytest.raises(OperationalError):
        _ids(index, hash_embedder, "Alpha fact")
    monkeypatch.undo()
    memory_forget(memory_id=a.id, namespace=None, actor="test")
    memory_forget(memory_id=b.id, namespace=None, actor="test")
    c = remember("Gamma fact")
    assert _ids(index, hash_embedder, "Alpha fact") == {c.id}


def test_the_rows_a_search_may_return_are_reused_until_one_changes_or_expires(hash_embedder) -> None:
    """The eligible rows are cached per (namespace, collection, facts only): a search at a later
    time past an expiry, a write and a drop each see the change, and the same search with nothing
    changed reuses them."""
    t3 = remember("Transient fact", retention_tier="T3")
    t0 = remember("Foundational fact", retention_tier="T0")
    index = _fresh_index(hash_embedder)
    query = hash_embedder.embed_query("fact")
    now = timezone.now()

    def ids(at) -> set[str]:  # noqa: ANN001
        return {h.memory_id for h in index.search(query, namespace="global", collection=None, limit=10, now=at)}

    assert ids(now) == {t3.id, t0.id}
    kind = (index.rows.codes["n:global"], None, False)
    cached = index.eligible.cached(kind)
    assert ids(now) == {t3.id, t0.id} and index.eligible.cached(kind) is cached
    assert ids(now + timedelta(days=31)) == {t0.id}  # past the T3 expiry
    assert ids(now) == {t3.id, t0.id}  # and back: an earlier time is not served a later mask
    added = remember("Another fact", namespace="global", retention_tier="T0")
    assert ids(now) == {t3.id, t0.id, added.id}
    memory_forget(memory_id=t0.id, namespace=None, actor="test")
    assert ids(now) == {t3.id, added.id}
