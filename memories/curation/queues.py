"""The queues a curator works: memories that need a person. One definition each, used by the
dashboard's counts and the memory list's filter, so a number and the list behind it agree."""
from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import Q

EXPIRING_DAYS = 7

QUEUES: dict[str, str] = {
    "expiring": f"Expiring in {EXPIRING_DAYS} days",
    "review": "T1 due for review",
    "stale": "Consolidation candidates (stale)",
    "unsynced": "Not in the vector index yet",
}


def queue_condition(name: str, now: datetime) -> Q:
    """The filter of queue ``name`` at ``now`` (KeyError for an unknown queue)."""
    conditions = {
        "expiring": Q(decay_eligible=True, expires_at__gt=now, expires_at__lte=now + timedelta(days=EXPIRING_DAYS)),
        "review": Q(retention_tier="T1", review_due__lte=now),
        "stale": Q(stale=True),
        "unsynced": Q(vector_synced=False),
    }
    return conditions[name]
