"""A token's write rate (bhgbrain_site.core.write_rate): a sliding window over two minutes, refusals
uncounted, retry_after honest; through the registry, writes are counted and reads are not."""
from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.core.cache import caches

from bhgbrain_site import registry
from bhgbrain_site.core.calls import CallContext, Principal
from bhgbrain_site.core.errors import RateLimited, to_envelope
from bhgbrain_site.core.write_rate import WINDOW, write_admit

AGENT = Principal(name="agent", namespaces=frozenset({"alpha"}), write_rate_per_minute=3, key="token:test")
MINUTE = 29_000_000 * WINDOW  # the start of some minute


@pytest.fixture(autouse=True)
def _empty_counters() -> Iterator[None]:
    caches["ratelimit"].clear()
    yield
    caches["ratelimit"].clear()


def _refused(at: float) -> RateLimited | None:
    try:
        write_admit(AGENT, now=at)
    except RateLimited as exc:
        return exc
    return None


def test_n_calls_a_minute_then_refused_with_retry_after_and_refusals_are_not_counted() -> None:
    assert [_refused(MINUTE + s) for s in (1, 2, 3)] == [None, None, None]
    refused = _refused(MINUTE + 4)
    assert refused is not None and refused.retry_after is not None
    status, body = to_envelope(refused)
    assert status == 429 and body["error"]["code"] == "RATE_LIMITED" and body["error"]["retry_after"] == refused.retry_after
    for _ in range(20):  # hammering while refused buys nothing and costs nothing
        assert _refused(MINUTE + 5) is not None
    assert _refused(MINUTE + 4 + refused.retry_after) is None  # retry_after later, it fits
    assert _refused(MINUTE + 4 + refused.retry_after) is not None


def test_the_window_slides_over_the_previous_minute() -> None:
    for s in (50, 51, 52):
        assert _refused(MINUTE + s) is None
    # 10 s into the next minute the previous minute's 3 calls still weigh 2.5: one more does not fit
    assert _refused(MINUTE + WINDOW + 10) is not None
    # 45 s in they weigh 0.75: two more fit, not three
    assert [_refused(MINUTE + WINDOW + 45) is None for _ in range(3)] == [True, True, False]


def test_a_principal_without_a_rate_is_never_counted() -> None:
    free = Principal(name="master", namespaces=None)
    for _ in range(100):
        write_admit(free, now=MINUTE)
    assert caches["ratelimit"].get("wr::" + str(MINUTE // WINDOW)) is None


@pytest.mark.django_db
def test_the_registry_counts_writing_calls_only(hash_embedder) -> None:
    ctx = CallContext(actor="test", principal=Principal(name="agent", namespaces=frozenset({"alpha"}),
                                                        write_rate_per_minute=2, key="token:registry"))
    for i in range(2):
        registry.call_tool("remember", {"content": f"rate-limited note {i}"}, ctx)
    for _ in range(5):
        assert registry.call_tool("search", {"query": "note", "mode": "fulltext"}, ctx)["results"] is not None
    with pytest.raises(RateLimited):
        registry.call_tool("remember", {"content": "one write too many"}, ctx)
    with pytest.raises(RateLimited):
        registry.call_tool("collections", {"action": "create", "name": "more"}, ctx)  # any writing call
    assert "collections" in registry.call_tool("collections", {"action": "list"}, ctx)  # reads are never counted
