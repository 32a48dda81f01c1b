"""Access tracking: returned results count as accesses; sliding expiry, T1 review, promotion, batching."""
from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest
from django.conf import settings
from django.db import DatabaseError, connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from memories import access as retention_services
from memories.access import AccessTracker, memories_record_access, tracker
from memories.models import AuditLog, ChangeFeedEntry, Memory
from search.services import recall_run, search_run
from tests.conftest import remember

pytestmark = pytest.mark.django_db

DAY = timedelta(days=1)


@pytest.fixture(autouse=True)
def _empty_access_tracker() -> Iterator[None]:
    tracker.discard()
    yield
    tracker.discard()


def fresh(memory_id: str) -> Memory:
    return Memory.objects.get(pk=memory_id)


def access(memory_id: str, times: int, at: datetime | None = None) -> None:
    """Record ``times`` accesses through a tracker (as a search would) and flush them."""
    at = at or timezone.now()
    for _ in range(times):
        tracker.record([memory_id], at)
    tracker.flush()


def promotions(memory_id: str) -> list[dict]:
    rows = AuditLog.objects.filter(memory_id=memory_id, operation="PROMOTE").order_by("id")
    return [row.details for row in rows]


# --------------------------------------------------------------------------- only returned results count


def test_search_records_accesses_only_for_returned_memories(hash_embedder) -> None:
    hit = remember("The billing service runs on Kubernetes").id
    miss = remember("Lunch is served at noon").id
    before = timezone.now()
    out = search_run(query="kubernetes", namespace="global", collection=None, mode="fulltext", limit=10)
    assert [r["id"] for r in out["results"]] == [hit]
    assert fresh(hit).access_count == 0  # batched: nothing written before the flush
    assert tracker.pending() == 1
    tracker.flush()
    assert tracker.pending() == 0
    returned, other = fresh(hit), fresh(miss)
    assert returned.access_count == 1
    assert returned.last_accessed is not None and before <= returned.last_accessed <= timezone.now()
    assert other.access_count == 0 and other.last_accessed is None
    assert out["results"][0]["last_accessed"] is not None


def test_recall_records_accesses_only_for_returned_memories(e5) -> None:
    best = remember("The billing service is deployed on Kubernetes").id
    second = remember("Invoices are generated nightly by the billing service").id
    out = recall_run(query="Where is the billing service deployed?", namespace="global", collection=None,
                     memory_type=None, tags=None, limit=1, min_score=0.0)
    assert [r["id"] for r in out["results"]] == [best]
    tracker.flush()
    assert fresh(best).access_count == 1
    assert fresh(second).access_count == 0


def test_empty_result_records_nothing(hash_embedder) -> None:
    remember("The billing service runs on Kubernetes")
    assert search_run(query="zebra", namespace="global", collection=None, mode="fulltext", limit=10) == {"results": []}
    assert tracker.pending() == 0


def test_each_search_is_one_access(hash_embedder) -> None:
    mid = remember("The billing service runs on Kubernetes").id
    for _ in range(3):
        search_run(query="kubernetes billing", namespace="global", collection=None, mode="hybrid", limit=10)
    tracker.flush()
    assert fresh(mid).access_count == 3


# --------------------------------------------------------------------------- sliding window


def test_access_extends_expiry_to_now_plus_ttl(hash_embedder) -> None:
    mid = remember("The billing service runs on Kubernetes").id
    Memory.objects.filter(pk=mid).update(expires_at=timezone.now() + 10 * DAY)
    search_run(query="kubernetes", namespace="global", collection=None, mode="fulltext", limit=10)
    tracker.flush()
    memory = fresh(mid)
    assert memory.retention_tier == "T2"
    assert memory.expires_at == memory.last_accessed + 90 * DAY


def test_access_never_shortens_expiry(hash_embedder) -> None:
    far = timezone.now() + 200 * DAY
    mid = remember("The billing service runs on Kubernetes").id
    Memory.objects.filter(pk=mid).update(expires_at=far)
    access(mid, 1)
    memory = fresh(mid)
    assert memory.access_count == 1
    assert memory.expires_at == far


