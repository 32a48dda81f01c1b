"""Facts over time on the read side: search and recall answer with current facts by default,
with the versions valid ``as_of`` a time, and with each result's history (search/temporal.py).

Chains are made with the core's public API (remember with ``key``/``valid_from``, and
``memories.temporal.supersede``); what is checked here is what search, recall, inject and the
hand-off give back."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from bhgbrain_site.core.calls import CallContext, Principal
from bhgbrain_site.core.errors import Forbidden, InvalidInput
from bhgbrain_site.registry import call_tool
from memories.access import tracker
from memories.indexes import embedded
from memories.models import Memory
from memories.temporal import supersede
from search import fulltext
from search.bm25.text_index import reset_text_index
from search.handoff import handoff_pack
from search.inject import build_inject
from tests.conftest import remember

pytestmark = pytest.mark.django_db

CTX = CallContext(actor="test")
JAN = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
MAR = datetime(2026, 3, 10, 9, 30, tzinfo=UTC)
JUN = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
KEY = "alice/home-city"
MODES = ("fulltext", "semantic", "hybrid")


@dataclass(frozen=True)
class Chain:
    paris: str
    berlin: str
    lisbon: str
    rome: str  # an unrelated memory without a key, written now


@pytest.fixture(autouse=True)
def _empty_access_tracker() -> Iterator[None]:
    tracker.discard()
    yield
    tracker.discard()


def alice_chain(namespace: str = "global", *, search_between: bool = False) -> Chain:
    """Alice's home city in three versions (January, March, June) plus Bob's, unrelated.
    ``search_between``: search after each write, so the indexes are loaded before a version is
    superseded and must move it through the change feed."""
    ids = []
    for city, detail, since in (("Paris", "near the Canal Saint-Martin", JAN), ("Berlin", "in Kreuzberg", MAR),
                                ("Lisbon", "in Alfama by the river", JUN)):
        ids.append(str(remember(f"Alice lives in {city}, {detail}", key=KEY, valid_from=since, namespace=namespace).id))
        if search_between:
            for mode in MODES:
                search(namespace=namespace, mode=mode)
    rome = str(remember("Bob lives in Rome and cycles to work", namespace=namespace).id)
    return Chain(*ids, rome)


def search(query: str = "where does Alice live?", **arguments: Any) -> list[dict[str, Any]]:
    arguments.setdefault("mode", "fulltext")
    return call_tool("search", {"query": query, **arguments}, CTX)["results"]


def recall(query: str = "where does Alice live?", **arguments: Any) -> list[dict[str, Any]]:
    return call_tool("recall", {"query": query, "min_score": 0, **arguments}, CTX)["results"]


def ids(results: list[dict[str, Any]]) -> list[str]:
    return [r["id"] for r in results]


def stamp(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


# --------------------------------------------------------------------------- current facts by default


@pytest.mark.parametrize("mode", MODES)
def test_default_search_returns_current_facts_only(hash_embedder, mode: str) -> None:
    chain = alice_chain(search_between=True)
    found = search(mode=mode, limit=50)
    assert chain.lisbon in ids(found)
    assert not {chain.paris, chain.berlin} & set(ids(found))
    lisbon = next(r for r in found if r["id"] == chain.lisbon)
    assert (lisbon["current"], lisbon["superseded_by"], lisbon["key"]) == (True, None, KEY)
    assert lisbon["valid_from"] == stamp(JUN) and lisbon["valid_until"] is None


@pytest.mark.parametrize("mode", MODES)
def test_a_freshly_loaded_index_keeps_superseded_rows_apart(hash_embedder, mode: str) -> None:
    chain = alice_chain()
    embedded.reset_vector_index()
    reset_text_index()  # as another process would: every row read from the database
    assert not {chain.paris, chain.berlin} & set(ids(search(mode=mode, limit=50)))


def test_superseded_rows_live_in_their_own_partition(hash_embedder) -> None:
    chain = alice_chain(search_between=True)
    now = datetime.now(UTC)
    current = {h.memory_id for h in fulltext.search("Alice lives", namespace="global", collection=None, now=now, limit=10)}
    older = {h.memory_id for h in fulltext.search("Alice lives", namespace="global", collection=None, now=now, limit=10,
                                                  versions="superseded")}
    assert (current, older) == ({chain.lisbon, chain.rome}, {chain.paris, chain.berlin})
    index = embedded.get_vector_index()
    assert index is not None
    vector = hash_embedder.embed_query("Alice lives")
    partition = {h.memory_id for h in index.search(vector, namespace="global", collection=None, limit=10, now=now,
                                                   versions="superseded")}
    assert partition == {chain.paris, chain.berlin}


def test_explicit_supersede_leaves_default_search(hash_embedder) -> None:
    old = str(remember("The API gateway is Kong, configured by the platform team").id)
    assert ids(search("API gateway")) == [old]
    new = str(remember("We moved the API gateway to Envoy last sprint").id)
    supersede(older=[Memory.objects.get(pk=old).id], newer=Memory.objects.get(pk=new).id, actor="test")
    for mode in MODES:
        assert old not in ids(search("API gateway Kong", mode=mode))
    assert ids(search("API gateway Kong", include_history=True))[:2] == [new, old]


# --------------------------------------------------------------------------- as_of


@pytest.mark.parametrize(("as_of", "expected"), [
    (stamp(MAR), "berlin"),  # valid_from is inclusive
    (stamp(MAR - timedelta(microseconds=1)), "paris"),  # valid_until is exclusive
    ("2026-03-10", "berlin"),  # a bare date is the end of that day (UTC): Berlin from 09:30
    ("2026-03-09", "paris"),
    ("2026-03-10T09:30:00", "berlin"),  # a time without a zone is UTC
    ("2026-03-10T10:29:59+01:00", "paris"),  # 09:29:59 UTC
    (stamp(JUN + timedelta(days=1)), "lisbon"),
    (stamp(JAN), "paris"),
])
@pytest.mark.parametrize("mode", MODES)
def test_as_of_answers_with_the_version_valid_then(hash_embedder, mode: str, as_of: str, expected: str) -> None:
    chain = alice_chain(search_between=True)
    found = [r for r in search(mode=mode, as_of=as_of, limit=50) if r["key"] == KEY]
    assert ids(found) == [getattr(chain, expected)]
    assert found[0]["current"] is (expected == "lisbon")


def test_as_of_before_any_version_finds_nothing_of_the_chain(hash_embedder) -> None:
    chain = alice_chain()
    assert search(as_of="2026-01-04") == []  # Bob's memory is valid only from its creation (now)
    assert set(ids(search(as_of="2026-06-30", limit=50))) == {chain.lisbon}
    assert set(ids(search(as_of=stamp(datetime.now(UTC) + timedelta(minutes=1)), limit=50))) == {chain.lisbon, chain.rome}


def test_as_of_scores_both_partitions_with_their_joint_statistics(hash_embedder) -> None:
    """In a superseded partition every version of a chain shares its words (there "Alice" is in
    every row, so its idf would be near 0): the version valid then must still beat a current
    memory that matches fewer of the query's words."""
    for i in range(12):
        remember(f"Filler note {i}: the build server {i} reboots on Sundays")
    bob = str(remember("Bob lives in Rome and cycles to work", valid_from=JAN).id)
    chain = alice_chain()
    found = search(as_of="2026-02-01", limit=5)
    assert ids(found)[:2] == [chain.paris, bob]


