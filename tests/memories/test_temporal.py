"""Facts over time, the write side (memories/temporal): explicit supersede, fact keys (in order
and late), the dedup path keeping old versions, the chain read, and bad input."""
from __future__ import annotations

import itertools
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime

import pytest
from django.db import connections

from bhgbrain_site.core.errors import Conflict, InvalidInput, NotFound
from memories.models import AuditLog, ChangeFeedEntry, Memory, MemoryRevision
from memories.temporal import fact_chain, normalise_key, supersede
from tests.conftest import remember

pytestmark = pytest.mark.django_db(transaction=False)

JAN, FEB, MAR, APR = (datetime(2026, m, 1, tzinfo=UTC) for m in (1, 2, 3, 4))
KEY = "alice/home-city"


def _row(memory_id: str) -> Memory:
    return Memory.objects.get(pk=memory_id)


def _chain_ids(memory_id: str, namespaces: list[str] | None = None) -> list[str]:
    return [str(m.id) for m in fact_chain(uuid.UUID(memory_id), namespaces=namespaces)]


# --------------------------------------------------------------------------- validity on insert


def test_valid_from_defaults_to_occurred_at_then_creation(hash_embedder) -> None:
    plain = remember("The office plants are watered on Mondays")
    dated = remember("The board met in the Lisbon office", occurred_at=FEB)
    given = remember("The Lisbon office closed", occurred_at=FEB, valid_from=MAR)
    assert _row(plain.id).valid_from == _row(plain.id).created_at
    assert _row(dated.id).valid_from == FEB
    assert _row(given.id).valid_from == MAR
    assert (given.valid_from, given.key, given.as_dict()["current"]) == ("2026-03-01T00:00:00Z", None, True)


def test_normalise_key() -> None:
    assert normalise_key("  Alice/Home \t City ") == "alice/home city"
    with pytest.raises(InvalidInput):
        normalise_key("   ")
    with pytest.raises(InvalidInput):
        normalise_key("k" * 201)


# --------------------------------------------------------------------------- explicit


def test_explicit_supersede_closes_the_old_fact_and_audits_it(hash_embedder) -> None:
    old = remember("The API gateway is Kong", valid_from=JAN)
    new = remember("We moved the API gateway to Envoy", valid_from=MAR, supersedes=(old.id,))
    assert new.superseded == (old.id,)
    closed = _row(old.id)
    assert (str(closed.superseded_by), closed.valid_until) == (new.id, MAR)
    assert _row(new.id).superseded_by is None
    audit = AuditLog.objects.get(operation="SUPERSEDE", memory_id=old.id)
    assert (audit.client_id, audit.details["successor"], audit.details["reason"]) == ("test", new.id, "explicit")
    assert ChangeFeedEntry.objects.filter(memory_id=old.id).count() == 2  # the insert and the close
    assert _chain_ids(new.id) == [old.id, new.id] == _chain_ids(old.id)


def test_supersede_service_is_idempotent_and_refuses_bad_links(hash_embedder) -> None:
    a = remember("The build runs on Jenkins", valid_from=JAN)
    b = remember("The build runs on GitHub Actions", valid_from=FEB)
    c = remember("The build runs on Buildkite", valid_from=MAR)
    assert supersede(older=[uuid.UUID(a.id)], newer=uuid.UUID(b.id), actor="alice") == [uuid.UUID(a.id)]
    assert supersede(older=[uuid.UUID(a.id)], newer=uuid.UUID(b.id), actor="alice") == []  # already done
    with pytest.raises(Conflict):  # a is superseded by b already: supersede the current version instead
        supersede(older=[uuid.UUID(a.id)], newer=uuid.UUID(c.id), actor="alice")
    with pytest.raises(InvalidInput):
        supersede(older=[uuid.UUID(b.id)], newer=uuid.UUID(b.id), actor="alice")
    with pytest.raises(InvalidInput):  # b → a would be a cycle: a already leads to b
        supersede(older=[uuid.UUID(b.id)], newer=uuid.UUID(a.id), actor="alice")
    with pytest.raises(NotFound):
        supersede(older=[uuid.uuid4()], newer=uuid.UUID(c.id), actor="alice")
    with pytest.raises(InvalidInput):
        supersede(older=[uuid.UUID(b.id)], newer=uuid.UUID(c.id), actor="alice", reason="because")
    assert _row(b.id).superseded_by is None


def test_supersedes_never_crosses_namespaces(hash_embedder) -> None:
    theirs = remember("Bob's team deploys on Fridays", namespace="bob")
    with pytest.raises(NotFound):
        remember("Our team deploys on Thursdays", namespace="alice", supersedes=(theirs.id,))
    assert not Memory.objects.filter(namespace="alice").exists()  # the whole write rolled back
    assert _row(theirs.id).superseded_by is None
    with pytest.raises(NotFound):
        fact_chain(uuid.UUID(theirs.id), namespaces=["alice"])