def test_sliding_window_disabled_leaves_expiry_alone(hash_embedder, bhg_config) -> None:
    bhg_config.retention.sliding_window_enabled = False
    soon = timezone.now() + 10 * DAY
    mid = remember("The billing service runs on Kubernetes").id
    Memory.objects.filter(pk=mid).update(expires_at=soon)
    access(mid, 1)
    memory = fresh(mid)
    assert memory.access_count == 1
    assert memory.last_accessed is not None
    assert memory.expires_at == soon


def test_sliding_window_uses_configured_ttl(hash_embedder, bhg_config) -> None:
    bhg_config.retention.tier_ttl.T2 = 120
    mid = remember("The billing service runs on Kubernetes").id
    at = timezone.now() + 2 * DAY
    access(mid, 1, at)
    assert fresh(mid).expires_at == at + 120 * DAY


def test_an_expiry_moves_only_by_a_step_or_more(hash_embedder) -> None:
    """An access soon after the last move leaves the expiry (and the change feed) alone: TTLs are days."""
    mid = remember("The billing service runs on Kubernetes").id
    created = fresh(mid).expires_at
    feed_before = ChangeFeedEntry.objects.count()
    access(mid, 1, timezone.now() + retention_services.EXPIRY_STEP / 2)
    memory = fresh(mid)
    assert memory.access_count == 1 and memory.expires_at == created
    assert ChangeFeedEntry.objects.count() == feed_before
    later = timezone.now() + 2 * retention_services.EXPIRY_STEP
    access(mid, 1, later)
    assert fresh(mid).expires_at == later + 90 * DAY


def test_t1_access_resets_review_due(hash_embedder) -> None:
    mid = remember("The incident review process has four steps", retention_tier="T1").id
    overdue = timezone.now() - DAY
    Memory.objects.filter(pk=mid).update(review_due=overdue, expires_at=timezone.now() + 5 * DAY)
    at = timezone.now()
    access(mid, 1, at)
    memory = fresh(mid)
    assert memory.retention_tier == "T1"
    assert memory.review_due == at + 365 * DAY
    assert memory.expires_at == at + 365 * DAY


def test_t0_access_counts_but_never_expires(hash_embedder) -> None:
    mid = remember("The architecture decision record for the ledger", retention_tier="T0").id
    access(mid, 3)
    memory = fresh(mid)
    assert memory.access_count == 3
    assert memory.expires_at is None and memory.decay_eligible is False
    assert memory.review_due is None


def test_expiry_change_is_published_to_vector_indexes(hash_embedder) -> None:
    mid = remember("The billing service runs on Kubernetes").id
    Memory.objects.filter(pk=mid).update(expires_at=timezone.now() + 10 * DAY)
    before = ChangeFeedEntry.objects.filter(memory_id=mid).count()
    access(mid, 1)
    assert ChangeFeedEntry.objects.filter(memory_id=mid).count() == before + 1
    # only the expiry moved: every process re-reads two columns of it, not the whole row
    assert ChangeFeedEntry.objects.filter(memory_id=mid).latest("id").op == ChangeFeedEntry.Op.EXPIRY


def test_last_accessed_is_the_latest_access_even_if_recorded_out_of_order(hash_embedder) -> None:
    mid = remember("The billing service runs on Kubernetes").id
    late = timezone.now()
    early = late - timedelta(seconds=5)
    tracker.record([mid], late)
    tracker.record([mid], early)  # e.g. a slower request that started earlier finishes later
    tracker.flush()
    memory = fresh(mid)
    assert memory.access_count == 2
    assert memory.last_accessed == late
    assert memory.expires_at >= late + 90 * DAY - retention_services.EXPIRY_STEP  # moved by steps


# --------------------------------------------------------------------------- promotion


