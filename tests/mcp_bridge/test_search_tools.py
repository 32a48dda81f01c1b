"""The recall and search tools through the registry: validation, defaults, result shape."""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from bhgbrain_site.core.calls import CallContext
from bhgbrain_site.core.errors import InvalidInput
from bhgbrain_site.registry import call_tool, get_operation
from memories.access import tracker
from tests.conftest import remember

pytestmark = pytest.mark.django_db

CTX = CallContext(actor="test")
RESULT_FIELDS = {
    "id", "namespace", "collection", "content", "summary", "type", "tags", "category", "importance", "score",
    "semantic_score", "fulltext_score", "retention_tier", "expires_at", "expiring_soon", "created_at",
    "last_accessed", "device_id", "valid_from", "valid_until", "superseded_by", "key", "current",
}


@pytest.fixture(autouse=True)
def _empty_access_tracker() -> Iterator[None]:
    tracker.discard()
    yield
    tracker.discard()


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return call_tool(name, arguments, CTX)


# --------------------------------------------------------------------------- validation

COMMON_INVALID = [
    ({"query": "x", "unknown": 1}, "unknown"),
    ({"query": "q" * 501}, "query"),
    ({"query": ""}, "query"),
    ({}, "query"),
    ({"query": None}, "query"),
    ({"query": 42}, "query"),
    ({"query": "x", "limit": 0}, "limit"),
    ({"query": "x", "limit": -1}, "limit"),
    ({"query": "x", "limit": "3"}, "limit"),
    ({"query": "x", "limit": 2.5}, "limit"),
    ({"query": "x", "namespace": "has space"}, "namespace"),
    ({"query": "x", "namespace": ""}, "namespace"),
    ({"query": "x", "collection": "a/b"}, "collection"),
    ({"query": "x", "as_of": "yesterday"}, "as_of"),
    ({"query": "x", "as_of": "2026-02-30"}, "as_of"),
    ({"query": "x", "as_of": "2026-13-01T00:00:00Z"}, "as_of"),
    ({"query": "x", "as_of": ""}, "as_of"),
    ({"query": "x", "as_of": ["2026-01-01"]}, "as_of"),
    ({"query": "x", "include_history": "yes"}, "include_history"),
    ({"query": "x", "include_history": 1}, "include_history"),
]

RECALL_INVALID = [
    *COMMON_INVALID,
    ({"query": "x", "limit": 21}, "limit"),
    ({"query": "x", "min_score": 1.5}, "min_score"),
    ({"query": "x", "min_score": -0.1}, "min_score"),
    ({"query": "x", "min_score": "0.5"}, "min_score"),
    ({"query": "x", "tags": ["bad tag"]}, "tags"),
    ({"query": "x", "tags": [""]}, "tags"),
    ({"query": "x", "tags": ["t" * 101]}, "tags"),
    ({"query": "x", "tags": [f"t{i}" for i in range(21)]}, "tags"),
    ({"query": "x", "tags": "auth"}, "tags"),
    ({"query": "x", "type": "fact"}, "type"),
    ({"query": "x", "mode": "hybrid"}, "mode"),  # recall has no mode
]

SEARCH_INVALID = [
    *COMMON_INVALID,
    ({"query": "x", "limit": 51}, "limit"),
    ({"query": "x", "mode": "fuzzy"}, "mode"),
    ({"query": "x", "mode": "HYBRID"}, "mode"),
    ({"query": "x", "min_score": 0.5}, "min_score"),  # search has no min_score
    ({"query": "x", "tags": ["auth"]}, "tags"),  # nor tags
]


def _ids(cases: list[tuple[dict[str, Any], str]]) -> list[str]:
    return [f"{field}:{repr(args)[:40]}" for args, field in cases]


