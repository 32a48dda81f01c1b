"""Namespace quotas at write time (memories/quotas/): reject and trim, per-tier budgets, the default
of namespaces not listed, an admin row over the config, updates that add nothing, batches, restores,
expired memories, and the counts the database keeps."""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.db import connection, connections, transaction
from django.utils import timezone

from bhgbrain_site import registry
from bhgbrain_site.core.calls import CallContext
from bhgbrain_site.core.config import NamespaceQuotaConfig
from bhgbrain_site.core.errors import QuotaExceeded, to_envelope
from memories.models import AuditLog, Memory, NamespaceQuota
from memories.quotas import usage
from memories.quotas.selectors import quota_use
from memories.remember import RememberInput, thread_append
from memories.services import memory_forget
from retention import cleanup
from retention.archive import archive_restore, memory_archive
from retention.models import ArchivedMemory
from tests.conftest import remember

pytestmark = pytest.mark.django_db
CTX = CallContext(actor="test")


def _quota(config, namespace: str | None = None, **values: object) -> None:  # noqa: ANN001 - the bhg_config fixture
    entry = NamespaceQuotaConfig.model_validate(values)
    if namespace is None:
        config.namespace_defaults = entry
    else:
        config.namespaces = {**config.namespaces, namespace: entry}


def _fill(namespace: str, count: int, tier: str = "T2", word: str = "note") -> list[str]:
    return [remember(f"{namespace} {word} {i}: a detail worth keeping number {i}", namespace=namespace,
                     retention_tier=tier).id for i in range(count)]


def _used(memory_id: str, *, accesses: int, days_ago: float) -> None:
    Memory.objects.filter(id=memory_id).update(access_count=accesses,
                                               last_accessed=timezone.now() - timedelta(days=days_ago))


def _true_counts() -> dict[str, dict[str, int]]:
    """Live memories per namespace and tier, counted from the memories themselves."""
    found: dict[str, dict[str, int]] = {}
    for namespace, tier in Memory.objects.filter(archived=False).values_list("namespace", "retention_tier"):
        found.setdefault(namespace, usage.zero())[tier] += 1
    return found


def _kept_counts() -> dict[str, dict[str, int]]:
    return {ns: counts for ns, counts in usage.counts_of().items() if any(counts.values())}


# --------------------------------------------------------------------------- reject


def test_reject_names_the_namespace_the_limit_and_the_count(hash_embedder, bhg_config) -> None:
    _quota(bhg_config, "alpha", max_memories=3)
    _fill("alpha", 3)
    with pytest.raises(QuotaExceeded) as raised:
        remember("alpha: one memory too many", namespace="alpha")
    status, body = to_envelope(raised.value)
    assert status == 409
    assert body["error"] == {"code": "QUOTA_EXCEEDED", "retryable": False, "namespace": "alpha", "limit": 3,
                             "count": 3, "tier": None, "message": body["error"]["message"]}
    assert 'Namespace "alpha"' in body["error"]["message"] and "max_memories 3" in body["error"]["message"]
    assert Memory.objects.filter(namespace="alpha").count() == 3
    assert AuditLog.objects.filter(namespace="alpha").count() == 3  # the refused write left no trace
    assert remember("beta is not limited", namespace="beta").operation == "ADD"  # another namespace


def test_updates_and_duplicates_do_not_count(hash_embedder, bhg_config) -> None:
    _quota(bhg_config, "alpha", max_memories=2)
    first, _second = _fill("alpha", 2)
    again = remember("alpha note 0: a detail worth keeping number 0", namespace="alpha", retention_tier="T2")
    assert (again.operation, again.id) == ("NOOP", first)
    promoted = remember("alpha note 0: a detail worth keeping number 0", namespace="alpha", retention_tier="T1")
    assert (promoted.operation, promoted.id) == ("UPDATE", first)  # an explicit tier: a merge, nothing added
    assert Memory.objects.filter(namespace="alpha").count() == 2


def test_a_tier_budget_applies_to_the_tier_the_memory_lands_in(hash_embedder, bhg_config) -> None:
    _quota(bhg_config, "alpha", tier_budgets={"T3": 1})
    _fill("alpha", 1, "T3")
    with pytest.raises(QuotaExceeded) as raised:
        remember("alpha: standup notes for today", namespace="alpha", retention_tier="T3")
    assert (raised.value.tier, raised.value.limit, raised.value.count) == ("T3", 1, 1)
    assert remember("alpha: a T2 memory still fits", namespace="alpha", retention_tier="T2").operation == "ADD"


