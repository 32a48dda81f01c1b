"""Full-text and hybrid search inside Qdrant (qdrant-client's local mode, the real engine):
BM25 sparse vectors from the product's analyzer, one Query API call, no per-process text index."""
from __future__ import annotations

import math
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from qdrant_client import models

from bhgbrain_site.server.warmup import indexes_warm
from memories.analyzer import analyze
from memories.indexes import embedded, sparse
from memories.indexes.qdrant import QdrantVectorIndex
from memories.indexes.qdrant.points import collection_name, point_payload
from memories.interop.repair import repair_from_index
from memories.models import Memory
from search.bm25 import text_index
from search.console import memory_ids_ranked
from search.selectors import fulltext_hits, memories_search
from tests.conftest import remember

pytestmark = pytest.mark.django_db(transaction=True)


def _sparse_of(index: QdrantVectorIndex, memory_id: str, namespace: str = "global") -> dict[int, float]:
    record = index.client().retrieve(collection_name(namespace, "general"), ids=[memory_id], with_vectors=True)[0]
    vector = record.vector[sparse.VECTOR_NAME]
    return dict(zip(vector.indices, vector.values, strict=True))


def _fulltext(query: str, namespace: str = "global") -> list[str]:
    return [str(h.memory.id) for h in memories_search(query=query, namespace=namespace, collection=None, mode="fulltext", limit=10)]


def _no_text_index() -> bool:
    return not text_index.text_index_loaded() and text_index._index is None  # noqa: SLF001 - never even created


def test_an_english_memory_carries_bm25_weights_of_the_shared_analyzer(qdrant: QdrantVectorIndex) -> None:
    created = remember("The deployments were running slowly on Mondays", tags=["deploy-ops"])
    weights = _sparse_of(qdrant, created.id)
    content = analyze("The deployments were running slowly on Mondays")  # stemmed, stopwords gone
    assert "the" not in content and "deploy" in content and "run" in content
    assert set(weights) == {sparse.term_id(t) for t in [*content, "deploy", "op"]}
    length = len(content) + sparse.TAG_WEIGHT * 2
    norm = sparse.K1 * (1 - sparse.B + sparse.B * length / sparse.AVG_LEN)
    once, thrice = (tf * (sparse.K1 + 1) / (tf + norm) for tf in (1, 3))
    assert math.isclose(weights[sparse.term_id("run")], once, rel_tol=1e-6)
    assert math.isclose(weights[sparse.term_id("deploy")], thrice, rel_tol=1e-6)  # content once + the tag twice
    assert sparse.term_id("the") not in weights


def test_a_chinese_memory_is_segmented_by_jieba_into_its_sparse_vector(qdrant: QdrantVectorIndex) -> None:
    created = remember("我们下周在北京讨论数据库迁移的预算")
    weights = _sparse_of(qdrant, created.id)
    tokens = analyze("我们下周在北京讨论数据库迁移的预算")
    assert {"北京", "数据库", "迁移", "预算"} <= set(tokens) and "我们" not in tokens
    assert set(weights) == {sparse.term_id(t) for t in tokens}
    assert sparse.term_id("我们") not in weights
    assert _fulltext("北京的预算") == [created.id]
    assert _no_text_index()


def test_fulltext_finds_an_exact_rare_term_through_qdrant_alone(qdrant: QdrantVectorIndex, monkeypatch) -> None:  # noqa: ANN001
    for i in range(6):
        remember(f"Release notes number {i}: the pipeline builds artifacts and uploads them")
    rare = remember("Ticket QX-7781 tracks the flaky artifact upload")
    calls: list[str] = []
    real = qdrant.client().query_batch_points
    monkeypatch.setattr(qdrant.client(), "query_batch_points",
                        lambda name, requests, **kw: calls.append(name) or real(name, requests=requests, **kw))
    assert _fulltext("qx 7781")[0] == rare.id
    assert _fulltext("QX-7781 artifact upload")[0] == rare.id
    assert calls  # answered by Qdrant
    assert _fulltext("nothing matches zebra") == []
    hits = fulltext_hits("artifacts", namespace="global", collection=None, limit=10, now=timezone.now())
    assert len(hits) == 7 and hits[0].fulltext == 1.0 and all(0 < h.fulltext <= 1.0 for h in hits)
    assert _no_text_index()


