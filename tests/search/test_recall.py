"""recall: min_score gate on the calibrated score, type/tags filters inside the search, result shape."""
from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from memories.access import tracker
from memories.models import Memory
from search.selectors import Scored, memories_recall, memories_search
from search.services import recall_run, search_run
from tests.conftest import remember

pytestmark = pytest.mark.django_db

RESULT_FIELDS = {
    "id", "namespace", "collection", "content", "summary", "type", "tags", "category", "importance", "score",
    "semantic_score", "fulltext_score", "retention_tier", "expires_at", "expiring_soon", "created_at",
    "last_accessed", "device_id", "valid_from", "valid_until", "superseded_by", "key", "current",
}

MEMORIES = [
    "The billing service is deployed on Kubernetes in the eu-west cluster",
    "Invoices are generated nightly by the billing service",
    "Alice is the tech lead of the billing team",
    "The office cafeteria serves vegetarian lunch on Fridays",
    "Our cat sleeps on the sofa all afternoon",
    "The printer on floor three needs new toner",
]


@pytest.fixture(autouse=True)
def _empty_access_tracker() -> Iterator[None]:
    tracker.discard()
    yield
    tracker.discard()


def recall(query: str, *, limit: int = 10, min_score: float = 0.0, memory_type: str | None = None,
           tags: list[str] | None = None, collection: str | None = None, namespace: str = "global") -> list[Scored]:
    return memories_recall(query=query, namespace=namespace, collection=collection, memory_type=memory_type,
                           tags=tags, limit=limit, min_score=min_score)


def ids(items: list[Scored]) -> list[str]:
    return [i.memory_id for i in items]


