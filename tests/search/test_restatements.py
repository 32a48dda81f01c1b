"""Without a key or ``supersedes``, the later of two near-identical statements comes first
(search/temporal.py ``newer_first``): both stay current and both are returned, only their order
follows time. Real e5 vectors: "near-identical" is the model's judgement, as in production."""
from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from bhgbrain_site.core.calls import CallContext
from bhgbrain_site.registry import call_tool
from memories.remember import RememberInput, thread_append
from tests.conftest import remember

pytestmark = pytest.mark.django_db

CTX = CallContext(actor="test")
JAN = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
MAR = datetime(2026, 3, 10, 9, 30, tzinfo=UTC)
KONG = "The API gateway in front of the billing service is Kong."
ENVOY = "The API gateway in front of the billing service is Envoy."
QUESTION = "Which API gateway is in front of the billing service?"


def search(query: str = QUESTION, **arguments: Any) -> list[dict[str, Any]]:
    arguments.setdefault("mode", "hybrid")
    return call_tool("search", {"query": query, **arguments}, CTX)["results"]


def contents(results: list[dict[str, Any]]) -> list[str]:
    return [r["content"] for r in results]


@pytest.mark.parametrize("mode", ["hybrid", "semantic"])
@pytest.mark.parametrize("later", [KONG, ENVOY])
def test_the_later_of_two_restatements_comes_first_and_both_stay(mode: str, later: str) -> None:
    earlier = ENVOY if later == KONG else KONG
    remember(earlier, valid_from=JAN)
    remember(later, valid_from=MAR)
    remember("The billing service sends invoices on the first day of each month.")

    found = contents(search(mode=mode))
    assert found[0] == later
    assert earlier in found  # reordered, never hidden: no key or supersedes said it was replaced
    results = search(mode=mode)
    assert all(r["current"] for r in results)
    assert [r["score"] for r in results] == sorted((r["score"] for r in results), reverse=True)


def test_as_of_before_the_later_statement_answers_with_the_earlier_one() -> None:
    remember(KONG, valid_from=JAN)
    remember(ENVOY, valid_from=MAR)

    assert contents(search(as_of="2026-02-01"))[0] == KONG
    assert contents(search(as_of="2026-03-10"))[0] == ENVOY


def test_a_later_fact_about_something_else_does_not_pass() -> None:
    """Same subject, another attribute: the model keeps them apart, so the order is relevance's."""
    remember("Alice lives in Paris, near the Canal Saint-Martin.", valid_from=JAN)
    remember("Alice's favourite code editor is Neovim with a dark theme.", valid_from=MAR)

    assert contents(search("Where does Alice live?"))[0].startswith("Alice lives in Paris")


def test_full_text_mode_ranks_by_words_alone() -> None:
    remember(KONG + " It was set up by the platform team last winter.", valid_from=JAN)
    remember(ENVOY, valid_from=MAR)

    assert contents(search("Kong gateway billing", mode="fulltext"))[0].startswith(KONG)


def test_two_facts_with_different_keys_keep_their_order() -> None:
    """Keys say which slot a fact fills: two keys are two slots, however alike the words, so which
    one holds from later does not change their order."""
    for namespace, (kong_from, envoy_from) in (("kong-first", (JAN, MAR)), ("envoy-first", (MAR, JAN))):
        remember(KONG, key="billing/gateway", valid_from=kong_from, namespace=namespace)
        remember(ENVOY, key="billing/edge-proxy", valid_from=envoy_from, namespace=namespace)

    assert contents(search(namespace="kong-first"))[:2] == contents(search(namespace="envoy-first"))[:2]


def test_messages_of_a_thread_are_ranked_by_relevance_alone(bhg_config) -> None:  # noqa: ANN001
    """A conversation's turns are events, not facts that replace each other: the later turn does
    not pass the earlier one (the same search with the rule switched off gives the same order)."""
    batch = [RememberInput(content=text, namespace="chat", collection="general", thread="ops", speaker="sam",
                           message_id=f"ops-{i}", occurred_at=at)
             for i, (text, at) in enumerate(((KONG, JAN), (ENVOY, MAR)))]
    thread_append(messages=batch, actor="test")

    ranked = contents(search(namespace="chat"))
    bhg_config.search.later_restatements_first = False
    assert ranked == contents(search(namespace="chat"))


def test_the_rule_can_be_switched_off(bhg_config) -> None:  # noqa: ANN001
    remember(KONG, valid_from=MAR)
    remember(ENVOY, valid_from=JAN)
    bhg_config.search.later_restatements_first = False
    by_relevance = contents(search())
    bhg_config.search.later_restatements_first = True
    assert contents(search())[0] == KONG
    assert set(by_relevance[:2]) == {KONG, ENVOY}
