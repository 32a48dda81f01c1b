"""Fact chains in the retention lifecycle (issue 42; retention/chains.py): a version of a fact is
archived, never deleted; the older versions never outlive their successor; a restored version
goes back to its place in its chain. Chains are made through the core's public seams
(``memories.temporal.supersede``, remember's ``key`` and ``valid_from``)."""
from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from memories.models import AuditLog, Memory
from memories.temporal import fact_chain, supersede
from retention.archive import archive_restore, memory_archive
from retention.cleanup import namespace_trim, retention_cleanup
from retention.models import ArchivedMemory
from tests.conftest import remember

pytestmark = pytest.mark.django_db

JAN, MAR, MAY = (datetime(2026, month, 1, tzinfo=UTC) for month in (1, 3, 5))


def _expire(*ids: str) -> None:
    Memory.objects.filter(id__in=ids).update(expires_at=timezone.now() - timedelta(days=1), decay_eligible=True)


def _chain(*texts: str, namespace: str = "alice", tier: str = "T2") -> list[str]:
    """Versions of one fact, each superseding the one before (explicitly), oldest first."""
    ids = [remember(text, namespace=namespace, retention_tier=tier).id for text in texts]
    for older, newer in zip(ids, ids[1:], strict=False):
        supersede(older=[uuid.UUID(older)], newer=uuid.UUID(newer), actor="test")
    return ids


def _live(*ids: str) -> set[str]:
    return {str(i) for i in Memory.objects.filter(id__in=ids).values_list("id", flat=True)}


def _archived(memory_id: str) -> ArchivedMemory:
    return ArchivedMemory.objects.get(memory_id=memory_id, restored_at__isnull=True)


def _forget_reasons(*ids: str) -> dict[str, str]:
    rows = AuditLog.objects.filter(operation="FORGET", memory_id__in=ids)
    return {str(a.memory_id): a.details["reason"] for a in rows}


def test_an_expired_superseded_fact_is_archived_even_when_archive_before_delete_is_off(hash_embedder,
                                                                                       bhg_config) -> None:
    bhg_config.retention.archive_before_delete = False
    kong, envoy = _chain("The API gateway is Kong", "We moved the API gateway to Envoy")
    plain = remember("The lunch menu changes on Mondays", namespace="alice", retention_tier="T3").id
    before = Memory.objects.get(id=kong)
    _expire(kong, plain)

    report = retention_cleanup()

    assert (report.expired, report.deleted, report.archived, report.with_successor) == (2, 2, 1, 0)
    assert _live(kong, envoy, plain) == {envoy}
    copy = _archived(kong)  # the superseded version: archived whole, its place in the chain kept
    assert (copy.superseded_by, copy.valid_until, copy.valid_from) == (uuid.UUID(envoy), before.valid_until,
                                                                       before.valid_from)
    assert not ArchivedMemory.objects.filter(memory_id=plain).exists()  # not in a chain: the setting holds
    forgot = AuditLog.objects.get(operation="FORGET", memory_id=kong)
    assert forgot.details["reason"] == "expired" and forgot.details["archived"] is True


def test_when_a_successor_expires_its_older_versions_go_with_it_archived(hash_embedder, bhg_config) -> None:
    bhg_config.retention.archive_before_delete = False  # a chain is archived whatever it says
    paris, lyon, berlin = _chain("Alice lives in Paris", "Alice moved to Lyon", "Alice moved to Berlin in March")
    Memory.objects.filter(id=paris).update(retention_tier="T0", decay_eligible=False, expires_at=None)
    bystander = remember("Bob lives in Madrid", namespace="alice").id
    _expire(berlin)

    report = retention_cleanup()

    assert (report.expired, report.with_successor, report.deleted, report.archived) == (1, 2, 3, 3)
    assert _live(paris, lyon, berlin, bystander) == {bystander}
    assert _archived(paris).superseded_by == uuid.UUID(lyon) and _archived(lyon).superseded_by == uuid.UUID(berlin)
    assert _archived(berlin).superseded_by is None
    assert _forget_reasons(paris, lyon, berlin) == {paris: "successor_archived", lyon: "successor_archived",
                                                    berlin: "expired"}
    assert AuditLog.objects.get(operation="FORGET", memory_id=lyon).details["successor"] == berlin


def test_the_budget_and_quota_trims_archive_the_older_versions_with_their_successor(hash_embedder,
                                                                                    bhg_config) -> None:
    old, new = _chain("Deploys happen on Tuesdays", "Deploys happen on Thursdays now", tier="T3")
    Memory.objects.filter(id=old).update(retention_tier="T1")  # another tier: it goes with its successor anyway
    Memory.objects.filter(id=new).update(access_count=0)
    busy = remember("Standup is at 9:30", namespace="alice", retention_tier="T3").id
    Memory.objects.filter(id=busy).update(access_count=50)
    bhg_config.retention.tier_budgets.T3 = 1

    report = retention_cleanup()

    assert report.trimmed["T3"] == 1 and report.with_successor == 1 and report.archived == 2
    assert _live(old, new, busy) == {busy}
    assert _archived(old).superseded_by == uuid.UUID(new)
    assert _forget_reasons(old, new) == {old: "successor_archived", new: "over_budget"}

    first, second = _chain("The on-call phone is grey", "The on-call phone is now blue", tier="T3")
    Memory.objects.filter(id=first).update(access_count=10)  # the trim picks the successor
    assert namespace_trim(namespace="alice", take={"T3": 1}, actor="writer", at=timezone.now()) == 2
    assert _live(first, second, busy) == {busy}
    assert {_archived(first).superseded_by, _archived(second).superseded_by} == {uuid.UUID(second), None}