def test_namespaces_not_listed_take_namespace_defaults(hash_embedder, bhg_config) -> None:
    _quota(bhg_config, None, max_memories=1)
    _quota(bhg_config, "listed", max_memories=3)
    _fill("fresh", 1)
    with pytest.raises(QuotaExceeded):
        remember("fresh: a second memory", namespace="fresh")
    assert len(_fill("listed", 3)) == 3  # its own entry, not the default
    assert quota_use(namespace="another")["total"] == {"used": 0, "limit": 1}


def test_an_admin_row_replaces_the_config_for_its_namespace(hash_embedder, bhg_config) -> None:
    _quota(bhg_config, "alpha", max_memories=1)
    NamespaceQuota.objects.create(namespace="alpha", max_memories=2, updated_at=timezone.now(), updated_by="test")
    _fill("alpha", 2)
    with pytest.raises(QuotaExceeded) as raised:
        remember("alpha: third", namespace="alpha")
    assert raised.value.limit == 2
    assert quota_use(namespace="alpha")["source"] == "admin"


# --------------------------------------------------------------------------- trim


def test_trim_archives_the_least_used_of_that_namespace_only_never_t0(hash_embedder, bhg_config) -> None:
    _quota(bhg_config, "alpha", max_memories=4, on_quota_exceeded="trim")
    foundation = remember("alpha: the architecture decision record on auth", namespace="alpha", retention_tier="T0").id
    t2 = _fill("alpha", 3)
    _used(t2[0], accesses=9, days_ago=1)
    _used(t2[1], accesses=0, days_ago=40)  # the least used: first to go
    _used(t2[2], accesses=2, days_ago=5)
    others = _fill("bob", 5)
    for memory_id in others:
        _used(memory_id, accesses=0, days_ago=400)  # less used than anything of alpha's: never touched
    added = remember("alpha: a new memory pushes the least used out", namespace="alpha")
    assert added.operation == "ADD"
    assert not Memory.objects.filter(id=t2[1]).exists()
    kept = {str(i) for i in Memory.objects.filter(namespace="alpha").values_list("id", flat=True)}
    assert kept == {foundation, t2[0], t2[2], added.id}
    assert Memory.objects.filter(namespace="bob").count() == 5
    archived = ArchivedMemory.objects.get(memory_id=t2[1])
    assert archived.namespace == "alpha" and archived.content.startswith("alpha note 1")
    forget = AuditLog.objects.get(memory_id=t2[1], operation="FORGET")
    assert forget.details["reason"] == "over_quota" and forget.client_id == "test"
    restored = archive_restore(memory_id=t2[1], namespace="alpha", actor="test")  # restorable (trimming again)
    assert restored["restored"] is True and Memory.objects.filter(namespace="alpha").count() == 4


def test_trim_rejects_when_only_t0_is_left(hash_embedder, bhg_config) -> None:
    _quota(bhg_config, "alpha", max_memories=2, on_quota_exceeded="trim")
    _fill("alpha", 2, "T0", word="policy")
    with pytest.raises(QuotaExceeded) as raised:
        remember("alpha: no room, all foundational", namespace="alpha")
    assert "T0 is never trimmed" in raised.value.message
    assert Memory.objects.filter(namespace="alpha", retention_tier="T0").count() == 2


def test_trim_keeps_a_tier_within_its_budget(hash_embedder, bhg_config) -> None:
    _quota(bhg_config, "alpha", tier_budgets={"T3": 2}, on_quota_exceeded="trim")
    t3 = _fill("alpha", 2, "T3")
    t2 = _fill("alpha", 2, "T2", word="plan")
    _used(t3[0], accesses=3, days_ago=1)
    for memory_id in t2:
        _used(memory_id, accesses=0, days_ago=300)  # another tier: never trimmed for T3's budget
    remember("alpha: standup notes of today", namespace="alpha", retention_tier="T3")
    assert not Memory.objects.filter(id=t3[1]).exists() and Memory.objects.filter(id=t3[0]).exists()
    assert Memory.objects.filter(id__in=t2).count() == 2


# --------------------------------------------------------------------------- other write paths