def test_t3_promotes_to_t2_at_five_then_t1_at_ten(hash_embedder) -> None:
    mid = remember("Scratch note about the staging cluster", retention_tier="T3").id
    access(mid, 4)
    memory = fresh(mid)
    assert (memory.retention_tier, memory.access_count) == ("T3", 4)
    assert promotions(mid) == []

    at5 = timezone.now()
    access(mid, 1, at5)
    memory = fresh(mid)
    assert (memory.retention_tier, memory.access_count) == ("T2", 5)
    assert memory.expires_at == at5 + 90 * DAY  # re-anchored at the access with T2's TTL
    assert memory.decay_eligible is True and memory.review_due is None
    assert promotions(mid) == [{"from": "T3", "to": "T2", "access_count": 5}]
    row = AuditLog.objects.get(memory_id=mid, operation="PROMOTE")
    assert row.namespace == "global" and row.timestamp == at5

    access(mid, 4)
    assert fresh(mid).retention_tier == "T2"

    at10 = timezone.now()
    access(mid, 1, at10)
    memory = fresh(mid)
    assert (memory.retention_tier, memory.access_count) == ("T1", 10)
    assert memory.expires_at == at10 + 365 * DAY
    assert memory.review_due == at10 + 365 * DAY
    assert promotions(mid)[-1] == {"from": "T2", "to": "T1", "access_count": 10}
    assert len(promotions(mid)) == 2


def test_born_t2_promotes_one_step_at_the_first_threshold(hash_embedder) -> None:
    """One step per threshold crossed, whatever the starting tier: a T2 memory reaches T1 at its 5th access."""
    mid = remember("The billing service runs on Kubernetes").id
    assert fresh(mid).retention_tier == "T2"
    access(mid, 4)
    assert fresh(mid).retention_tier == "T2"
    at = timezone.now()
    access(mid, 1, at)
    memory = fresh(mid)
    assert (memory.retention_tier, memory.access_count) == ("T1", 5)
    assert memory.expires_at == at + 365 * DAY
    access(mid, 20)
    assert fresh(mid).retention_tier == "T1"  # never to T0
    assert promotions(mid) == [{"from": "T2", "to": "T1", "access_count": 5}]


def test_promotion_through_search_results(hash_embedder) -> None:
    mid = remember("Scratch note about the staging cluster", retention_tier="T3").id
    for _ in range(5):
        search_run(query="staging cluster", namespace="global", collection=None, mode="fulltext", limit=10)
    outcomes = tracker.flush()
    assert [(o.memory_id, o.access_count, o.retention_tier, o.promoted_from) for o in outcomes] == [(mid, 5, "T2", "T3")]
    assert fresh(mid).retention_tier == "T2"


def test_one_step_per_threshold_crossed_in_one_flush(hash_embedder) -> None:
    mid = remember("Scratch note about the staging cluster", retention_tier="T3").id
    access(mid, 10)
    memory = fresh(mid)
    assert (memory.retention_tier, memory.access_count) == ("T1", 10)
    assert promotions(mid) == [{"from": "T3", "to": "T1", "access_count": 10}]


def test_t1_and_t0_never_promote(hash_embedder) -> None:
    t1 = remember("The incident review process has four steps", retention_tier="T1").id
    t0 = remember("The architecture decision record for the ledger", retention_tier="T0").id
    access(t1, 50)
    access(t0, 50)
    assert (fresh(t1).retention_tier, fresh(t1).access_count) == ("T1", 50)
    assert (fresh(t0).retention_tier, fresh(t0).access_count) == ("T0", 50)
    assert promotions(t1) == [] and promotions(t0) == []


def test_promotion_threshold_from_config(hash_embedder, bhg_config) -> None:
    bhg_config.retention.auto_promote_access_threshold = 2
    mid = remember("Scratch note about the staging cluster", retention_tier="T3").id
    access(mid, 1)
    assert fresh(mid).retention_tier == "T3"
    access(mid, 1)
    assert fresh(mid).retention_tier == "T2"