def test_supersedes_rejects_a_malformed_id(hash_embedder) -> None:
    with pytest.raises(InvalidInput):
        remember("The gateway is Envoy", supersedes=("not-a-uuid",))


# --------------------------------------------------------------------------- fact keys


def test_a_newer_fact_of_a_key_closes_the_current_one(hash_embedder) -> None:
    paris = remember("Alice lives in Paris", key=KEY, valid_from=JAN)
    berlin = remember("Alice moved to Berlin", key="  Alice/HOME-city ", valid_from=MAR)
    assert (berlin.key, berlin.superseded) == (KEY, (paris.id,))
    assert (str(_row(paris.id).superseded_by), _row(paris.id).valid_until) == (berlin.id, MAR)
    assert AuditLog.objects.get(operation="SUPERSEDE", memory_id=paris.id).details["reason"] == "key"
    current = Memory.objects.filter(fact_key=KEY, superseded_by__isnull=True)
    assert [str(m.id) for m in current] == [berlin.id]


def test_a_late_arriving_older_fact_goes_into_the_history(hash_embedder) -> None:
    paris = remember("Alice lives in Paris", key=KEY, valid_from=JAN)
    berlin = remember("Alice moved to Berlin", key=KEY, valid_from=APR)
    lyon = remember("Alice moved to Lyon", key=KEY, valid_from=FEB)  # told late: it happened in between
    assert (lyon.superseded_by, lyon.as_dict()["current"], lyon.superseded) == (berlin.id, False, (paris.id,))
    assert (str(_row(paris.id).superseded_by), _row(paris.id).valid_until) == (lyon.id, FEB)
    assert (str(_row(lyon.id).superseded_by), _row(lyon.id).valid_until) == (berlin.id, APR)
    assert _row(berlin.id).superseded_by is None
    assert _chain_ids(berlin.id) == [paris.id, lyon.id, berlin.id]
    late = AuditLog.objects.get(operation="SUPERSEDE", memory_id=lyon.id).details
    assert (late["successor"], late["late"]) == (berlin.id, True)


def test_the_oldest_fact_arriving_last_is_superseded_by_the_first(hash_embedder) -> None:
    berlin = remember("Alice moved to Berlin", key=KEY, valid_from=MAR)
    paris = remember("Alice lives in Paris", key=KEY, valid_from=JAN)
    assert (paris.superseded_by, paris.superseded) == (berlin.id, ())
    assert _row(paris.id).valid_until == MAR
    assert _row(berlin.id).superseded_by is None


def test_a_fact_that_comes_back_is_a_new_current_version(hash_embedder) -> None:
    paris = remember("Alice lives in Paris", key=KEY, valid_from=JAN)
    berlin = remember("Alice lives in Berlin", key=KEY, valid_from=FEB)
    back = remember("Alice lives in Paris", key=KEY, valid_from=APR)  # the same words as a superseded version
    assert back.operation == "ADD" and back.id != paris.id
    assert back.superseded == (berlin.id,)
    assert _chain_ids(back.id) == [paris.id, berlin.id, back.id]
    assert remember("Alice lives in Paris", key=KEY).operation == "NOOP"  # restating the current one


def test_keys_are_per_namespace(hash_embedder) -> None:
    a = remember("Alice lives in Paris", key=KEY, namespace="alice")
    b = remember("Alice lives in Rome", key=KEY, namespace="bob")
    assert (a.superseded, b.superseded) == ((), ())
    assert Memory.objects.filter(fact_key=KEY, superseded_by__isnull=True).count() == 2


def test_a_key_given_to_a_stored_fact_adopts_it(hash_embedder) -> None:
    paris = remember("Alice lives in Paris", valid_from=JAN)
    again = remember("Alice lives in Paris", key=KEY)
    assert (again.operation, again.id, again.key) == ("NOOP", paris.id, KEY)
    berlin = remember("Alice lives in Berlin", key=KEY, valid_from=MAR)
    assert berlin.superseded == (paris.id,)


def test_key_and_supersedes_are_refused_on_a_thread_message(hash_embedder) -> None:
    with pytest.raises(InvalidInput):
        remember("hi", thread="t1", key=KEY)


def test_supersede_fills_the_key_slot_of_what_it_replaces(hash_embedder) -> None:
    paris = remember("Alice lives in Paris", key=KEY, valid_from=JAN)
    berlin = remember("Alice moved to Berlin", valid_from=MAR, supersedes=(paris.id,))
    assert _row(berlin.id).fact_key == KEY
    rome = remember("Alice moved to Rome", key=KEY, valid_from=APR)
    assert rome.superseded == (berlin.id,)