def _message(namespace: str, i: int) -> RememberInput:
    return RememberInput(content=f"message {i} of the planning chat", namespace=namespace, collection="general",
                         thread="chat-1", speaker="alice", message_id=f"m{i}")


def test_a_thread_batch_is_admitted_whole_or_not_at_all(hash_embedder, bhg_config) -> None:
    _quota(bhg_config, "alpha", max_memories=3)
    with pytest.raises(QuotaExceeded):
        thread_append(messages=[_message("alpha", i) for i in range(4)], actor="test")
    assert Memory.objects.filter(namespace="alpha").count() == 0
    assert [r["operation"] for r in thread_append(messages=[_message("alpha", i) for i in range(3)], actor="test")] == ["ADD"] * 3
    resent = thread_append(messages=[_message("alpha", i) for i in range(3)], actor="test")  # NOOPs add nothing
    assert {r["operation"] for r in resent} == {"NOOP"}


def test_a_restore_into_a_full_namespace_is_refused(hash_embedder, bhg_config) -> None:
    _quota(bhg_config, "alpha", max_memories=1)
    (only,) = _fill("alpha", 1)
    memory_archive(memory_id=only, actor="test")
    _fill("alpha", 1, word="replacement")
    with pytest.raises(QuotaExceeded):
        archive_restore(memory_id=only, namespace="alpha", actor="test")
    assert registry.call("archive.list", {"namespace": "alpha"}, CTX)["entries"][0]["id"] == only


def test_expired_memories_waiting_for_the_cleanup_do_not_count(hash_embedder, bhg_config) -> None:
    _quota(bhg_config, "alpha", max_memories=2)
    old = _fill("alpha", 2, "T3")
    Memory.objects.filter(id=old[0]).update(expires_at=timezone.now() - timedelta(days=1))
    assert remember("alpha: fits, one memory expired", namespace="alpha").operation == "ADD"
    with pytest.raises(QuotaExceeded):
        remember("alpha: now it is full", namespace="alpha")


# --------------------------------------------------------------------------- the counts


def test_the_database_keeps_every_namespace_count_whatever_path_wrote(hash_embedder, bhg_config) -> None:
    alpha = _fill("alpha", 3)
    _fill("beta", 2, "T3")
    thread_append(messages=[_message("gamma", i) for i in range(4)], actor="test")
    memory_forget(memory_id=alpha[0], actor="test", namespace="alpha")
    Memory.objects.filter(id=alpha[1]).update(retention_tier="T1")  # an edit that bypasses every service
    Memory.objects.filter(id=alpha[2]).update(namespace="beta")
    Memory.objects.filter(namespace="gamma").update(archived=True)
    assert _kept_counts() == _true_counts()
    bhg_config.retention.tier_budgets.T3 = 1
    cleanup.retention_cleanup()
    assert _kept_counts() == _true_counts()


def _usage_rows() -> dict[str, int]:
    """How many rows of the usage table each namespace has (PostgreSQL appends one a change)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT namespace, COUNT(*) FROM namespace_usage GROUP BY namespace")
        return dict(cursor.fetchall())


def test_a_restored_store_leaves_one_usage_row_a_namespace(hash_embedder, bhg_config, tmp_path) -> None:  # noqa: ANN001
    # A restore appends a usage row per memory on PostgreSQL; every reader of the counts sums
    # them (a million rows: 120-145 ms a read) until folded, so the restore folds them.
    from retention.backups import create, restore

    thread_append(messages=[_message("alpha", i) for i in range(usage.FOLD_AT + 8)], actor="test")
    _fill("beta", 3)
    saved = create.backup_create(actor="test")
    restore.backup_restore(path=saved.path, actor="test")
    assert _usage_rows() == {"alpha": 1, "beta": 1}
    assert _kept_counts() == _true_counts()


def test_the_scheduled_sync_folds_a_namespace_that_gathered_many_usage_rows(hash_embedder, bhg_config) -> None:
    from memories.services import memories_index_catch_up

    thread_append(messages=[_message("alpha", i) for i in range(usage.FOLD_AT + 8)], actor="test")
    _fill("beta", 2)
    result = memories_index_catch_up()
    assert _usage_rows()["alpha"] == 1  # more than FOLD_AT rows: folded
    assert result["usage_folded"] == (1 if connection.vendor == "postgresql" else 0)
    assert _kept_counts() == _true_counts()


def test_lost_triggers_are_made_again_with_the_counts(hash_embedder) -> None:
    """SQLite drops a table's triggers when a migration rebuilds it: migrate's post_migrate puts them back."""
    _fill("alpha", 2)
    with connection.cursor() as cursor:
        for name in usage.TRIGGERS:
            cursor.execute(f"DROP TRIGGER {name}" + (" ON memories" if connection.vendor == "postgresql" else ""))
    _fill("alpha", 1, word="unseen")  # written while no trigger counted it
    assert usage.triggers_present() == set()
    assert usage.install_triggers() is True
    assert usage.triggers_present() == set(usage.TRIGGERS)
    assert _kept_counts() == _true_counts() == {"alpha": {"T0": 0, "T1": 0, "T2": 3, "T3": 0}}
    assert usage.install_triggers() is False


# --------------------------------------------------------------------------- two writers at limit - 1


def _first_writer(admitted: threading.Event, release: threading.Event) -> None:
    """Insert the namespace's last allowed memory and hold the transaction open until released."""
    try:
        with transaction.atomic():
            remember("race: the last memory that fits", namespace="race")
            admitted.set()
            assert release.wait(timeout=30)
    finally:
        connections.close_all()