def test_hybrid_is_one_query_api_call_with_both_lists(qdrant: QdrantVectorIndex, monkeypatch) -> None:  # noqa: ANN001
    target = remember("The Grafana dashboard for the payment service lives in folder ops-7")
    remember("Lunch on Friday is pizza")
    remember("The payment service retries webhooks three times")
    calls: list[tuple[str, list[Any]]] = []
    client = qdrant.client()
    real = client.query_batch_points
    monkeypatch.setattr(client, "query_batch_points",
                        lambda name, requests, **kw: calls.append((name, requests)) or real(name, requests=requests, **kw))
    monkeypatch.setattr(client, "query_points", lambda *a, **kw: pytest.fail("hybrid must not issue a separate query"))
    results = memories_search(query="Grafana dashboard payment service", namespace="global", collection="general",
                              mode="hybrid", limit=5)
    assert len(calls) == 1
    name, requests = calls[0]
    assert name == collection_name("global", "general")
    assert [r.using for r in requests] == [None, sparse.VECTOR_NAME]
    assert all(r.filter is not None for r in requests)  # namespace / collection / expiry inside Qdrant
    assert str(results[0].memory.id) == target.id
    assert results[0].fulltext == 1.0 and results[0].semantic is not None
    assert _no_text_index()


def test_namespaces_never_mix_inside_one_qdrant_collection(qdrant: QdrantVectorIndex) -> None:
    # 'a_b'+'c' and 'a'+'b_c' share the Qdrant collection bhgbrain_a_b_c: only the filter separates them
    alice = remember("Vault passphrase rotation happens quarterly", namespace="a_b", collection="c")
    bob = remember("Vault passphrase rotation happens quarterly, says bob", namespace="a", collection="b_c")
    assert collection_name("a_b", "c") == collection_name("a", "b_c")
    for mode in ("fulltext", "hybrid"):
        found_a = [str(h.memory.id) for h in memories_search(query="vault passphrase", namespace="a_b", collection=None,
                                                             mode=mode, limit=10)]
        found_b = [str(h.memory.id) for h in memories_search(query="vault passphrase", namespace="a", collection="b_c",
                                                             mode=mode, limit=10)]
        assert (found_a, found_b) == ([alice.id], [bob.id])
    dense, text = qdrant.query(None, sparse.query_weights("vault passphrase"), namespace="a_b", collection=None,
                               limit=10, now=timezone.now())
    assert dense == [] and [memory_id for memory_id, _ in text] == [alice.id]  # filtered by Qdrant itself


def test_expired_memories_are_filtered_inside_qdrant(qdrant: QdrantVectorIndex) -> None:
    live = remember("Cache warmer schedule xylophone", retention_tier="T2")  # 90 days
    brief = remember("Cache warmer schedule xylophone, the short one", retention_tier="T3")  # 30 days
    kept = remember("Cache warmer schedule xylophone, for good", retention_tier="T0")  # never expires
    terms = sparse.query_weights("xylophone")
    _, text = qdrant.query(None, terms, namespace="global", collection=None, limit=10, now=timezone.now())
    assert {memory_id for memory_id, _ in text} == {live.id, brief.id, kept.id}
    _, text = qdrant.query(None, terms, namespace="global", collection=None, limit=10,
                           now=timezone.now() + timedelta(days=45))
    assert {memory_id for memory_id, _ in text} == {live.id, kept.id}
    _, text = qdrant.query(None, terms, namespace="global", collection=None, limit=10,
                           now=timezone.now() + timedelta(days=400))
    assert [memory_id for memory_id, _ in text] == [kept.id]


def test_no_per_process_text_index_on_qdrant_after_every_kind_of_search(qdrant: QdrantVectorIndex) -> None:
    remember("Postgres vacuum runs nightly", namespace="team")
    for mode in ("fulltext", "hybrid", "semantic"):
        assert memories_search(query="postgres vacuum", namespace="team", collection=None, mode=mode, limit=5)
    assert memory_ids_ranked(query="postgres vacuum", namespaces=["team"], limit=5)  # the console's search box
    indexes_warm()  # the server's start-up warm-up
    assert _no_text_index()