# --------------------------------------------------------------------------- the dedup path


def test_an_elaboration_keeps_the_old_version_superseded(e5) -> None:
    first = remember("The mobile release ships on Monday", tags=["mobile"], importance=0.3)
    richer = remember("The mobile release ships on Monday at noon", tags=["release"], importance=0.8)
    assert (richer.operation, richer.merged_with_id, richer.superseded) == ("UPDATE", first.id, (first.id,))
    assert richer.id != first.id
    old, new = _row(first.id), _row(richer.id)
    assert old.content == "The mobile release ships on Monday" and str(old.superseded_by) == richer.id
    assert old.valid_until == new.valid_from
    assert (new.tags, new.importance, new.collection) == (["mobile", "release"], 0.8, old.collection)
    assert AuditLog.objects.get(operation="SUPERSEDE", memory_id=first.id).details["reason"] == "dedup"
    assert not MemoryRevision.objects.exists()


def test_a_pure_rewording_is_revised_in_place_by_default(e5) -> None:
    first = remember("Alice owns the billing service")
    second = remember("The billing service is owned by Alice")
    assert (second.operation, second.id, second.superseded) == ("UPDATE", first.id, ())
    assert MemoryRevision.objects.filter(memory_id=first.id).count() == 1


def test_update_mode_supersede_versions_rewordings_too(e5, bhg_config) -> None:
    bhg_config.deduplication.update_mode = "supersede"
    first = remember("Alice owns the billing service")
    second = remember("The billing service is owned by Alice")
    assert (second.operation, second.superseded) == ("UPDATE", (first.id,))
    assert str(_row(first.id).superseded_by) == second.id


def test_update_mode_in_place_keeps_the_old_behaviour(e5, bhg_config) -> None:
    bhg_config.deduplication.update_mode = "in_place"
    first = remember("The mobile release ships on Monday")
    richer = remember("The mobile release ships on Monday at noon")
    assert (richer.operation, richer.id) == ("UPDATE", first.id)
    assert Memory.objects.count() == 1


def test_a_dedup_version_keeps_the_key(e5) -> None:
    first = remember("The mobile release ships on Monday", key="mobile/release-day")
    richer = remember("The mobile release ships on Monday at noon")
    assert richer.key == "mobile/release-day" and richer.superseded == (first.id,)
    assert AuditLog.objects.get(operation="SUPERSEDE", memory_id=first.id).details["reason"] == "dedup"


def test_a_superseded_fact_is_no_dedup_candidate(e5) -> None:
    first = remember("The mobile release ships on Monday")
    richer = remember("The mobile release ships on Monday at noon")
    again = remember("The mobile release ships on Monday at noon sharp")
    assert again.merged_with_id == richer.id  # never the superseded first version
    assert _chain_ids(again.id) == [first.id, richer.id, again.id]


# --------------------------------------------------------------------------- concurrency


def _keyed_in_thread(barrier: threading.Barrier, month: int) -> str:
    try:
        barrier.wait(timeout=30)
        result = remember(f"Alice lives in city number {month}", key=KEY, valid_from=datetime(2026, month, 1, tzinfo=UTC))
        return result.id
    finally:
        connections.close_all()


@pytest.mark.django_db(transaction=True)
def test_concurrent_versions_of_one_key_make_one_chain(hash_embedder) -> None:
    months = [5, 1, 8, 3, 2, 7]  # arriving together, in no order
    barrier = threading.Barrier(len(months))
    with ThreadPoolExecutor(max_workers=len(months)) as pool:
        ids = list(pool.map(lambda m: _keyed_in_thread(barrier, m), months))
    current = Memory.objects.filter(fact_key=KEY, superseded_by__isnull=True)
    assert [str(m.id) for m in current] == [ids[months.index(8)]]
    chain = fact_chain(current[0].id, namespaces=None)
    assert [m.valid_from.month for m in chain] == sorted(months)
    for older, newer in itertools.pairwise(chain):
        assert (older.superseded_by, older.valid_until) == (newer.id, newer.valid_from)


@pytest.mark.django_db(transaction=True)
def test_repair_from_a_shared_qdrant_restores_a_chain(qdrant) -> None:  # noqa: ANN001
    from memories.interop.repair import repair_from_index

    paris = remember("Alice lives in Paris", key=KEY, valid_from=JAN)
    berlin = remember("Alice lives in Berlin", key=KEY, valid_from=MAR)
    Memory.objects.all().delete()
    assert repair_from_index(dry_run=False, device_id=None, actor="test").recovered == 2
    assert _chain_ids(berlin.id) == [paris.id, berlin.id]
    restored = _row(paris.id)
    assert (str(restored.superseded_by), restored.valid_from, restored.valid_until, restored.fact_key) == (
        berlin.id, JAN, MAR, KEY)


