"""Compaction: the cleanup compacts the store (SQLite VACUUM, PostgreSQL VACUUM ANALYZE, Qdrant's
optimizers) once deletions pass retention.compaction_deleted_threshold, or when forced."""
from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.utils import timezone
from qdrant_client import models

from bhgbrain_site import registry
from bhgbrain_site.core.calls import CallContext
from memories.indexes import embedded
from memories.indexes.qdrant import QdrantVectorIndex
from memories.models import AuditLog, ChangeFeedEntry
from memories.services import memory_forget
from retention.cleanup import retention_cleanup
from retention.compaction import compaction_status
from tests.conftest import remember

pytestmark = pytest.mark.django_db(transaction=True)  # VACUUM cannot run inside a transaction
CLI = CallContext(actor="cli")


def _gc(**arguments: object) -> dict[str, Any]:
    return registry.call("retention.cleanup", arguments, CLI)


def _forget(memory_ids: list[str]) -> None:
    for memory_id in memory_ids:
        memory_forget(memory_id=memory_id, namespace=None, actor="test")


def _compactions() -> list[AuditLog]:
    return list(AuditLog.objects.filter(operation="COMPACT").order_by("timestamp", "id"))


def test_compaction_runs_when_deletions_pass_the_threshold_and_not_before(hash_embedder, bhg_config) -> None:
    bhg_config.retention.compaction_deleted_threshold = 0.5
    ids = [remember(f"Compaction note {n}: the build number {n}").id for n in range(4)]
    _forget(ids[:1])  # 1 deleted of 4: 0.25

    first = _gc()

    assert first["compaction"] == {"ran": False, "due": False, "deletions": 1, "deleted_ratio": 0.25, "threshold": 0.5}
    assert _compactions() == []
    _forget(ids[1:3])  # 3 deleted of 4: 0.75 > 0.5

    second = _gc()["compaction"]

    engine = "sqlite" if connection.vendor == "sqlite" else "postgresql"
    assert second["ran"] is True and second["reason"] == "threshold" and second["deletions"] == 3
    assert second["database"]["engine"] == engine
    assert second["db_size_before"] > 0 and second["db_size_after"] > 0
    [audit] = _compactions()
    assert audit.namespace == "*" and audit.client_id == "system"
    assert audit.details["db_size_before"] == second["db_size_before"]
    assert audit.details["db_size_after"] == second["db_size_after"]
    status = compaction_status()
    assert status["deletions_since_last"] == 0 and status["last_compacted_at"] is not None and not status["due"]
    assert _gc()["compaction"]["ran"] is False  # counted afresh: nothing deleted since
    assert len(_compactions()) == 1


def test_force_compacts_without_deletions(hash_embedder) -> None:
    remember("Compaction: a memory that stays")
    assert _gc()["compaction"]["ran"] is False
    out = StringIO()
    call_command("gc", "--force-compact", stdout=out)
    report = json.loads(out.getvalue())
    assert report["compaction"]["ran"] is True and report["compaction"]["reason"] == "forced"
    assert _gc(force_compact=True)["compaction"]["reason"] == "forced"
    assert len(_compactions()) == 2


def test_dry_run_says_whether_it_would_compact_and_compacts_nothing(hash_embedder, bhg_config) -> None:
    bhg_config.retention.compaction_deleted_threshold = 0.0  # any deletion
    ids = [remember(f"Dry compaction {n}: a detail {n}").id for n in range(2)]
    _forget(ids[:1])
    assert _gc(dry_run=True)["compaction"] == {"ran": False, "due": True, "deletions": 1, "deleted_ratio": 0.5,
                                               "threshold": 0.0}
    assert _gc(dry_run=True, force_compact=True)["compaction"]["due"] is True
    assert _compactions() == [] and compaction_status()["deletions_since_last"] == 1