def _second_writer() -> str:
    try:
        return remember("race: a second writer at the same moment", namespace="race").operation
    except QuotaExceeded as exc:
        return exc.code
    finally:
        connections.close_all()


@pytest.mark.django_db(transaction=True)
def test_a_second_writer_at_limit_minus_one_waits_for_the_first_and_is_refused(hash_embedder, bhg_config) -> None:
    """Without the lock both would read "one place left": the second must wait for the first to
    commit (PostgreSQL: the namespace's advisory lock; SQLite: BEGIN IMMEDIATE) and then see it."""
    _quota(bhg_config, "race", max_memories=2)
    _fill("race", 1)
    admitted, release = threading.Event(), threading.Event()
    with ThreadPoolExecutor(max_workers=2) as pool:
        first = pool.submit(_first_writer, admitted, release)
        assert admitted.wait(timeout=30)
        second = pool.submit(_second_writer)
        time.sleep(1.0)
        assert not second.done()  # waiting for the first writer's transaction
        release.set()
        first.result(timeout=30)
        assert second.result(timeout=30) == "QUOTA_EXCEEDED"
    assert Memory.objects.filter(namespace="race").count() == 2


def test_only_the_master_token_sets_a_quota_and_only_named_values_change(bhg_config) -> None:
    from bhgbrain_site.core.calls import Principal
    from bhgbrain_site.core.errors import Forbidden, InvalidInput

    _quota(bhg_config, "alpha", max_memories=50, tier_budgets={"T3": 5}, on_quota_exceeded="trim")
    scoped = CallContext(actor="agent", principal=Principal(name="agent", namespaces=frozenset({"alpha"})))
    with pytest.raises(Forbidden):
        registry.call("namespaces.set_quota", {"namespace": "alpha", "max_memories": 10_000}, scoped)
    assert registry.call("namespaces.quota", {}, scoped)["total"]["limit"] == 50  # it may read its own
    changed = registry.call("namespaces.set_quota", {"namespace": "alpha", "tier_budgets": {"T2": 7}}, CTX)
    assert (changed["total"]["limit"], changed["on_quota_exceeded"], changed["source"]) == (50, "trim", "admin")
    assert changed["tiers"]["T2"]["limit"] == 7 and changed["tiers"]["T3"]["limit"] == 5
    with pytest.raises(InvalidInput):
        registry.call("namespaces.set_quota", {"namespace": "alpha", "max_memories": 0}, CTX)
    cleared = registry.call("namespaces.set_quota", {"namespace": "alpha", "max_memories": None}, CTX)
    assert cleared["total"]["limit"] is None
    assert registry.call("namespaces.set_quota", {"namespace": "alpha", "reset": True}, CTX)["source"] == "config"


# --------------------------------------------------------------------------- the cleanup