@pytest.mark.parametrize(("arguments", "field"), RECALL_INVALID, ids=_ids(RECALL_INVALID))
def test_recall_rejects_invalid_input_naming_the_field(hash_embedder, arguments: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        call_tool("recall", arguments, CTX)
    assert field in caught.value.message
    assert caught.value.code == "INVALID_INPUT" and caught.value.http_status == 400
    assert tracker.pending() == 0


@pytest.mark.parametrize(("arguments", "field"), SEARCH_INVALID, ids=_ids(SEARCH_INVALID))
def test_search_rejects_invalid_input_naming_the_field(hash_embedder, arguments: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        call_tool("search", arguments, CTX)
    assert field in caught.value.message
    assert caught.value.code == "INVALID_INPUT"


@pytest.mark.parametrize("name", ["recall", "search"])
def test_validation_message_never_echoes_the_query(hash_embedder, name: str) -> None:
    secret = "sk-live-" + "Z" * 495
    with pytest.raises(InvalidInput) as caught:
        call_tool(name, {"query": secret}, CTX)
    assert "ZZZZ" not in caught.value.message


@pytest.mark.parametrize("name", ["recall", "search"])
def test_arguments_must_be_an_object(name: str) -> None:
    with pytest.raises(InvalidInput):
        call_tool(name, ["query", "x"], CTX)


@pytest.mark.parametrize("name", ["recall", "search"])
def test_boundary_values_are_accepted(hash_embedder, name: str) -> None:
    remember("The billing service runs on Kubernetes")
    top = 20 if name == "recall" else 50
    for arguments in ({"query": "q" * 500}, {"query": "x", "limit": 1}, {"query": "x", "limit": top}):
        assert set(call(name, **arguments)) == {"results"}


def test_recall_accepts_integer_min_score_and_boundaries(hash_embedder) -> None:
    remember("The billing service runs on Kubernetes")
    assert len(call("recall", query="billing", min_score=0)["results"]) == 1
    assert call("recall", query="billing", min_score=1)["results"] == []
    assert len(call("recall", query="billing", min_score=0.0, tags=["a-b", "C9"], type="semantic")["results"]) == 0


# --------------------------------------------------------------------------- defaults


def test_search_default_limit_is_ten(hash_embedder) -> None:
    for i in range(12):
        remember(f"Kubernetes note number {i} about cluster {i * 7}")
    assert len(call("search", query="kubernetes")["results"]) == 10
    assert len(call("search", query="kubernetes", limit=50)["results"]) == 12
    assert len(call("search", query="kubernetes", limit=3)["results"]) == 3


def test_search_default_mode_is_hybrid(hash_embedder) -> None:
    remember("Kubernetes runs the billing service")
    [result] = call("search", query="kubernetes")["results"]
    assert result["semantic_score"] is not None and result["fulltext_score"] is not None
    [fulltext] = call("search", query="kubernetes", mode="fulltext")["results"]
    assert fulltext["semantic_score"] is None


def test_recall_default_limit_comes_from_config(hash_embedder, bhg_config) -> None:
    for i in range(8):
        remember(f"Distinct fact number {i}: the service {i} listens on port {8000 + i}")
    assert bhg_config.defaults.recall_limit == 5
    assert len(call("recall", query="service port", min_score=0.0)["results"]) == 5
    bhg_config.defaults.recall_limit = 3
    assert len(call("recall", query="service port", min_score=0.0)["results"]) == 3
    assert len(call("recall", query="service port", min_score=0.0, limit=20)["results"]) == 8


def test_recall_default_min_score_comes_from_config(e5, bhg_config) -> None:
    remember("The billing service is deployed on Kubernetes in the eu-west cluster")
    remember("Our cat sleeps on the sofa all afternoon")
    remember("The printer on floor three needs new toner")
    query = "Where is the billing service deployed?"
    everything = call("recall", query=query, min_score=0.0)["results"]
    gated = call("recall", query=query)["results"]
    assert len(everything) == 3
    assert 0 < len(gated) < len(everything)
    assert all(r["score"] >= 0.6 for r in gated)
    assert [r["id"] for r in gated] == [r["id"] for r in everything if r["score"] >= 0.6]
    bhg_config.defaults.min_score = 0.0
    assert len(call("recall", query=query)["results"]) == 3


def test_default_namespace_and_explicit_namespace(hash_embedder) -> None:
    mine = remember("Kubernetes runs the billing service", namespace="global").id
    theirs = remember("Kubernetes runs the payroll service", namespace="team-b").id
    assert [r["id"] for r in call("search", query="kubernetes")["results"]] == [mine]
    assert [r["id"] for r in call("search", query="kubernetes", namespace="team-b")["results"]] == [theirs]
    assert [r["id"] for r in call("recall", query="kubernetes", min_score=0.0, namespace="team-b")["results"]] == [theirs]
    assert call("search", query="kubernetes", namespace="nobody")["results"] == []


def test_collection_argument(hash_embedder) -> None:
    infra = remember("Kubernetes runs the billing service", collection="infra").id
    remember("Kubernetes upgrade notes", collection="notes")
    assert [r["id"] for r in call("search", query="kubernetes", collection="infra")["results"]] == [infra]
    assert [r["id"] for r in call("recall", query="kubernetes", collection="infra", min_score=0.0)["results"]] == [infra]


# --------------------------------------------------------------------------- results


@pytest.mark.parametrize("name", ["recall", "search"])
def test_results_shape(hash_embedder, name: str) -> None:
    mid = remember("Kubernetes runs the billing service", tags=["infra"]).id
    extra = {"min_score": 0.0} if name == "recall" else {}
    out = call(name, query="kubernetes billing", **extra)
    assert set(out) == {"results"}
    assert isinstance(out["results"], list)
    [result] = out["results"]
    assert set(result) == RESULT_FIELDS
    assert result["id"] == mid and result["tags"] == ["infra"]
    assert tracker.pending() == 1  # returned results count as accesses


@pytest.mark.parametrize("name", ["recall", "search"])
def test_empty_results_shape(hash_embedder, name: str) -> None:
    assert call(name, query="nothing stored yet") == {"results": []}


def test_tools_are_registered_with_descriptions() -> None:
    for name in ("recall", "search"):
        tool = get_operation(name)
        assert tool.name == name and tool.description
