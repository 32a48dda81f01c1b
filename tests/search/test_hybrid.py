"""Semantic search (real e5), hybrid fusion, fuse()/apply_priors() units, degraded mode."""
from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import Future
from datetime import timedelta

import numpy as np
import pytest
from django.db import transaction
from django.utils import timezone

from bhgbrain_site.core.config import HybridWeights
from bhgbrain_site.core.errors import EmbeddingUnavailable
from memories import embeddings
from memories.access import tracker
from memories.analyzer import analyze, analyze_query
from memories.indexes import embedded
from memories.models import Memory
from search import fulltext
from search.selectors import HybridParams, Scored, apply_priors, fuse, memories_recall, memories_search
from search.services import recall_run, search_run
from search.temporal import CURRENT, TimeScope
from tests.conftest import HashEmbedder, remember

pytestmark = pytest.mark.django_db

CAT = "The cat sleeps on the sofa all afternoon"
CAT_QUERY = "Where does the kitten nap?"
DISTRACTORS = [
    "Deploys to production happen every Tuesday after the release review",
    "Postgres backups run nightly at 2am and are kept for 30 days",
    "Alice owns the billing service and its on-call rotation",
    "The quarterly budget meeting moved to the large conference room",
    "Use the staging cluster for load tests, never production",
]


@pytest.fixture(autouse=True)
def _empty_access_tracker() -> Iterator[None]:
    tracker.discard()
    yield
    tracker.discard()


def ids(items: list[Scored]) -> list[str]:
    return [i.memory_id for i in items]


def search(query: str, mode: str, *, namespace: str = "global", collection: str | None = None, limit: int = 10,
           params: HybridParams | None = None, scope: TimeScope = CURRENT) -> list[Scored]:
    return memories_search(query=query, namespace=namespace, collection=collection, mode=mode, limit=limit, params=params,
                           scope=scope)


def remember_without_vector(content: str, embedder: object, **fields: object) -> str:
    """Write a memory as in degraded mode (no vector), then restore the embedder."""
    embeddings.set_embedder(None)
    embedded.reset_vector_index()
    try:
        return remember(content, **fields).id
    finally:
        embeddings.set_embedder(embedder)
        embedded.reset_vector_index()


# --------------------------------------------------------------------------- semantic


def test_semantic_finds_a_paraphrase_sharing_no_words(e5) -> None:
    for text in DISTRACTORS:
        remember(text)
    cat = remember(CAT).id
    assert not set(analyze_query(CAT_QUERY)) & set(analyze(CAT))  # truly no shared word
    assert search(CAT_QUERY, "fulltext") == []
    found = search(CAT_QUERY, "semantic", limit=3)
    assert ids(found)[0] == cat
    top = found[0]
    assert top.fulltext is None
    assert top.semantic is not None and 0.0 <= top.semantic <= 1.0
    assert top.score == pytest.approx(top.semantic)
    assert [f.score for f in found] == sorted((f.score for f in found), reverse=True)


def test_semantic_paraphrase_also_wins_in_hybrid(e5) -> None:
    for text in DISTRACTORS:
        remember(text)
    cat = remember(CAT).id
    assert ids(search(CAT_QUERY, "hybrid", limit=3))[0] == cat


def test_semantic_without_collection_searches_every_collection_of_the_namespace(e5) -> None:
    work = remember("The release train leaves every Tuesday at noon", collection="work").id
    home = remember("The recycling bins go out on Tuesday evening", collection="home").id
    misc = remember("My bicycle needs a new chain", collection="misc").id
    other_ns = remember("The recycling bins go out on Tuesday evening", namespace="someone-else").id
    everywhere = ids(search("What happens on Tuesday?", "semantic"))
    assert set(everywhere) == {work, home, misc}
    assert other_ns not in everywhere
    assert ids(search("What happens on Tuesday?", "semantic", collection="home")) == [home]
    assert set(ids(search("What happens on Tuesday?", "hybrid"))) == {work, home, misc}
    assert ids(search("What happens on Tuesday?", "hybrid", collection="work")) == [work]
    assert search("What happens on Tuesday?", "semantic", collection="nope") == []


def test_semantic_respects_namespace(e5) -> None:
    remember(CAT, namespace="alice")
    bob = remember("The dog sleeps in the garden", namespace="bob").id
    assert ids(search(CAT_QUERY, "semantic", namespace="bob")) == [bob]
    assert search(CAT_QUERY, "semantic", namespace="carol") == []