def test_the_embedded_backend_still_uses_the_in_process_index(hash_embedder) -> None:
    embedded.reset_vector_index()
    text_index.reset_text_index()
    created = remember("Embedded store: the word quokka")
    assert _fulltext("quokka") == [created.id]
    assert text_index.text_index_loaded()  # the contrast: this is what a Qdrant store never does


def test_a_memory_without_a_vector_is_still_found_by_fulltext(qdrant: QdrantVectorIndex) -> None:
    created = remember("Degraded write: the word marmalade")
    Memory.objects.filter(id=created.id).update(embedding=None, vector_synced=False)
    memory = Memory.objects.get(id=created.id)
    qdrant.push({memory.id}, reset=False)  # as the sync would after such a write
    record = qdrant.client().retrieve(collection_name("global", "general"), ids=[created.id], with_vectors=True)[0]
    assert set(record.vector) == {sparse.VECTOR_NAME}  # sparse only
    assert _fulltext("marmalade") == [created.id]


def _old_collection(index: QdrantVectorIndex, name: str, points: list[models.PointStruct]) -> None:
    """A collection as this product (and the original BHGBrain) made it before the sparse vectors."""
    client = index.client()
    client.delete_collection(name)
    client.create_collection(name, vectors_config=models.VectorParams(size=index.dimensions, distance=models.Distance.COSINE))
    client.upsert(name, points=points)


def test_repair_backfills_sparse_vectors_on_an_old_collection(qdrant: QdrantVectorIndex, hash_embedder, settings) -> None:  # noqa: ANN001
    mine = remember("Old collection: the hedgehog runbook", tags=["ops"])
    memory = Memory.objects.get(id=mine.id)
    name = collection_name("global", "general")
    other_id = str(uuid.uuid4())
    other_payload = {**point_payload(memory), "content": "From the laptop: the hedgehog migration plan",
                     "device_id": "laptop-b", "tags": ["plan"]}
    _old_collection(qdrant, name, [
        models.PointStruct(id=mine.id, vector=hash_embedder.embed_passage(memory.content).tolist(), payload=point_payload(memory)),
        models.PointStruct(id=other_id, vector=hash_embedder.embed_passage("laptop").tolist(), payload=other_payload),
    ])
    embedded.reset_vector_index()  # a process of the new version opens the old collection
    index = embedded.get_vector_index()
    assert isinstance(index, QdrantVectorIndex)
    assert sparse.VECTOR_NAME not in (index.client().get_collection(name).config.params.sparse_vectors or {})

    report = repair_from_index(dry_run=True, device_id=None, actor="test")

    assert report.points_scanned == 2 and report.errors == 0
    config = index.client().get_collection(name).config.params.sparse_vectors
    assert config[sparse.VECTOR_NAME].modifier == models.Modifier.IDF
    records = {str(r.id): r for r in index.client().retrieve(name, ids=[mine.id, other_id], with_vectors=True)}
    assert set(records[mine.id].vector) == {"", sparse.VECTOR_NAME}  # dense kept, nothing re-embedded
    assert records[mine.id].vector[""] == pytest.approx(hash_embedder.embed_passage(memory.content).tolist(), abs=1e-6)
    assert set(records[mine.id].vector[sparse.VECTOR_NAME].indices) == set(sparse.memory_weights(memory.content, memory.tags))
    assert set(records[other_id].vector[sparse.VECTOR_NAME].indices) == set(
        sparse.memory_weights(other_payload["content"], ["plan"]))  # another device's point, from its payload
    found = memories_search(query="hedgehog", namespace="global", collection=None, mode="fulltext", limit=5)
    assert {str(h.memory.id) for h in found} == {mine.id, other_id}  # the laptop's shown from its payload
    assert _no_text_index()


def test_the_sync_backfills_an_old_collection_too(qdrant: QdrantVectorIndex, hash_embedder) -> None:
    mine = remember("Sync upgrade: the axolotl note")
    memory = Memory.objects.get(id=mine.id)
    name = collection_name("global", "general")
    _old_collection(qdrant, name, [models.PointStruct(id=mine.id, vector=hash_embedder.embed_passage("x").tolist(),
                                                      payload=point_payload(memory))])
    embedded.reset_vector_index()
    index = embedded.get_vector_index()
    index.sync()
    assert sparse.VECTOR_NAME in index.client().get_collection(name).config.params.sparse_vectors
    assert _fulltext("axolotl") == [mine.id]