def parse(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


# --------------------------------------------------------------------------- min_score


def test_min_score_gates_on_the_calibrated_score(e5) -> None:
    for text in MEMORIES:
        remember(text)
    query = "Where does the billing service run?"
    everything = recall(query, min_score=0.0)
    strict = recall(query, min_score=0.99)
    assert len(everything) == len(MEMORIES)
    assert len(everything) > len(strict)
    assert all(item.semantic >= 0.99 for item in strict)
    for threshold in (0.3, 0.5, 0.6, 0.7):
        gated = recall(query, min_score=threshold)
        expected = [i.memory_id for i in everything if i.semantic >= threshold]
        assert ids(gated) == expected, threshold
    assert 0 < len([i for i in everything if i.semantic >= 0.6]) < len(MEMORIES)  # the default gate separates


def test_recall_scores_are_calibrated_and_sorted(e5) -> None:
    for text in MEMORIES:
        remember(text)
    items = recall("billing service deployment", min_score=0.0)
    scores = [i.score for i in items]
    assert scores == sorted(scores, reverse=True)
    for item in items:
        assert 0.0 <= item.score <= 1.0
        assert item.score == item.semantic
        assert item.fulltext is None
    assert "billing" in items[0].memory.content


def test_recall_limit(e5) -> None:
    for text in MEMORIES:
        remember(text)
    assert len(recall("billing", limit=2)) == 2
    assert len(recall("billing", limit=1)) == 1


def test_recall_without_collection_spans_collections(e5) -> None:
    a = remember("The billing service is deployed on Kubernetes", collection="infra").id
    b = remember("Invoices are generated nightly by the billing service", collection="finance").id
    assert set(ids(recall("billing service"))) == {a, b}
    assert ids(recall("billing service", collection="finance")) == [b]


def test_recall_respects_namespace(e5) -> None:
    remember("The billing service is deployed on Kubernetes", namespace="alice")
    mine = remember("The billing service is deployed on Nomad", namespace="bob").id
    assert ids(recall("billing service", namespace="bob")) == [mine]


# --------------------------------------------------------------------------- filters inside the search


@pytest.fixture
def crowded(e5, bhg_config) -> dict[str, list[str]]:
    """30 near-identical non-matching memories that outscore 3 matching ones."""
    bhg_config.deduplication.enabled = False
    crowd = [
        remember(f"Deployment checklist for the payments service, revision {i}", type="semantic", tags=["crowd"]).id
        for i in range(30)
    ]
    matching = [
        remember("How to roll back a bad release of the payments API", type="procedural", tags=["match", "ops"]).id,
        remember("Steps to rotate the payments database credentials", type="procedural", tags=["runbook", "match"]).id,
        remember("Procedure for restarting the payments workers safely", type="procedural", tags=["match"]).id,
    ]
    return {"crowd": crowd, "matching": matching}


QUERY = "Deployment checklist for the payments service"


def test_crowd_really_outscores_the_matches(crowded) -> None:
    top = ids(recall(QUERY, limit=20))
    assert set(top) <= set(crowded["crowd"])  # without a filter the 3 are not even in the top 20


def test_type_filter_is_applied_inside_the_search(crowded) -> None:
    found = recall(QUERY, limit=3, memory_type="procedural")
    assert sorted(ids(found)) == sorted(crowded["matching"])
    assert all(item.memory.type == "procedural" for item in found)


def test_tags_filter_is_any_match_inside_the_search(crowded) -> None:
    for tags in (["match"], ["nope", "match"], ["ops", "runbook", "match"]):
        found = recall(QUERY, limit=3, tags=tags)
        assert sorted(ids(found)) == sorted(crowded["matching"]), tags
    assert ids(recall(QUERY, limit=3, tags=["ops"])) == [crowded["matching"][0]]
    assert recall(QUERY, limit=3, tags=["nope"]) == []


def test_type_and_tags_filters_combine(crowded, bhg_config) -> None:
    other = remember("Procedure for paging the payments on-call", type="procedural", tags=["crowd"]).id
    found = ids(recall(QUERY, limit=5, memory_type="procedural", tags=["match"]))
    assert sorted(found) == sorted(crowded["matching"])
    assert other not in found


def test_filter_limit_smaller_than_matches(crowded) -> None:
    found = recall(QUERY, limit=2, memory_type="procedural")
    assert len(found) == 2
    assert set(ids(found)) <= set(crowded["matching"])


def test_filters_through_recall_run(crowded) -> None:
    out = recall_run(query=QUERY, namespace="global", collection=None, memory_type="procedural", tags=["match"],
                     limit=3, min_score=0.0)
    assert sorted(r["id"] for r in out["results"]) == sorted(crowded["matching"])


# --------------------------------------------------------------------------- result shape


def test_recall_result_fields_are_exact(e5) -> None:
    mid = remember("The billing service is deployed on Kubernetes", tags=["billing", "infra"], importance=0.7,
                   category="platform", collection="infra").id
    out = recall_run(query="billing service", namespace="global", collection=None, memory_type=None, tags=None,
                     limit=5, min_score=0.0)
    assert set(out) == {"results"}
    [result] = out["results"]
    assert set(result) == RESULT_FIELDS
    memory = Memory.objects.get(pk=mid)
    assert result["id"] == mid
    assert (result["namespace"], result["collection"]) == ("global", "infra")
    assert result["content"] == memory.content
    assert result["summary"] == memory.summary
    assert result["type"] == "semantic"
    assert result["tags"] == ["billing", "infra"]
    assert result["category"] == "platform"
    assert result["importance"] == 0.7
    assert result["retention_tier"] == "T0"  # a category slot
    assert result["expires_at"] is None and result["expiring_soon"] is False
    assert result["device_id"] == "test-device"
    assert 0.0 < result["score"] <= 1.0
    assert result["semantic_score"] == result["score"]
    assert result["fulltext_score"] is None
    assert result["created_at"].endswith("Z")
    assert abs(parse(result["last_accessed"]) - timezone.now()) < timedelta(seconds=30)


@pytest.mark.parametrize("mode", ["fulltext", "semantic", "hybrid"])
def test_search_result_fields_are_exact(e5, mode: str) -> None:
    remember("The billing service is deployed on Kubernetes", tags=["billing"])
    out = search_run(query="billing kubernetes", namespace="global", collection=None, mode=mode, limit=10)
    assert set(out) == {"results"}
    [result] = out["results"]
    assert set(result) == RESULT_FIELDS
    assert result["expires_at"].endswith("Z")
    assert (result["semantic_score"] is None) == (mode == "fulltext")
    assert (result["fulltext_score"] is None) == (mode == "semantic")


def test_expiring_soon_within_warning_window(e5, bhg_config) -> None:
    now = timezone.now()
    soon = remember("The conference badge desk closes soon").id
    later = remember("The conference hotel booking deadline").id
    forever = remember("The conference code of conduct", retention_tier="T0").id
    Memory.objects.filter(pk=soon).update(expires_at=now + timedelta(days=3))
    Memory.objects.filter(pk=later).update(expires_at=now + timedelta(days=30))

    def flags() -> dict[str, bool]:
        out = recall_run(query="conference", namespace="global", collection=None, memory_type=None, tags=None,
                         limit=10, min_score=0.0)
        return {r["id"]: r["expiring_soon"] for r in out["results"]}

    assert flags() == {soon: True, later: False, forever: False}
    bhg_config.retention.pre_expiry_warning_days = 45
    assert flags() == {soon: True, later: True, forever: False}
    bhg_config.retention.pre_expiry_warning_days = 0
    assert flags() == {soon: False, later: False, forever: False}


def test_expiring_soon_in_search_results(e5) -> None:
    soon = remember("The conference badge desk closes soon").id
    Memory.objects.filter(pk=soon).update(expires_at=timezone.now() + timedelta(days=6, hours=23))
    out = search_run(query="conference badge", namespace="global", collection=None, mode="fulltext", limit=10)
    assert [(r["id"], r["expiring_soon"]) for r in out["results"]] == [(soon, True)]


def test_hybrid_search_respects_limit(e5) -> None:
    for text in MEMORIES:
        remember(text)
    assert len(memories_search(query="billing", namespace="global", collection=None, mode="hybrid", limit=2)) == 2


@pytest.mark.django_db
def test_responses_stay_within_max_response_chars(hash_embedder, bhg_config) -> None:
    from search.services import search_run

    bhg_config.defaults.max_response_chars = 3000
    for i in range(6):
        remember(f"Budget test {i}: long report\n" + ("lorem ipsum dolor sit amet " * 60) + f" unique{i}")
    out = search_run(query="budget test long report", namespace="global", collection=None, mode="fulltext", limit=10)
    assert len(json.dumps(out["results"], ensure_ascii=False)) <= 3000
    results = out["results"]
    assert "content_truncated" not in results[0] and len(results[0]["content"]) > 1500  # the best match whole
    assert results[1]["content_truncated"] is True and results[1]["content"] == results[1]["summary"]
    assert len(results) < 6 and out["truncated"] is True  # the rest did not fit, and the caller is told
