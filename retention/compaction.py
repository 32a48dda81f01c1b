"""Compaction: give the space of deleted memories back (``bhgbrain gc --force-compact``, and the
cleanup on its own when ``retention.compaction_deleted_threshold`` is passed).

Deleted rows leave free pages (SQLite) or dead tuples (PostgreSQL), and deleted points stay in
Qdrant's segments until its vacuum optimizer runs. A compaction runs

- SQLite: ``VACUUM`` (rewrites the file without its free pages), ``PRAGMA optimize`` and a
  ``wal_checkpoint(TRUNCATE)`` (in WAL mode the vacuumed pages sit in the log until then);
- PostgreSQL: ``VACUUM (ANALYZE)`` on every table of the database;
- Qdrant (``vector_index: "qdrant"``): ``update_collection`` with an ``OptimizersConfigDiff``
  on every ``bhgbrain_*`` collection. Any collection update starts the optimizers (Qdrant's
  "grey collection status" documentation); the diff also sets the collection's own
  ``deleted_threshold`` to ours, so Qdrant's vacuum follows the same rule between our runs.

**When.** It is due when the deletions since the last compaction are more than the threshold's
share of what the store held: ``deletions / (deletions + memory rows) > threshold`` (the seed:
"when deleted data exceeds this share"); 0 compacts after any deletion, 1.0 only when forced.
Deletions are counted from the change feed's DELETE rows, which every deletion writes in its own
transaction (forget, collection delete, cleanup, a restore's removed memories), so nothing that
deletes can forget to count; :class:`CompactionState` keeps the tally across feed pruning.

VACUUM cannot run inside a transaction: a compaction asked for inside one is reported as
skipped and stays due.
"""
from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.db.models import Max
from django.utils import timezone

from memories import funnel
from memories.indexes.embedded import get_vector_index
from memories.indexes.qdrant import QdrantVectorIndex
from memories.models import ChangeFeedEntry, Memory
from memories.selectors import db_size_bytes, iso
from retention.models import CompactionState

logger = logging.getLogger("bhgbrain.retention")

ACTOR = "system"


def _state() -> CompactionState:
    return CompactionState.objects.filter(pk=1).first() or CompactionState(pk=1)


def _deletes_after(feed_id: int) -> int:
    return ChangeFeedEntry.objects.filter(id__gt=feed_id, op=ChangeFeedEntry.Op.DELETE).count()


def compaction_status() -> dict[str, Any]:
    """Deletions since the last compaction, their share of the store, the threshold, whether a
    compaction is due and when the last one ran."""
    state = _state()
    deletions = state.deletions + _deletes_after(state.counted_through)
    rows = Memory.objects.count()
    ratio = deletions / (deletions + rows) if deletions else 0.0
    threshold = settings.BHGBRAIN.retention.compaction_deleted_threshold
    return {"deletions_since_last": deletions, "deleted_ratio": round(ratio, 4), "threshold": threshold,
            "due": deletions > 0 and ratio > threshold, "last_compacted_at": iso(state.compacted_at)}


def deletions_tally() -> int:
    """Fold the feed's DELETE rows into the durable tally (before the cleanup prunes the feed)."""
    with transaction.atomic():
        CompactionState.objects.get_or_create(pk=1)  # two first tallies at once: one row, no IntegrityError
        state = CompactionState.objects.select_for_update().get(pk=1)
        high_water = ChangeFeedEntry.objects.aggregate(top=Max("id"))["top"] or state.counted_through
        state.deletions += ChangeFeedEntry.objects.filter(
            id__gt=state.counted_through, id__lte=high_water, op=ChangeFeedEntry.Op.DELETE).count()
        state.counted_through = high_water
        state.save()
    return state.deletions


def _vacuum_sqlite() -> None:
    with connection.cursor() as cursor:
        cursor.execute("VACUUM")
        cursor.execute("PRAGMA optimize")
        cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def _vacuum_postgresql() -> list[str]:
    with connection.cursor() as cursor:
        tables = connection.introspection.table_names(cursor)
        cursor.execute("VACUUM (ANALYZE) " + ", ".join(connection.ops.quote_name(t) for t in tables))
    return tables


def _vacuum_database() -> dict[str, Any]:
    if connection.vendor == "sqlite":
        _vacuum_sqlite()
        return {"engine": "sqlite", "ran": ["VACUUM", "PRAGMA optimize", "PRAGMA wal_checkpoint(TRUNCATE)"]}
    tables = _vacuum_postgresql()
    return {"engine": connection.vendor, "ran": ["VACUUM (ANALYZE)"], "tables": len(tables)}


def _optimize_vector_index(threshold: float) -> dict[str, Any] | None:
    """Qdrant's optimizers on every bhgbrain collection; None when Qdrant is not the index."""
    index = get_vector_index()
    if not isinstance(index, QdrantVectorIndex):
        return None
    try:
        return {"collections": index.optimize(deleted_threshold=threshold)}
    except Exception as exc:  # noqa: BLE001 - Qdrant down must not undo the database's compaction
        logger.exception("qdrant optimizer request failed")
        return {"error": type(exc).__name__}


def store_compact(*, reason: str, now: datetime | None = None, status: dict[str, Any] | None = None) -> dict[str, Any]:
    """Compact the database (and Qdrant) now; ``reason`` is "forced" or "threshold". Records a
    COMPACT audit row with the sizes before and after, and starts the deletion count afresh."""
    now = now or timezone.now()
    status = status or compaction_status()
    result: dict[str, Any] = {"ran": False, "reason": reason, "deletions": status["deletions_since_last"],
                              "deleted_ratio": status["deleted_ratio"]}
    if connection.in_atomic_block:
        return result | {"skipped": "VACUUM cannot run inside a transaction"}
    high_water = ChangeFeedEntry.objects.aggregate(top=Max("id"))["top"] or 0
    before = db_size_bytes()
    try:
        database = _vacuum_database()
    except DatabaseError as exc:  # e.g. SQLite busy past its timeout: the compaction stays due
        logger.warning("compaction failed: %s", exc)
        return result | {"error": f"{type(exc).__name__}: {exc}"}
    result.update(ran=True, db_size_before=before, db_size_after=db_size_bytes(), database=database)
    qdrant = _optimize_vector_index(status["threshold"])
    if qdrant is not None:
        result["qdrant"] = qdrant
    with transaction.atomic():
        CompactionState.objects.update_or_create(
            pk=1, defaults={"deletions": 0, "counted_through": high_water, "compacted_at": now})  # later deletes count live
        funnel.record_audit(operation="COMPACT", actor=ACTOR, namespace="*", details=result, at=now)
    logger.info("compaction: %s", result)
    return result


def compaction_run(*, force: bool = False, dry_run: bool = False, now: datetime | None = None) -> dict[str, Any]:
    """The cleanup's last step: compact when forced or due; a dry run only says whether it would."""
    status = compaction_status()
    due = force or status["due"]
    if dry_run or not due:
        return {"ran": False, "due": due, "deletions": status["deletions_since_last"],
                "deleted_ratio": status["deleted_ratio"], "threshold": status["threshold"]}
    return store_compact(reason="forced" if force else "threshold", now=now, status=status)