def test_expiry_filter_applies_to_semantic(e5) -> None:
    expired = remember(CAT).id
    live = remember("The dog sleeps in the garden").id
    Memory.objects.filter(pk=expired).update(expires_at=timezone.now() - timedelta(seconds=1), decay_eligible=True)
    for mode in ("semantic", "hybrid"):
        found = ids(search(CAT_QUERY, mode))
        assert expired not in found
        assert live in found
    recalled = memories_recall(query=CAT_QUERY, namespace="global", collection=None, memory_type=None, tags=None,
                               limit=5, min_score=0.0)
    assert expired not in ids(recalled)


def test_archived_memory_is_not_returned_by_semantic(e5) -> None:
    archived = remember(CAT).id
    Memory.objects.filter(pk=archived).update(archived=True)
    remember("The dog sleeps in the garden")
    assert archived not in ids(search(CAT_QUERY, "semantic"))
    assert archived not in ids(search(CAT_QUERY, "hybrid"))


# --------------------------------------------------------------------------- hybrid


def test_hybrid_keeps_items_found_by_one_side_only(e5) -> None:
    for text in DISTRACTORS[:3]:
        remember(text)
    cat = remember(CAT).id  # semantic side only: no shared word with the query
    zebra = remember_without_vector("Zebra crossing by the office entrance gets repainted", e5)  # full-text side only
    query = "Where does the kitten nap? zebra"
    assert ids(search(query, "fulltext")) == [zebra]
    assert zebra not in ids(search(query, "semantic"))
    found = {item.memory_id: item for item in search(query, "hybrid", limit=10)}
    assert cat in found and zebra in found
    assert found[cat].fulltext is None and found[cat].semantic is not None
    assert found[zebra].semantic is None and found[zebra].fulltext == pytest.approx(1.0)
    for item in found.values():
        assert 0.0 <= item.score <= 1.0


def test_hybrid_item_on_both_sides_carries_both_scores_and_ranks_first(e5) -> None:
    for text in DISTRACTORS:
        remember(text)
    both = remember("Postgres failover is tested every quarter by the database team").id
    found = search("postgres failover test", "hybrid")
    assert ids(found)[0] == both
    assert found[0].semantic is not None and found[0].fulltext == pytest.approx(1.0)
    assert all(0.0 <= f.score <= 1.0 for f in found)
    assert [f.score for f in found] == sorted((f.score for f in found), reverse=True)


def test_hybrid_weights_from_config_matter(e5, bhg_config) -> None:
    for text in DISTRACTORS:
        remember(text)
    remember(CAT)
    query = "backups staging production"
    bhg_config.search.hybrid_weights = HybridWeights(semantic=1.0, fulltext=0.0)
    assert ids(search(query, "hybrid", limit=6)) == ids(search(query, "semantic", limit=6))
    bhg_config.search.hybrid_weights = HybridWeights(semantic=0.0, fulltext=1.0)
    text_only = ids(search(query, "fulltext", limit=6))
    assert len(text_only) == 3
    scores = [s.score for s in search(query, "fulltext", limit=6)]
    assert len(set(scores)) == 3  # no ties: the order is well defined
    assert ids(search(query, "hybrid", limit=6))[: len(text_only)] == text_only


def test_hybrid_applies_t0_prior_between_equal_matches(no_embedder) -> None:
    """Degraded hybrid (full-text only) with two equally relevant memories: the T0 one wins."""
    plain = remember("Zebra migration notes for spring", retention_tier="T2").id
    core = remember("Zebra migration notes for autumn", retention_tier="T0").id
    found = search("zebra migration", "hybrid")
    assert ids(found) == [core, plain]
    assert found[0].score > found[1].score


def test_hybrid_applies_importance_prior_between_equal_matches(no_embedder) -> None:
    low = remember("Walrus feeding schedule for spring", importance=0.1).id
    high = remember("Walrus feeding schedule for autumn", importance=0.9).id
    assert ids(search("walrus feeding", "hybrid")) == [high, low]


# --------------------------------------------------------------------------- degraded mode