def test_archived_memory_is_not_touched(hash_embedder) -> None:
    mid = remember("The billing service runs on Kubernetes").id
    Memory.objects.filter(pk=mid).update(archived=True)
    tracker.record([mid])
    assert tracker.flush() == []
    assert fresh(mid).access_count == 0


def test_deleted_memory_is_skipped(hash_embedder) -> None:
    gone = remember("The billing service runs on Kubernetes").id
    kept = remember("Lunch is served at noon").id
    tracker.record([gone, kept])
    Memory.objects.filter(pk=gone).delete()
    outcomes = tracker.flush()
    assert [o.memory_id for o in outcomes] == [kept]
    assert fresh(kept).access_count == 1


def _flush_queries(memory_ids: list[str], at: datetime) -> int:
    """The queries one flush chunk of these memories (one access each, at ``at``) runs."""
    chunk = retention_services.access_chunks([(memory_id, 1, at) for memory_id in memory_ids])[0]
    with CaptureQueriesContext(connection) as queries:
        outcomes = retention_services.memories_record_access(chunk)
    assert len(outcomes) == len(memory_ids)
    return len(queries)


def test_a_flush_runs_the_same_queries_for_three_memories_as_for_thirty(hash_embedder) -> None:
    """A flush loads only the fields it changes: a field it did not load, read anywhere on its way
    (the funnel's indexers included), would cost one query per memory."""
    few = [remember(f"Deploy note {i}: the billing service moved to rack {i}").id for i in range(3)]
    many = [remember(f"Runbook step {i}: restart the ingest worker {i} after a schema change").id for i in range(30)]
    later = timezone.now() + timedelta(hours=2)  # every expiry slides: the feed is written too
    _flush_queries([remember("The day's access counter exists after this").id], later)  # its creation: 3 queries once
    assert _flush_queries(few, later) == _flush_queries(many, later)
    assert all(fresh(memory_id).expires_at > later for memory_id in few + many)
    assert fresh(many[0]).content.startswith("Runbook step 0")  # the text was not written back


def test_memories_record_access_applies_count(hash_embedder) -> None:
    mid = remember("Scratch note about the staging cluster", retention_tier="T3").id
    at = timezone.now()
    [outcome] = memories_record_access([(uuid.UUID(mid), 7, at)])
    assert (outcome.access_count, outcome.retention_tier, outcome.promoted_from) == (7, "T2", "T3")
    assert fresh(mid).last_accessed == at


# --------------------------------------------------------------------------- batching and flushing


def test_nothing_lost_when_flushing_after_several_records(hash_embedder) -> None:
    a = remember("The billing service runs on Kubernetes").id
    b = remember("Lunch is served at noon").id
    c = remember("The printer needs toner").id
    tracker.record([a, b])
    tracker.record([a])
    tracker.record([c, a, b])
    tracker.record([a])
    assert tracker.pending() == 7
    tracker.flush()
    assert tracker.pending() == 0
    assert [fresh(m).access_count for m in (a, b, c)] == [4, 2, 1]
    assert tracker.flush() == []  # a second flush has nothing left to apply
    assert [fresh(m).access_count for m in (a, b, c)] == [4, 2, 1]


def test_two_process_trackers_add_up(hash_embedder) -> None:
    mid = remember("Scratch note about the staging cluster", retention_tier="T3").id
    first, second = AccessTracker(), AccessTracker()
    for _ in range(3):
        first.record([mid])
    for _ in range(4):
        second.record([mid])
    first.flush()
    second.flush()
    memory = fresh(mid)
    assert memory.access_count == 7
    assert memory.retention_tier == "T2"  # the 5th access, counted across both, promoted it
    assert len(promotions(mid)) == 1


def test_interleaved_flushes_of_two_trackers(hash_embedder) -> None:
    mid = remember("The billing service runs on Kubernetes").id
    first, second = AccessTracker(), AccessTracker()
    first.record([mid])
    second.record([mid])
    second.flush()
    first.record([mid])
    first.flush()
    second.record([mid])
    second.flush()
    assert fresh(mid).access_count == 4


