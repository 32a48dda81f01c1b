"""Capacity budgets (retention.tier_budgets, retention.max_memories): the cleanup trims the
least-used, longest-unused memories of a tier over budget, archived first, never T0; /health
shows the use of every budget."""
from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.test import Client
from django.utils import timezone

from bhgbrain_site import registry
from bhgbrain_site.core.calls import CallContext
from memories.models import AuditLog, Memory
from retention import cleanup
from retention.models import ArchivedMemory
from tests.conftest import remember

pytestmark = pytest.mark.django_db
CLI = CallContext(actor="cli")


def _gc(**arguments: object) -> dict:
    return registry.call("retention.cleanup", arguments, CLI)


def _ids(**filters: object) -> set[str]:
    return {str(i) for i in Memory.objects.filter(**filters).values_list("id", flat=True)}


def _used(memory_id: str, *, count: int, days_ago: float | None, created_days_ago: float = 30) -> None:
    now = timezone.now()
    last = now - timedelta(days=days_ago) if days_ago is not None else None
    Memory.objects.filter(id=memory_id).update(access_count=count, last_accessed=last,
                                               created_at=now - timedelta(days=created_days_ago))


def _six_t3() -> dict[str, str]:
    """Six T3 memories whose trim order is known: a, b, c, d go first (in that order)."""
    ids = {name: remember(f"Budget note {name}: a transient detail number {name}", retention_tier="T3").id
           for name in "abcdef"}
    _used(ids["a"], count=0, days_ago=None, created_days_ago=40)  # never read back, created long ago
    _used(ids["b"], count=0, days_ago=None, created_days_ago=10)  # never read back, newer
    _used(ids["c"], count=1, days_ago=20)  # read once, long ago
    _used(ids["d"], count=1, days_ago=2)  # read once, lately
    _used(ids["e"], count=5, days_ago=60)  # read often: kept even though long unused
    _used(ids["f"], count=9, days_ago=1)
    return ids


def test_a_tier_over_budget_loses_its_least_used_memories_first_archived_and_restorable(hash_embedder,
                                                                                        bhg_config) -> None:
    bhg_config.retention.tier_budgets.T3 = 2
    ids = _six_t3()
    foundations = {remember(f"Foundation {n}: the company values rule {n}", retention_tier="T0").id for n in range(3)}
    originals = {str(m.id): m for m in Memory.objects.filter(id__in=ids.values())}

    report = _gc()

    assert report["trimmed"] == {"T1": 0, "T2": 0, "T3": 4}
    assert (report["expired"], report["archived"], report["deleted"]) == (0, 4, 4)
    assert _ids(retention_tier="T3") == {ids["e"], ids["f"]} and _ids(retention_tier="T0") == foundations
    trimmed = {ids[name] for name in "abcd"}
    archived = {str(a.memory_id): a for a in ArchivedMemory.objects.all()}
    assert set(archived) == trimmed
    for memory_id in trimmed:  # nothing lost: the whole memory is in the archive
        original, copy = originals[memory_id], archived[memory_id]
        assert copy.content == original.content and copy.tier == "T3" and copy.access_count == original.access_count
        assert bytes(copy.embedding) == bytes(original.embedding)
        audit = AuditLog.objects.get(operation="FORGET", memory_id=memory_id)
        assert audit.client_id == "system" and audit.details["reason"] == "over_budget" and audit.details["archived"]
    restored = registry.call("archive.restore", {"id": ids["a"], "tier": "T3"}, CLI)
    assert restored["restored"] is True and Memory.objects.get(id=ids["a"]).content == originals[ids["a"]].content
    assert _gc()["trimmed"]["T3"] == 1  # over budget again: the restored one is still the least used
    assert _ids(retention_tier="T3") == {ids["e"], ids["f"]}


def test_t0_is_never_trimmed_and_max_memories_takes_the_least_lasting_tier_first(hash_embedder, bhg_config) -> None:
    bhg_config.retention.max_memories = 4
    t0 = {remember(f"Foundation {n}: a compliance rule {n}", retention_tier="T0").id for n in range(2)}
    t1 = remember("Institutional: the API contract of billing", retention_tier="T1").id
    t2 = [remember(f"Operational: sprint decision {n}", retention_tier="T2").id for n in range(2)]
    t3 = remember("Transient: ticket 42 is waiting on QA", retention_tier="T3").id
    _used(t2[0], count=3, days_ago=1)  # the other T2 memory is the less used one

    report = _gc()

    assert report["trimmed"] == {"T1": 0, "T2": 1, "T3": 1}  # 6 live, max 4: T3 first, then T2
    assert _ids() == t0 | {t1, t2[0]} and not Memory.objects.filter(id__in=[t2[1], t3]).exists()
    assert {str(i) for i in ArchivedMemory.objects.values_list("memory_id", flat=True)} == {t2[1], t3}

    bhg_config.retention.max_memories = 1  # T0 alone is over it: only T1..T3 can go
    assert _gc()["trimmed"] == {"T1": 1, "T2": 1, "T3": 0}
    assert _ids() == t0
    health = registry.call("store.health", {}, CLI)
    assert health["retention"]["budgets"]["total"] == {"used": 2, "budget": 1, "over": True}
    assert health["retention"]["over_capacity"] is True