def test_hybrid_degrades_silently_to_fulltext(no_embedder) -> None:
    remember("The billing service runs on Kubernetes")
    other = remember("Kubernetes upgrades happen quarterly").id
    found = search("kubernetes upgrades", "hybrid")
    assert ids(found)[0] == other
    assert len(found) == 2
    assert all(f.semantic is None and f.fulltext is not None and 0.0 <= f.score <= 1.0 for f in found)
    result = search_run(query="kubernetes upgrades", namespace="global", collection=None, mode="hybrid", limit=10)
    assert [r["id"] for r in result["results"]] == ids(found)


def test_semantic_mode_without_embedder_raises(no_embedder) -> None:
    remember("The billing service runs on Kubernetes")
    with pytest.raises(EmbeddingUnavailable):
        search("kubernetes", "semantic")
    with pytest.raises(EmbeddingUnavailable):
        search_run(query="kubernetes", namespace="global", collection=None, mode="semantic", limit=10)
    with pytest.raises(EmbeddingUnavailable):
        recall_run(query="kubernetes", namespace="global", collection=None, memory_type=None, tags=None, limit=5,
                   min_score=0.0)
    assert tracker.pending() == 0


def test_fulltext_mode_works_without_embedder(no_embedder) -> None:
    mid = remember("The billing service runs on Kubernetes").id
    assert ids(search("kubernetes", "fulltext")) == [mid]


# --------------------------------------------------------------------------- fuse() units


def sem(*pairs: tuple[str, float]) -> list[Scored]:
    return [Scored(mid, s, semantic=s) for mid, s in pairs]


def txt(*pairs: tuple[str, float]) -> list[Scored]:
    return [Scored(mid, s, fulltext=s) for mid, s in pairs]


FUSIONS = ["rrf", "minmax", "zscore"]
SEM = sem(("a", 0.95), ("b", 0.80), ("c", 0.60), ("d", 0.40))
TXT = txt(("d", 1.0), ("c", 0.7), ("b", 0.3), ("e", 0.1))


def assert_reproduces(fused: list[Scored], side: list[Scored]) -> None:
    """The side's items keep its order; items absent from it score 0 and never rank above it."""
    side_ids = ids(side)
    assert [mid for mid in ids(fused) if mid in side_ids] == side_ids
    absent = [s for s in fused if s.memory_id not in side_ids]
    assert absent and all(s.score == 0.0 for s in absent)
    assert min(s.score for s in fused if s.memory_id in side_ids) >= 0.0


@pytest.mark.parametrize("fusion", FUSIONS)
def test_fuse_semantic_weight_only_reproduces_semantic_order(fusion: str) -> None:
    fused = fuse(SEM, TXT, HybridParams(semantic_weight=1.0, fulltext_weight=0.0, fusion=fusion))
    assert ids(fused)[:3] == ["a", "b", "c"]
    assert_reproduces(fused, SEM)
    assert set(ids(fused)) == {"a", "b", "c", "d", "e"}


@pytest.mark.parametrize("fusion", FUSIONS)
def test_fuse_fulltext_weight_only_reproduces_fulltext_order(fusion: str) -> None:
    fused = fuse(SEM, TXT, HybridParams(semantic_weight=0.0, fulltext_weight=1.0, fusion=fusion))
    assert ids(fused)[:3] == ["d", "c", "b"]
    assert_reproduces(fused, TXT)
    assert set(ids(fused)) == {"a", "b", "c", "d", "e"}


@pytest.mark.parametrize("fusion", FUSIONS)
def test_fuse_weights_decide_between_sides(fusion: str) -> None:
    semantic = sem(("a", 0.9), ("b", 0.5))
    text = txt(("b", 1.0), ("a", 0.2))
    assert ids(fuse(semantic, text, HybridParams(semantic_weight=0.8, fulltext_weight=0.2, fusion=fusion)))[0] == "a"
    assert ids(fuse(semantic, text, HybridParams(semantic_weight=0.2, fulltext_weight=0.8, fusion=fusion)))[0] == "b"


@pytest.mark.parametrize("fusion", FUSIONS)
def test_fuse_missing_side_contributes_zero(fusion: str) -> None:
    params = HybridParams(semantic_weight=0.5, fulltext_weight=0.5, fusion=fusion)
    semantic = sem(("a", 0.9), ("b", 0.5), ("c", 0.3))
    text = txt(("a", 1.0), ("b", 0.4), ("c", 0.2))
    only_semantic = {s.memory_id: s.score for s in fuse(semantic, [], params)}
    only_text = {s.memory_id: s.score for s in fuse([], text, params)}
    both = {s.memory_id: s.score for s in fuse(semantic, text, params)}
    for mid in "abc":
        assert both[mid] == pytest.approx(only_semantic[mid] + only_text[mid])