def test_failed_flush_keeps_pending_accesses(hash_embedder, monkeypatch: pytest.MonkeyPatch) -> None:
    a = remember("The billing service runs on Kubernetes").id
    b = remember("Lunch is served at noon").id
    local = AccessTracker()
    local.record([a, b])
    real = retention_services.memories_record_access

    def broken(chunk: list) -> list:
        raise DatabaseError("database is locked")

    monkeypatch.setattr(retention_services, "memories_record_access", broken)
    assert local.flush() == []
    assert local.pending() == 2
    monkeypatch.setattr(retention_services, "memories_record_access", real)
    local.flush()
    assert local.pending() == 0
    assert (fresh(a).access_count, fresh(b).access_count) == (1, 1)


def test_a_flush_failing_half_way_keeps_only_the_unwritten_chunks(hash_embedder, monkeypatch: pytest.MonkeyPatch) -> None:
    """Chunks written before the failure are not counted again; the rest stay pending."""
    monkeypatch.setattr(retention_services, "FLUSH_CHUNK", 2)
    ids = [remember(f"Distinct fact number {n} about the {word} service").id
           for n, word in enumerate(["billing", "search", "mail", "auth", "pricing"])]
    local = AccessTracker()
    local.record(ids)
    real, calls = retention_services.memories_record_access, {"n": 0}

    def second_fails(chunk: list) -> list:
        calls["n"] += 1
        if calls["n"] == 2:
            raise DatabaseError("database is locked")
        return real(chunk)

    monkeypatch.setattr(retention_services, "memories_record_access", second_fails)
    assert len(local.flush()) == 2
    assert local.pending() == 3
    monkeypatch.setattr(retention_services, "memories_record_access", real)
    assert len(local.flush()) == 3
    assert sorted(fresh(mid).access_count for mid in ids) == [1, 1, 1, 1, 1]


def test_a_flush_writes_each_memory_once_in_bulk_with_its_promotion_and_feed(hash_embedder) -> None:
    """Many memories in one flush: counts, a PROMOTE audit where a threshold is crossed, a feed
    row only where an indexed field moved (the tier here; every expiry moved by less than a step)."""
    many = [remember(f"Fact {n}: the {n}th runbook step is documented").id for n in range(30)]
    hot = many[0]
    Memory.objects.filter(pk=hot).update(access_count=4)
    local = AccessTracker()
    local.record(many)
    feed_before = ChangeFeedEntry.objects.count()
    outcomes = {o.memory_id: o for o in local.flush()}
    assert set(outcomes) == set(many)
    assert outcomes[hot].promoted_from == "T2" and fresh(hot).retention_tier == "T1"
    assert AuditLog.objects.filter(memory_id=hot, operation="PROMOTE").count() == 1
    assert all(fresh(mid).access_count == 1 for mid in many[1:])
    assert ChangeFeedEntry.objects.count() - feed_before == 1  # the promoted one; the others' expiry moved < a step
    assert ChangeFeedEntry.objects.latest("id").op == ChangeFeedEntry.Op.UPSERT  # a new tier: read whole


@pytest.mark.django_db(transaction=True)
def test_background_thread_flushes_without_explicit_call(hash_embedder, monkeypatch: pytest.MonkeyPatch) -> None:
    mid = remember("The billing service runs on Kubernetes").id
    monkeypatch.setattr(settings, "BHGBRAIN_ACCESS_FLUSH_THREAD", True)
    background = AccessTracker(interval=0.2)
    try:
        background.record([mid])
        background.record([mid])
        assert background.running
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and fresh(mid).access_count < 2:
            time.sleep(0.05)
        assert fresh(mid).access_count == 2
        assert background.pending() == 0
        background.record([mid])
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and fresh(mid).access_count < 3:
            time.sleep(0.05)
        assert fresh(mid).access_count == 3
    finally:
        background.interval = 10**6  # park the daemon thread: no further DB work after this test