def test_archive_now_of_a_successor_takes_its_older_versions_and_restoring_puts_them_back(hash_embedder) -> None:
    kong, envoy = _chain("The API gateway is Kong", "We moved the API gateway to Envoy")
    closed = Memory.objects.get(id=kong)

    result = memory_archive(memory_id=envoy, actor="admin:curator", namespace="alice")

    assert result["with_successor"] == [kong] and _live(kong, envoy) == set()
    reasons = {str(a.memory_id): a.details["reason"] for a in AuditLog.objects.filter(operation="ARCHIVE")}
    assert reasons == {kong: "successor_archived", envoy: "curator"}

    assert archive_restore(memory_id=kong, namespace="alice", actor="test")["current"] is False
    back = Memory.objects.get(id=kong)  # its successor still archived: it stays history, never current again
    assert (back.superseded_by, back.valid_from, back.valid_until) == (uuid.UUID(envoy), closed.valid_from,
                                                                       closed.valid_until)
    assert archive_restore(memory_id=envoy, namespace="alice", actor="test")["current"] is True
    assert [str(m.id) for m in fact_chain(uuid.UUID(envoy), namespaces=None)] == [kong, envoy]


def test_a_restored_current_fact_goes_into_history_when_its_key_has_a_current_fact(hash_embedder) -> None:
    paris = remember("Alice lives in Paris", namespace="alice", key="alice/home-city", valid_from=JAN).id
    memory_archive(memory_id=paris, actor="test", namespace="alice")
    berlin = remember("Alice lives in Berlin", namespace="alice", key="alice/home-city", valid_from=MAY).id

    restored = archive_restore(memory_id=paris, namespace="alice", actor="test")

    assert restored["current"] is False and restored["superseded_by"] == berlin
    back, current = Memory.objects.get(id=paris), Memory.objects.get(id=berlin)
    assert (back.fact_key, back.superseded_by, back.valid_from, back.valid_until) == (
        "alice/home-city", uuid.UUID(berlin), JAN, MAY)
    assert current.superseded_by is None and current.valid_until is None
    assert AuditLog.objects.get(operation="RESTORE_ARCHIVE", memory_id=paris).details["superseded_by"] == berlin


def test_a_restored_version_is_put_between_its_neighbours_and_the_one_before_leads_to_it(hash_embedder) -> None:
    lyon = remember("Alice lives in Lyon", namespace="alice", key="alice/home-city", valid_from=MAR).id
    memory_archive(memory_id=lyon, actor="test", namespace="alice")
    berlin = remember("Alice lives in Berlin", namespace="alice", key="alice/home-city", valid_from=MAY).id
    paris = remember("Alice lives in Paris", namespace="alice", key="alice/home-city", valid_from=JAN).id
    assert Memory.objects.get(id=paris).superseded_by == uuid.UUID(berlin)  # a late arrival, before Berlin

    archive_restore(memory_id=lyon, namespace="alice", actor="test")

    rows = {str(m.id): m for m in fact_chain(uuid.UUID(berlin), namespaces=None)}
    assert list(rows) == [paris, lyon, berlin]
    assert (rows[paris].superseded_by, rows[paris].valid_until) == (uuid.UUID(lyon), MAR)
    assert (rows[lyon].superseded_by, rows[lyon].valid_until) == (uuid.UUID(berlin), MAY)
    assert rows[berlin].superseded_by is None


def test_a_restored_version_newer_than_the_current_one_stays_history_with_an_empty_interval(hash_embedder) -> None:
    berlin = remember("Alice lives in Berlin", namespace="alice", key="alice/home-city", valid_from=MAY).id
    memory_archive(memory_id=berlin, actor="test", namespace="alice")
    paris = remember("Alice lives in Paris", namespace="alice", key="alice/home-city", valid_from=JAN).id

    archive_restore(memory_id=berlin, namespace="alice", actor="test")

    back = Memory.objects.get(id=berlin)
    assert (back.superseded_by, back.valid_from, back.valid_until) == (uuid.UUID(paris), MAY, MAY)
    assert Memory.objects.get(id=paris).superseded_by is None  # the live current fact stays the answer


def test_a_restored_superseded_version_of_a_key_fits_around_a_late_arrival(hash_embedder) -> None:
    """Paris (January) ages out on its own, superseded by Berlin (May); Lyon (March) arrives late
    meanwhile, before Berlin. Paris comes back before Lyon, its validity closed in March: one
    answer at every time."""
    paris = remember("Alice lives in Paris", namespace="alice", key="alice/home-city", valid_from=JAN).id
    berlin = remember("Alice lives in Berlin", namespace="alice", key="alice/home-city", valid_from=MAY).id
    Memory.objects.filter(id=paris).update(retention_tier="T3")
    _expire(paris)
    retention_cleanup()
    assert _archived(paris).superseded_by == uuid.UUID(berlin)
    lyon = remember("Alice lives in Lyon", namespace="alice", key="alice/home-city", valid_from=MAR).id

    archive_restore(memory_id=paris, namespace="alice", actor="test")

    rows = {str(m.id): m for m in fact_chain(uuid.UUID(berlin), namespaces=None)}
    assert list(rows) == [paris, lyon, berlin]
    assert (rows[paris].superseded_by, rows[paris].valid_until) == (uuid.UUID(lyon), MAR)
    assert (rows[lyon].superseded_by, rows[lyon].valid_until) == (uuid.UUID(berlin), MAY)