def test_expired_memories_go_first_and_do_not_count_against_a_budget(hash_embedder, bhg_config) -> None:
    bhg_config.retention.tier_budgets.T2 = 2
    expired = remember("Operational: an expired status line", retention_tier="T2").id
    kept = [remember(f"Operational: live status line {n}", retention_tier="T2").id for n in range(2)]
    Memory.objects.filter(id=expired).update(expires_at=timezone.now() - timedelta(days=1))
    report = _gc()
    assert (report["expired"], report["trimmed"]["T2"]) == (1, 0)
    assert _ids() == set(kept)


def test_dry_run_reports_the_trim_and_changes_nothing(hash_embedder, bhg_config) -> None:
    bhg_config.retention.tier_budgets.T3 = 2
    bhg_config.retention.tier_budgets.T2 = 1
    ids = _six_t3()
    remember("Operational: one over the T2 budget", retention_tier="T2")
    remember("Operational: two over the T2 budget", retention_tier="T2")
    before = (set(Memory.objects.values_list("id", "access_count")), AuditLog.objects.count())

    preview = _gc(dry_run=True)

    assert preview["dry_run"] is True and preview["trimmed"] == {"T1": 0, "T2": 1, "T3": 4}
    assert (preview["archived"], preview["deleted"]) == (5, 0)
    assert (set(Memory.objects.values_list("id", "access_count")), AuditLog.objects.count()) == before
    assert not ArchivedMemory.objects.exists()
    out = StringIO()
    call_command("gc", "--dry-run", "--tier", "T3", stdout=out)
    assert json.loads(out.getvalue())["trimmed"] == {"T1": 0, "T2": 0, "T3": 4}
    assert not ArchivedMemory.objects.exists() and len(_ids()) == 8

    call_command("gc", "--tier", "T3", stdout=StringIO())  # only T3 is trimmed
    assert _ids(retention_tier="T3") == {ids["e"], ids["f"]} and len(_ids(retention_tier="T2")) == 2


@pytest.mark.django_db(transaction=True)  # /health reads on its own connection
def test_health_shows_the_use_of_every_budget(hash_embedder, bhg_config) -> None:
    bhg_config.retention.tier_budgets.T3 = 1
    bhg_config.retention.max_memories = 100
    remember("Foundation: the security runbook", retention_tier="T0")
    remember("Transient: standup notes for Monday", retention_tier="T3")
    body = Client().get("/health").json()
    retention = body["retention"]
    assert retention["budgets"]["T3"] == {"used": 1, "budget": 1, "over": False}
    assert retention["budgets"]["T0"] == {"used": 1, "budget": None, "over": False}
    assert retention["budgets"]["T1"] == {"used": 0, "budget": 100000, "over": False}
    assert retention["budgets"]["total"] == {"used": 2, "budget": 100, "over": False}
    assert retention["over_capacity"] is False and set(retention) >= {
        "counts_by_tier", "expiring_soon", "archived_count", "unsynced_vectors", "over_capacity"}  # the seed's keys stay

    remember("Transient: standup notes for Tuesday", retention_tier="T3")
    body = Client().get("/health").json()
    assert body["retention"]["budgets"]["T3"] == {"used": 2, "budget": 1, "over": True}
    assert body["retention"]["over_capacity"] is True
    assert body["components"]["retention"]["status"] == "degraded"
    assert "T3" in body["components"]["retention"]["detail"] and body["status"] == "degraded"

    _gc()
    body = Client().get("/health").json()
    assert body["retention"]["over_capacity"] is False and body["retention"]["budgets"]["T3"]["over"] is False


def test_progress_is_reported_after_each_batch(hash_embedder, bhg_config, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cleanup, "BATCH", 2)
    bhg_config.retention.tier_budgets.T3 = 1
    _six_t3()
    expired = remember("Operational: expired before the cleanup", retention_tier="T2").id
    Memory.objects.filter(id=expired).update(expires_at=timezone.now() - timedelta(days=1))
    calls: list[tuple[int, int]] = []
    report = cleanup.retention_cleanup(progress=lambda stage, done, total: calls.append((done, total)))
    assert (report.expired, report.trimmed["T3"]) == (1, 5)
    assert calls == [(1, 6), (3, 6), (5, 6), (6, 6)]  # the expired one, then T3 in batches of 2


class _Terminal(StringIO):
    """An output that says it is a terminal (the progress bar draws only on one)."""

    def isatty(self) -> bool:
        return True


def test_manage_py_gc_draws_its_progress_on_a_terminal_only(hash_embedder, bhg_config) -> None:
    bhg_config.retention.tier_budgets.T3 = 2
    _six_t3()
    piped = StringIO()
    call_command("gc", "--dry-run", stdout=StringIO(), stderr=piped)
    assert piped.getvalue() == ""  # not a terminal: quiet
    terminal = _Terminal()
    out = StringIO()
    call_command("gc", stdout=out, stderr=terminal)
    assert json.loads(out.getvalue())["trimmed"]["T3"] == 4
    assert "gc: memories removed" in terminal.getvalue() and "4/4" in terminal.getvalue()