def test_as_of_marks_a_superseded_version_with_its_successor(hash_embedder) -> None:
    chain = alice_chain()
    (paris,) = search(as_of="2026-02-01", mode="hybrid")
    assert paris["id"] == chain.paris
    assert (paris["current"], paris["superseded_by"], paris["valid_until"]) == (False, chain.berlin, stamp(MAR))
    assert paris["valid_from"] == stamp(JAN)


def test_recall_as_of(hash_embedder) -> None:
    chain = alice_chain()
    assert ids(recall(as_of="2026-02-01")) == [chain.paris]
    assert ids(recall(as_of="2026-04-01")) == [chain.berlin]
    assert chain.lisbon in ids(recall()) and not {chain.paris, chain.berlin} & set(ids(recall()))


# --------------------------------------------------------------------------- include_history


@pytest.mark.parametrize("mode", ("fulltext", "hybrid"))
def test_history_follows_the_current_fact_newest_first(hash_embedder, mode: str) -> None:
    chain = alice_chain(search_between=True)
    found = search("Canal Saint-Martin", mode=mode, include_history=True)  # only the oldest version says it
    assert ids(found)[:3] == [chain.lisbon, chain.berlin, chain.paris]
    assert [(r["current"], r["superseded_by"]) for r in found[:3]] == [
        (True, None), (False, chain.lisbon), (False, chain.berlin)]
    assert found[0]["score"] >= max(r["score"] for r in found[1:3])  # never ranked above its successor
    assert chain.paris not in ids(search("Canal Saint-Martin", mode=mode))