@pytest.mark.parametrize("fusion", FUSIONS)
def test_fuse_item_on_both_sides_beats_same_rank_on_one_side(fusion: str) -> None:
    params = HybridParams(semantic_weight=0.5, fulltext_weight=0.5, fusion=fusion)
    fused = fuse(sem(("x", 0.9), ("y", 0.5)), txt(("x", 1.0), ("z", 0.5)), params)
    scores = {s.memory_id: s.score for s in fused}
    assert ids(fused)[0] == "x"
    assert scores["x"] > scores["y"] and scores["x"] > scores["z"]


@pytest.mark.parametrize("fusion", FUSIONS)
def test_fuse_keeps_each_sides_score_and_stays_within_unit_interval(fusion: str) -> None:
    fused = {s.memory_id: s for s in fuse(SEM, TXT, HybridParams(fusion=fusion))}
    assert set(fused) == {"a", "b", "c", "d", "e"}
    assert (fused["a"].semantic, fused["a"].fulltext) == (0.95, None)
    assert (fused["d"].semantic, fused["d"].fulltext) == (0.40, 1.0)
    assert (fused["e"].semantic, fused["e"].fulltext) == (None, 0.1)
    assert all(0.0 <= s.score <= 1.0 for s in fused.values())


def test_fuse_rrf_scores_by_rank_scaled_to_one() -> None:
    params = HybridParams(semantic_weight=0.5, fulltext_weight=0.5, fusion="rrf", rrf_k=60)
    fused = {s.memory_id: s.score for s in fuse(sem(("a", 0.9), ("b", 0.1)), txt(("a", 0.5), ("c", 0.4)), params)}
    assert fused["a"] == pytest.approx(1.0)  # first on both sides
    assert fused["b"] == pytest.approx(0.5 * 61 / 62)
    assert fused["c"] == pytest.approx(0.5 * 61 / 62)


def test_fuse_minmax_normalises_each_side() -> None:
    params = HybridParams(semantic_weight=0.5, fulltext_weight=0.5, fusion="minmax")
    fused = {s.memory_id: s.score for s in fuse(sem(("a", 0.9), ("b", 0.7), ("c", 0.5)), [], params)}
    assert fused == pytest.approx({"a": 0.5, "b": 0.25, "c": 0.0})


def test_fuse_of_nothing_is_empty() -> None:
    for fusion in FUSIONS:
        assert fuse([], [], HybridParams(fusion=fusion)) == []


# --------------------------------------------------------------------------- apply_priors() units


def scored(mid: str, score: float, *, tier: str = "T2", importance: float = 0.5) -> Scored:
    return Scored(mid, score, memory=Memory(retention_tier=tier, importance=importance))


def test_t0_outranks_t2_all_else_equal() -> None:
    params = HybridParams()
    for order in (["t2", "t0"], ["t0", "t2"]):
        items = [scored(m, 0.5, tier=m.upper()) for m in order]
        assert ids(apply_priors(items, params)) == ["t0", "t2"]


def test_higher_importance_outranks_lower_all_else_equal() -> None:
    params = HybridParams()
    for order in (["low", "high"], ["high", "low"]):
        items = [scored(m, 0.5, importance=0.9 if m == "high" else 0.2) for m in order]
        assert ids(apply_priors(items, params)) == ["high", "low"]


def test_priors_do_not_overtake_a_clearly_more_relevant_item() -> None:
    params = HybridParams()
    relevant = scored("relevant", 0.9, tier="T3", importance=0.0)
    boosted = scored("boosted", 0.5, tier="T0", importance=1.0)
    ranked = apply_priors([boosted, relevant], params)
    assert ids(ranked) == ["relevant", "boosted"]
    assert ranked[1].score < ranked[0].score


def test_prior_effect_is_bounded() -> None:
    params = HybridParams()
    top = apply_priors([scored("x", 0.5, tier="T0", importance=1.0)], params)[0].score
    bottom = apply_priors([scored("y", 0.5, tier="T3", importance=0.0)], params)[0].score
    neutral = apply_priors([scored("z", 0.5)], params)[0].score
    assert neutral == pytest.approx(0.5)
    assert top == pytest.approx(0.5 * 1.05 * 1.10)
    assert bottom == pytest.approx(0.5 * 0.95)
    assert top <= 1.0


