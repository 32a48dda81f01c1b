"""The dashboard's 30-day growth: the same per-day counts for the whole store (on SQLite read
through the named partial index) and for a curator's namespaces (through the ORM)."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from memories.models import Memory
from retention.dashboard import DAYS, dashboard_snapshot
from tests.conftest import remember

pytestmark = pytest.mark.django_db


def _created(namespace: str, content: str, days_ago: float, *, archived: bool = False) -> None:
    memory_id = remember(content, namespace=namespace).id
    Memory.objects.filter(id=memory_id).update(created_at=timezone.now() - timedelta(days=days_ago), archived=archived)


def test_growth_counts_live_memories_per_day_in_the_window() -> None:
    now = timezone.now()
    _created("alice", "alice wrote the deploy checklist today", 0)
    _created("alice", "alice moved the staging database yesterday", 1)
    _created("bob", "bob renamed the billing queue yesterday", 1)
    _created("bob", "bob archived note about the old printer", 1, archived=True)
    _created("bob", "bob wrote this before the window opened", DAYS + 5)

    whole = dashboard_snapshot(namespaces=None, now=now)
    assert len(whole.growth) == DAYS
    assert (whole.growth[-1], whole.growth[-2], sum(whole.growth)) == (1, 2, 3)

    alice = dashboard_snapshot(namespaces=["alice"], now=now)
    assert (alice.growth[-1], alice.growth[-2], sum(alice.growth)) == (1, 1, 2)
    bob = dashboard_snapshot(namespaces=["bob"], now=now)
    assert sum(bob.growth) == 1