def test_history_of_a_fact_without_older_versions_is_the_fact_alone(hash_embedder) -> None:
    chain = alice_chain()
    assert ids(search("Bob Rome cycles", include_history=True)) == [chain.rome]


def test_history_as_of_follows_the_version_valid_then(hash_embedder) -> None:
    chain = alice_chain()
    found = search(as_of="2026-04-01", include_history=True)
    assert ids(found) == [chain.berlin, chain.paris]


def test_history_limit_counts_results_not_versions(hash_embedder) -> None:
    chain = alice_chain()
    found = search("lives", include_history=True, limit=1)
    assert len({r["key"] for r in found}) == 1
    assert ids(found) in ([chain.lisbon, chain.berlin, chain.paris], [chain.rome])


def test_recall_with_history(hash_embedder) -> None:
    chain = alice_chain()
    found = recall(include_history=True, limit=5)
    at = ids(found).index(chain.lisbon)
    assert ids(found)[at:at + 3] == [chain.lisbon, chain.berlin, chain.paris]


# --------------------------------------------------------------------------- inject and hand-off


def test_inject_carries_current_facts_only(hash_embedder) -> None:
    alice_chain()
    for query in ("where does Alice live?", None):
        content = build_inject(namespace="global", query=query)["content"]
        assert "Lisbon" in content
        assert "Paris" not in content and "Berlin" not in content


def test_handoff_carries_current_facts_only(hash_embedder) -> None:
    remember("I prefer green tea in the morning", key="me/morning-drink", valid_from=JAN)
    remember("I prefer black coffee in the morning", key="me/morning-drink", valid_from=MAR)
    remember("Planned: renew the Paris lease", key="alice/lease", valid_from=JAN, status="planned")
    remember("Planned: sign the Berlin lease", key="alice/lease", valid_from=MAR, status="planned")
    content = handoff_pack(namespace="global")["content"]
    assert "black coffee" in content and "Berlin lease" in content
    assert "green tea" not in content and "Paris lease" not in content


# --------------------------------------------------------------------------- scoped tokens


def test_a_scoped_token_never_sees_another_namespaces_chain(hash_embedder) -> None:
    alices = alice_chain("alice")
    bobs = alice_chain("bob")  # the same key, another namespace: another chain
    bob = CallContext(actor="bob", principal=Principal(name="bob", namespaces=frozenset({"bob"})))
    for arguments in ({"include_history": True}, {"as_of": "2026-04-01"}, {"as_of": "2026-04-01", "include_history": True}):
        found = call_tool("search", {"query": "Alice lives Canal Saint-Martin Kreuzberg", "mode": "fulltext",
                                     "namespace": "bob", **arguments}, bob)["results"]
        assert found and {r["namespace"] for r in found} == {"bob"}
        assert not set(ids(found)) & {alices.paris, alices.berlin, alices.lisbon, alices.rome}
        assert {r["superseded_by"] for r in found} <= {None, bobs.berlin, bobs.lisbon}
        with pytest.raises(Forbidden):
            call_tool("search", {"query": "Alice", "namespace": "alice", **arguments}, bob)


# --------------------------------------------------------------------------- bad values


@pytest.mark.parametrize("as_of", ["yesterday", "2026-02-30", "2026-03-10T25:00:00Z", "", "10/03/2026"])
@pytest.mark.parametrize("tool", ["search", "recall"])
def test_a_bad_as_of_is_invalid_input(hash_embedder, tool: str, as_of: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        call_tool(tool, {"query": "Alice", "as_of": as_of}, CTX)
    assert "as_of" in caught.value.message


def test_the_console_search_finds_superseded_versions_too(hash_embedder) -> None:
    from search.console import memory_ids_ranked

    chain = alice_chain()
    assert chain.paris in memory_ids_ranked(query="Canal Saint-Martin", namespaces=["global"], limit=10)