def test_deletions_are_still_counted_after_their_feed_rows_are_pruned(hash_embedder, bhg_config) -> None:
    bhg_config.retention.compaction_deleted_threshold = 1.0  # never on its own
    ids = [remember(f"Pruned feed {n}: a detail {n}").id for n in range(3)]
    _forget(ids[:2])
    ChangeFeedEntry.objects.update(created_at=timezone.now() - timedelta(days=30))  # older than the feed keeps
    report = _gc()
    assert report["feed_rows_pruned"] >= 2 and not ChangeFeedEntry.objects.filter(op=ChangeFeedEntry.Op.DELETE).exists()
    assert compaction_status()["deletions_since_last"] == 2  # the tally kept them
    bhg_config.retention.compaction_deleted_threshold = 0.5  # 2 of 3 > 0.5
    assert _gc()["compaction"]["deletions"] == 2 and len(_compactions()) == 1


def test_inside_a_transaction_the_compaction_is_skipped_and_stays_due(hash_embedder, bhg_config) -> None:
    bhg_config.retention.compaction_deleted_threshold = 0.0
    ids = [remember(f"Atomic compaction {n}").id for n in range(2)]
    _forget(ids[:1])
    with transaction.atomic():
        report = retention_cleanup()
    assert report.compaction["ran"] is False and "transaction" in report.compaction["skipped"]
    assert compaction_status()["due"] is True and _compactions() == []


def test_health_shows_the_compaction_state(hash_embedder, bhg_config) -> None:
    bhg_config.retention.compaction_deleted_threshold = 0.3
    ids = [remember(f"Health compaction {n}").id for n in range(2)]
    _forget(ids[:1])
    compaction = registry.call("store.health", {}, CLI)["retention"]["compaction"]
    assert compaction == {"deletions_since_last": 1, "deleted_ratio": 0.5, "threshold": 0.3, "due": True,
                          "last_compacted_at": None}


@pytest.fixture
def qdrant(hash_embedder, bhg_config, settings, tmp_path: Path) -> Iterator[QdrantVectorIndex]:  # noqa: ANN001
    """The Qdrant backend in local mode (the real client engine), as tests/memories/test_qdrant.py runs it."""
    settings.BHGBRAIN_DATA_DIR = tmp_path
    bhg_config.vector_index = "qdrant"
    bhg_config.qdrant.embedded_path = str(tmp_path / "qdrant")
    embedded.reset_vector_index()
    index = embedded.get_vector_index()
    assert isinstance(index, QdrantVectorIndex)
    yield index
    embedded.reset_vector_index()


def test_compaction_starts_qdrants_optimizers(qdrant: QdrantVectorIndex, bhg_config,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    bhg_config.retention.compaction_deleted_threshold = 0.2
    remember("Qdrant compaction: kept in general")
    gone = remember("Qdrant compaction: forgotten in ops", collection="ops").id
    _forget([gone])
    client = qdrant.client()
    real_update = client.update_collection
    asked: list[tuple[str, Any]] = []

    def update_collection(name: str, **kwargs: Any) -> bool:
        asked.append((name, kwargs.get("optimizers_config")))
        return real_update(name, **kwargs)  # the local engine accepts it like a server

    monkeypatch.setattr(client, "update_collection", update_collection)

    report = _gc()["compaction"]

    assert report["ran"] is True and report["qdrant"] == {"collections": 2}
    assert sorted(name for name, _ in asked) == ["bhgbrain_global_general", "bhgbrain_global_ops"]
    assert all(diff == models.OptimizersConfigDiff(deleted_threshold=0.2) for _, diff in asked)
    assert _compactions()[0].details["qdrant"] == {"collections": 2}


def test_a_qdrant_outage_does_not_undo_the_database_compaction(qdrant: QdrantVectorIndex,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    remember("Qdrant outage during compaction")

    def down(**kwargs: Any) -> int:
        raise ConnectionError("qdrant is down")

    monkeypatch.setattr(qdrant, "optimize", down)
    report = _gc(force_compact=True)["compaction"]
    assert report["ran"] is True and report["qdrant"] == {"error": "ConnectionError"}
    assert compaction_status()["last_compacted_at"] is not None
