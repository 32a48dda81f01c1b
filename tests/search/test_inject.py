"""memory://inject: memories expiring within the warning window are flagged (the seed's expiring_soon)."""
from __future__ import annotations

import pytest

from bhgbrain_site.core.calls import CallContext
from bhgbrain_site.registry import call_tool, read_resource

pytestmark = pytest.mark.django_db
CTX = CallContext(actor="test")


def _remember(content: str, tier: str) -> str:
    return call_tool("remember", {"content": content, "retention_tier": tier, "namespace": "inject"}, CTX)["id"]


def test_inject_flags_memories_expiring_within_the_warning_window(hash_embedder, bhg_config) -> None:  # noqa: ANN001
    bhg_config.retention.tier_ttl.T3 = 3  # a T3 memory expires in 3 days; the warning window is 7
    soon = _remember("Scratch: the flaky login test is quarantined", "T3")
    later = _remember("The release train leaves every second Tuesday", "T2")  # 90 days
    never = _remember("All services log in UTC", "T0")

    inject = read_resource("memory://inject?namespace=inject", CTX)

    assert inject["memories_count"] == 3 and inject["expiring_soon"] == [soon]
    lines = {line for line in inject["content"].splitlines() if line.startswith("- [")}
    assert "- [semantic, expiring soon] Scratch: the flaky login test is quarantined" in lines
    assert "- [semantic] The release train leaves every second Tuesday" in lines
    assert "- [semantic] All services log in UTC" in lines
    assert {later, never}.isdisjoint(inject["expiring_soon"])


def test_the_warning_window_is_the_configured_one(hash_embedder, bhg_config) -> None:  # noqa: ANN001
    bhg_config.retention.tier_ttl.T3 = 3
    bhg_config.retention.pre_expiry_warning_days = 2  # 3 days left is not "soon" any more
    _remember("Scratch: rerun the nightly export by hand", "T3")
    inject = read_resource("memory://inject?namespace=inject", CTX)
    assert inject["memories_count"] == 1 and inject["expiring_soon"] == []
    assert "expiring soon" not in inject["content"]