def test_the_cleanup_trims_a_namespace_over_a_lowered_quota_within_it_only(hash_embedder, bhg_config) -> None:
    foundation = remember("alpha: the architecture decision record on auth", namespace="alpha", retention_tier="T0").id
    t2 = _fill("alpha", 4)
    for rank, memory_id in enumerate(t2):
        _used(memory_id, accesses=rank, days_ago=10 - rank)  # t2[0] least used, t2[3] most
    others = _fill("bob", 3)
    for memory_id in others:
        _used(memory_id, accesses=0, days_ago=400)  # less used than anything of alpha's: never touched
    _quota(bhg_config, "alpha", max_memories=3, on_quota_exceeded="trim")  # lowered below what alpha holds

    preview = cleanup.retention_cleanup(dry_run=True)
    assert preview.quota_trimmed == {"alpha": 2}
    assert Memory.objects.filter(namespace="alpha").count() == 5  # a preview changes nothing

    report = cleanup.retention_cleanup()
    assert report.quota_trimmed == {"alpha": 2} and report.archived >= 2
    kept = {str(i) for i in Memory.objects.filter(namespace="alpha").values_list("id", flat=True)}
    assert kept == {foundation, t2[2], t2[3]}
    assert Memory.objects.filter(namespace="bob").count() == 3
    for memory_id in t2[:2]:
        assert ArchivedMemory.objects.filter(memory_id=memory_id, namespace="alpha").exists()
        forget = AuditLog.objects.get(memory_id=memory_id, operation="FORGET")
        assert forget.details["reason"] == "over_quota" and forget.client_id == "system"
    assert cleanup.retention_cleanup().quota_trimmed == {}  # under the quota now
    assert _kept_counts() == _true_counts()


def test_the_cleanup_never_trims_t0_to_meet_a_quota(hash_embedder, bhg_config) -> None:
    _fill("alpha", 3, "T0", word="policy")
    t2 = _fill("alpha", 1)
    _quota(bhg_config, "alpha", max_memories=2, on_quota_exceeded="trim")
    assert cleanup.retention_cleanup().quota_trimmed == {"alpha": 1}
    assert not Memory.objects.filter(id=t2[0]).exists()
    assert Memory.objects.filter(namespace="alpha", retention_tier="T0").count() == 3  # still over: T0 stays


def test_the_cleanup_leaves_a_namespace_under_policy_reject_alone(hash_embedder, bhg_config) -> None:
    t2 = _fill("alpha", 4)
    _quota(bhg_config, "alpha", max_memories=2, on_quota_exceeded="reject")
    assert cleanup.retention_cleanup().quota_trimmed == {}
    assert Memory.objects.filter(id__in=t2).count() == 4
    with pytest.raises(QuotaExceeded):
        remember("alpha: one more while over the quota", namespace="alpha")


def test_the_cleanup_trims_a_tier_over_its_namespace_budget_only_in_that_tier(hash_embedder, bhg_config) -> None:
    t3 = _fill("alpha", 3, "T3")
    t2 = _fill("alpha", 2, "T2", word="plan")
    _used(t3[2], accesses=5, days_ago=1)
    _quota(bhg_config, "alpha", tier_budgets={"T3": 1}, on_quota_exceeded="trim")
    assert cleanup.retention_cleanup(tier="T2").quota_trimmed == {}  # another tier asked: T3 untouched
    assert cleanup.retention_cleanup().quota_trimmed == {"alpha": 2}
    assert set(map(str, Memory.objects.filter(namespace="alpha").values_list("id", flat=True))) == {t3[2], *t2}


def test_an_import_that_cannot_fit_is_refused_whole_and_duplicates_do_not_count(hash_embedder, bhg_config) -> None:
    from memories.interop.bootstrap import profile_import

    remember("Alice prefers tea in the morning.", namespace="alpha")
    text = ("Alice prefers tea in the morning.\n\nThe build runs on Fridays.\n\n"
            "Deploys go through the staging cluster first.\n\nThe on-call rota changes weekly.")
    _quota(bhg_config, "alpha", max_memories=3, on_quota_exceeded="reject")
    with pytest.raises(QuotaExceeded) as raised:
        profile_import(namespace="alpha", fmt="freeform", content=text, dry_run=False, actor="test")
    assert "the import would add 3; nothing was stored" in raised.value.message
    assert Memory.objects.filter(namespace="alpha").count() == 1  # not stopped half-way
    _quota(bhg_config, "alpha", max_memories=4, on_quota_exceeded="reject")  # room for the 3 new ones
    done = profile_import(namespace="alpha", fmt="freeform", content=text, dry_run=False, actor="test")
    assert (done["memories_created"], done["duplicates_skipped"]) == (3, 1)
    assert Memory.objects.filter(namespace="alpha").count() == 4