# --------------------------------------------------------------------------- forgetting a version


def test_forgetting_the_current_version_makes_the_previous_one_current(hash_embedder) -> None:
    from memories.services import memory_forget

    paris = remember("Alice lives in Paris", key=KEY, valid_from=JAN)
    berlin = remember("Alice moved to Berlin", key=KEY, valid_from=MAR)  # a mistake
    memory_forget(memory_id=berlin.id, namespace="global", actor="test")
    back = _row(paris.id)
    assert (back.superseded_by, back.valid_until) == (None, None)
    assert AuditLog.objects.filter(operation="RELINK", memory_id=paris.id).exists()
    rome = remember("Alice moved to Rome", key=KEY, valid_from=APR)
    assert rome.superseded == (paris.id,)


def test_forgetting_a_middle_version_links_its_neighbours(hash_embedder) -> None:
    from memories.services import memory_forget

    paris = remember("Alice lives in Paris", key=KEY, valid_from=JAN)
    lyon = remember("Alice lives in Lyon", key=KEY, valid_from=FEB)
    berlin = remember("Alice lives in Berlin", key=KEY, valid_from=APR)
    memory_forget(memory_id=lyon.id, namespace="global", actor="test")
    assert (str(_row(paris.id).superseded_by), _row(paris.id).valid_until) == (berlin.id, APR)
    assert _chain_ids(berlin.id) == [paris.id, berlin.id]


def test_a_backdated_dedup_version_of_a_keyed_fact_goes_into_the_history(e5) -> None:
    first = remember("The mobile release ships on Monday", key="mobile/release-day", valid_from=MAR)
    older = remember("The mobile release ships on Monday at noon", valid_from=JAN)
    assert (older.operation, older.key, older.superseded_by) == ("UPDATE", "mobile/release-day", first.id)
    assert _row(first.id).superseded_by is None
    assert _chain_ids(first.id) == [older.id, first.id]


# --------------------------------------------------------------------------- retries


def test_the_text_of_a_superseded_fact_again_is_a_noop_unless_it_names_its_place(hash_embedder) -> None:
    kong = remember("The API gateway is Kong", valid_from=JAN)
    envoy = remember("The API gateway is Envoy", valid_from=MAR, supersedes=(kong.id,))
    retry = remember("The API gateway is Kong")  # an old request sent again: nothing new
    assert (retry.operation, retry.id, retry.as_dict()["current"], retry.superseded_by) == ("NOOP", kong.id, False, envoy.id)
    back = remember("The API gateway is Kong", supersedes=(envoy.id,))  # brought back on purpose
    assert back.operation == "ADD" and back.id != kong.id and back.superseded == (envoy.id,)


def test_a_keyed_version_sent_again_is_a_noop(hash_embedder) -> None:
    paris = remember("Alice lives in Paris", key=KEY, valid_from=JAN)
    berlin = remember("Alice lives in Berlin", key=KEY, valid_from=MAR)
    again = remember("Alice lives in Paris", key=KEY, valid_from=JAN)
    assert (again.operation, again.id) == ("NOOP", paris.id)
    assert _chain_ids(berlin.id) == [paris.id, berlin.id]


def _forget_in_thread(barrier: threading.Barrier, memory_id: str) -> str:
    from memories.services import memory_forget

    try:
        barrier.wait(timeout=30)
        memory_forget(memory_id=memory_id, namespace="global", actor="test")
        return "forgotten"
    finally:
        connections.close_all()


@pytest.mark.django_db(transaction=True)
def test_writers_and_forgetters_of_one_chain_at_once_leave_it_whole(hash_embedder) -> None:
    stored = [remember(f"Alice lives in town {m}", key=KEY, valid_from=datetime(2026, m, 1, tzinfo=UTC)).id
              for m in (2, 4, 6, 8)]
    barrier = threading.Barrier(6)
    with ThreadPoolExecutor(max_workers=6) as pool:
        writes = [pool.submit(_keyed_in_thread, barrier, m) for m in (1, 5, 9)]
        forgets = [pool.submit(_forget_in_thread, barrier, memory_id) for memory_id in (stored[1], stored[3], stored[0])]
        results = [f.result(timeout=60) for f in writes + forgets]  # a deadlock or a constraint error raises here
    assert results[3:] == ["forgotten"] * 3
    chain = fact_chain(uuid.UUID(results[2]), namespaces=None)
    assert [m.valid_from.month for m in chain] == [1, 5, 6, 9]
    assert [m.superseded_by is None for m in chain] == [False, False, False, True]
    for older, newer in itertools.pairwise(chain):
        assert (older.superseded_by, older.valid_until) == (newer.id, newer.valid_from)
