"""The scheduler's cleanup and ``bhgbrain gc`` at the same time: memories due for the archive
(expired, or over their tier's budget) are archived once each, no archive row is duplicated,
nothing is lost, the tier ends at its budget (not below it), and both runs finish.

In-process, a second cleanup that lands between two batches of a first one (deterministically,
from the first one's progress callback); then real processes: django-q2's cleanup job running
again and again in one process while two ``bhgbrain gc`` CLI processes run, several rounds."""
from __future__ import annotations

import json
import uuid
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction
from django.utils import timezone

from memories import funnel
from memories.models import AuditLog, Memory
from retention.cleanup import retention_cleanup
from retention.models import ArchivedMemory
from tests.conftest import remember
from tests.faults.conftest import cli, finished, id_column, query, store_task

NS = "gc"
BUDGET = 10


def _due(ids: list[str]) -> None:
    """Make these memories expired (yesterday), through the write funnel."""
    now = timezone.now()
    with transaction.atomic():
        funnel.update_memories([uuid.UUID(i) for i in ids], {"expires_at": now - timedelta(days=1)}, audit=None, at=now)


@pytest.mark.django_db(transaction=True)
def test_a_cleanup_landing_between_two_batches_of_another_trims_to_the_budget_not_below(
        hash_embedder: Any, bhg_config: Any) -> None:
    bhg_config.retention.tier_budgets.T2 = BUDGET
    ids = [remember(f"Memo {i}: the garden shed gets a coat of paint, colour sample {i}", namespace=NS).id
           for i in range(30)]
    _due(ids[:5])
    nested: list[dict[str, Any]] = []

    def meanwhile(stage: str, done: int, total: int | None) -> None:  # after the first run's first batch committed
        if not nested:
            nested.append(retention_cleanup().as_dict())

    first = retention_cleanup(progress=meanwhile).as_dict()
    assert nested, "the second cleanup never ran"
    live = set(Memory.objects.filter(archived=False).values_list("id", flat=True))
    assert len(live) == BUDGET, (first, nested)  # 5 expired + 15 over budget go; the other 10 stay
    archived = Counter(ArchivedMemory.objects.values_list("memory_id", flat=True))
    assert max(archived.values()) == 1 and len(archived) == 20
    assert {str(m) for m in live | set(archived)} == set(ids)  # each one live or archived, never both
    assert AuditLog.objects.filter(operation="FORGET").count() == 20
    assert first["trimmed"]["T2"] + nested[0]["trimmed"]["T2"] == 15


def test_scheduled_cleanup_and_cli_gc_in_two_processes(tmp_path: Path, store_backend: dict[str, str]) -> None:
    env = dict(store_backend)
    config = {"embedding": {"provider": "none"},  # nothing here needs vectors
              "retention": {"tier_budgets": {"T2": 30}, "compaction_deleted_threshold": 0.2}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    seeded: list[str] = []
    expired: list[str] = []
    for round_ in range(3):
        ids = finished(store_task(tmp_path, env, "seed", NS, "40", "15"))
        seeded += ids
        expired += ids[:15]
        stop = tmp_path / f"stop-{round_}"
        scheduler = store_task(tmp_path, env, "cleanup", str(stop))
        gcs = [cli(tmp_path, env, "gc") for _ in range(2)]
        try:
            outputs = [gc.communicate(timeout=180) for gc in gcs]  # hang guards, not timing assertions
        finally:
            stop.touch()
        assert [gc.returncode for gc in gcs] == [0, 0], outputs
        assert finished(scheduler), "the scheduler's cleanup never ran"

        live = {str(r[0]) for r in query(tmp_path, env, f"SELECT {id_column(env)} FROM memories WHERE archived = ?",  # noqa: S608
                                         (False,))}
        archive = Counter(str(r[0]) for r in query(tmp_path, env, f"SELECT {id_column(env, 'memory_id')} "  # noqa: S608
                                                                  "FROM memory_archive"))
        seeded_hex = {uuid.UUID(i).hex for i in seeded}
        assert [m for m, n in archive.items() if n > 1] == [], "a memory archived twice"
        assert live & set(archive) == set(), "a memory both live and archived"
        assert seeded_hex == live | set(archive), "a memory lost"
        assert {uuid.UUID(i).hex for i in expired} <= set(archive), "an expired memory left live"
        # 25 more that stay live each round: the tier fills up to its budget and ends there, not below
        assert len(live) == min(30, 25 * (round_ + 1)), f"round {round_}: {len(live)} live"
        forgets = query(tmp_path, env, "SELECT COUNT(*) FROM audit_log WHERE operation = 'FORGET'")[0][0]
        assert forgets == sum(archive.values())
    if not env.get("DATABASE_URL"):
        assert query(tmp_path, env, "PRAGMA integrity_check") == [("ok",)]