def test_qdrant_scores_are_bm25_with_the_engines_idf(qdrant: QdrantVectorIndex) -> None:
    docs = [remember(text, namespace="bm25") for text in (
        "Kestrel nests above the quarry", "The quarry floods every spring", "Spring cleaning of the garage")]
    _, text = qdrant.query(None, sparse.query_weights("quarry kestrel"), namespace="bm25", collection=None, limit=10,
                           now=timezone.now())
    scores = dict(text)

    def idf(df: int, n: int = 3) -> float:
        return math.log(1 + (n - df + 0.5) / (df + 0.5))

    def part(content: str, term: str) -> float:
        return sparse.memory_weights(content, [])[sparse.term_id(term)]

    first = idf(2) * part("Kestrel nests above the quarry", "quarri") + idf(1) * part("Kestrel nests above the quarry", "kestrel")
    assert scores[docs[0].id] == pytest.approx(first, rel=1e-5)
    assert scores[docs[1].id] == pytest.approx(idf(2) * part("The quarry floods every spring", "quarri"), rel=1e-5)
    assert docs[2].id not in scores  # shares no term


def test_an_old_server_that_cannot_add_the_sparse_vector_keeps_writes_and_fulltext_working(
    qdrant: QdrantVectorIndex, hash_embedder, monkeypatch,  # noqa: ANN001
) -> None:
    from qdrant_client.http.exceptions import UnexpectedResponse

    first = remember("Old server: the capybara note")
    name = collection_name("global", "general")
    memory = Memory.objects.get(id=first.id)
    _old_collection(qdrant, name, [models.PointStruct(id=first.id, vector=hash_embedder.embed_passage(memory.content).tolist(),
                                                      payload=point_payload(memory))])
    embedded.reset_vector_index()
    index = embedded.get_vector_index()

    def refuse(*args: object, **kwargs: object) -> None:  # what a server before the API answers
        raise UnexpectedResponse(404, "Not Found", b'{"status": {"error": "Not found"}}', {})

    monkeypatch.setattr(index.client(), "create_vector_name", refuse)
    second = remember("Old server: the capybara follow-up")  # the sync must still upsert (dense only)
    record = index.client().retrieve(name, ids=[second.id], with_vectors=True)[0]
    assert isinstance(record.vector, list) and Memory.objects.get(id=second.id).vector_synced
    assert set(_fulltext("capybara")) == {first.id, second.id}  # answered by the in-process fallback
    assert text_index.text_index_loaded()


def test_superseded_points_are_left_out_by_default_and_found_as_of(qdrant: QdrantVectorIndex) -> None:
    """A superseded version's point carries ``superseded: true``: the default filter leaves it
    out (in Qdrant, no in-process index), ``as_of`` and the superseded partition find it."""
    from datetime import UTC, datetime

    from search.temporal import TimeScope

    old = remember("Alice lives in Paris near the canal", key="alice/city", valid_from=datetime(2026, 1, 5, tzinfo=UTC)).id
    new = remember("Alice lives in Berlin near the river", key="alice/city", valid_from=datetime(2026, 3, 10, tzinfo=UTC)).id
    qdrant.sync()
    payload = qdrant.client().retrieve(collection_name("global", "general"), ids=[old], with_payload=True)[0].payload
    assert payload["superseded"] is True and payload["superseded_by"] == new
    for mode in ("fulltext", "semantic", "hybrid"):
        found = memories_search(query="Alice lives near", namespace="global", collection=None, mode=mode, limit=10)
        assert [str(h.memory.id) for h in found] == [new], mode
        then = memories_search(query="Alice lives near", namespace="global", collection=None, mode=mode, limit=10,
                               scope=TimeScope(as_of=datetime(2026, 2, 1, tzinfo=UTC)))
        assert [str(h.memory.id) for h in then] == [old], mode
    assert [h.memory_id for h in fulltext_hits("Paris canal", namespace="global", collection=None, limit=10,
                                               now=timezone.now(), versions="superseded")] == [old]
    assert _no_text_index()
