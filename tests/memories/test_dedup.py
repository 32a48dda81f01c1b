"""The fact guard's word-by-word comparison (memories.dedup.compare), without embeddings."""
from __future__ import annotations

import pytest

from memories.dedup import Relation, compare, tier_thresholds


@pytest.mark.parametrize(
    ("old", "new", "relation"),
    [
        ("Alice owns the billing service", "Bob owns the billing service", Relation.CONFLICT),
        ("The auth token expires after 1 hour", "The auth token expires after 24 hours", Relation.CONFLICT),
        ("Signed with RS256", "Signed with HS256", Relation.CONFLICT),
        ("Team lunch: order sushi on Friday", "Team lunch: order oat milk on Friday", Relation.CONFLICT),
        ("We are migrating billing from PostgreSQL to MySQL.", "We are migrating billing from MySQL to PostgreSQL.", Relation.CONFLICT),
        ("Priya covers nights and Tariq covers weekends.", "Tariq covers nights and Priya covers weekends.", Relation.CONFLICT),
        ("Alice reports to Bruno.", "Bruno reports to Alice.", Relation.CONFLICT),
        ("Alice owns the billing service", "The billing service is owned by Alice", Relation.SAME),
        ("The cache TTL is five minutes", "The cache TTL is 5 minutes", Relation.SAME),
        ("Deploys happen every Tuesday", "Deploys happen every Tuesday at 3pm", Relation.ELABORATES),
        ("Our auth service uses JWT with 1h expiry", "Our authentication service uses JWTs that expire after one hour",
         Relation.ELABORATES),
        ("X ships on Monday, according to Tariq", "X ships on Monday", Relation.SUBSUMED),
        # a negation or an order in time is part of the fact, though a stopword
        ("Run the migrations before deploying", "Run the migrations after deploying", Relation.CONFLICT),
        ("Feature flags are cleaned up after each release", "Feature flags are cleaned up before each release",
         Relation.CONFLICT),
        ("We use Redis for caching", "We do not use Redis for caching", Relation.REVERSES),
        ("The VPN is no longer required for staging", "The VPN is required for staging", Relation.REVERSES),
    ],
)
def test_compare(old: str, new: str, relation: Relation) -> None:
    assert compare(old, new) is relation


def test_tier_thresholds_follow_the_seed_table() -> None:
    assert tier_thresholds("T0", 0.92) == tier_thresholds("T1", 0.92)
    assert (tier_thresholds("T0", 0.92).noop, tier_thresholds("T0", 0.92).update) == (0.98, 0.95)
    assert (tier_thresholds("T2", 0.92).noop, tier_thresholds("T2", 0.92).update) == (0.98, 0.92)
    assert (tier_thresholds("T3", 0.92).noop, tier_thresholds("T3", 0.92).update) == (0.95, 0.92)
    assert tier_thresholds("T3", 0.85).update == 0.90