def test_priors_never_push_score_above_one() -> None:
    items = apply_priors([scored("x", 0.99, tier="T0", importance=1.0)], HybridParams())
    assert items[0].score <= 1.0


# --------------------------------------------------------------------------- the query first, then both sides at once


class StartedQueries(HashEmbedder):
    """A hash embedder whose queries are started like the local model's: a future its own thread
    completes a moment later (``fail``: with EmbeddingUnavailable). ``events`` records the order."""

    def __init__(self) -> None:
        self.events: list[str] = []
        self.fail = False

    def start_query(self, text: str) -> Future[np.ndarray]:
        future: Future[np.ndarray] = Future()

        def answer() -> None:
            self.events.append("embedded")
            if self.fail:
                future.set_exception(EmbeddingUnavailable("model gone"))
            else:
                future.set_result(self.embed_query(text))

        threading.Timer(0.05, answer).start()
        return future


@pytest.fixture
def started_queries(hash_embedder) -> StartedQueries:  # noqa: ANN001 - the fixture sets the process up
    embedder = StartedQueries()
    embeddings.set_embedder(embedder)
    embedded.reset_vector_index()
    return embedder


def _recording_fulltext(started_queries: StartedQueries, monkeypatch: pytest.MonkeyPatch) -> None:
    real_search = fulltext.search

    def fulltext_search(*args: object, **kwargs: object) -> object:
        started_queries.events.append("fulltext")
        return real_search(*args, **kwargs)

    monkeypatch.setattr(fulltext, "search", fulltext_search)


AS_OF_NOW = TimeScope(as_of=timezone.now() + timedelta(days=1))  # a search "as of" a time: both partitions


@pytest.mark.parametrize("scope", [CURRENT, AS_OF_NOW], ids=["current", "as_of"])
def test_hybrid_embeds_the_query_before_scoring_fulltext(started_queries: StartedQueries, scope: TimeScope,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The model has the cores to itself: full-text scored meanwhile slowed the query's embedding."""
    target = remember("The billing service runs on Kubernetes").id
    remember(DISTRACTORS[0])
    _recording_fulltext(started_queries, monkeypatch)

    found = search("billing kubernetes", "hybrid", scope=scope)
    assert started_queries.events[:2] == ["embedded", "fulltext"]
    assert ids(found)[0] == target
    assert any(f.semantic is not None for f in found) and any(f.fulltext is not None for f in found)


@pytest.mark.parametrize("scope", [CURRENT, AS_OF_NOW], ids=["current", "as_of"])
def test_hybrid_degrades_to_fulltext_when_the_started_query_fails(started_queries: StartedQueries, scope: TimeScope,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    target = remember("The billing service runs on Kubernetes").id
    started_queries.fail = True
    _recording_fulltext(started_queries, monkeypatch)

    found = search("billing kubernetes", "hybrid", scope=scope)
    assert started_queries.events[:2] == ["embedded", "fulltext"]
    assert ids(found) == [target]
    assert found[0].semantic is None and found[0].fulltext is not None


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("scope", [CURRENT, AS_OF_NOW], ids=["current", "as_of"])
def test_the_vector_search_runs_beside_the_fulltext_side(scope: TimeScope, monkeypatch: pytest.MonkeyPatch) -> None:
    """Outside a transaction the vector search runs on a side thread while this one scores full
    text; inside one (a caller's uncommitted writes) both run here."""
    import search.selectors as selectors

    target = remember("The billing service runs on Kubernetes").id
    remember(DISTRACTORS[0])
    threads: list[str] = []
    real_hits = selectors.vector_hits

    def vector_hits(*args: object, **kwargs: object) -> object:
        threads.append(threading.current_thread().name)
        return real_hits(*args, **kwargs)

    monkeypatch.setattr(selectors, "vector_hits", vector_hits)
    found = search("billing kubernetes", "hybrid", scope=scope)
    assert ids(found)[0] == target and found[0].semantic is not None and found[0].fulltext is not None
    assert threads and threads[-1].startswith("bhgbrain-side")
    with transaction.atomic():
        assert ids(search("billing kubernetes", "hybrid", scope=scope))[0] == target
    assert threads[-1] == threading.current_thread().name
