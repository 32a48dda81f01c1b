"""repair: rebuild this device's store from a shared Qdrant (the seed's "修复与恢复").

Scans every ``bhgbrain_*`` collection; a point whose memory is missing here and whose payload
has ``content`` is inserted with its payload's metadata — namespace, collection, type, tags,
category, source, importance, tier, **expiry** (the original set it to null), device id (the
local one when the payload has none), creation time — and its vector, so nothing is embedded
again when the model matches (memories.indexes.qdrant.memory_from_point). Points without
content (stored before BHGBrain 1.3) are counted as ``skipped_no_content``. A live memory with
the same content in the namespace counts as already present. ``dry_run`` reports without writing.
"""
from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any

from django.db import transaction
from django.utils import timezone

from bhgbrain_site.core.errors import InvalidInput
from bhgbrain_site.core.progress import Progress
from memories import funnel
from memories.indexes.embedded import get_vector_index
from memories.indexes.qdrant.points import memory_from_point
from memories.indexes.vectors import StoredPoint, VectorIndex
from memories.models import Memory

logger = logging.getLogger("bhgbrain.repair")


@dataclass
class RepairReport:
    collections_scanned: int = 0
    points_scanned: int = 0
    already_in_sqlite: int = 0
    skipped_no_content: int = 0
    skipped_other_device: int = 0
    recovered: int = 0
    errors: int = 0
    dry_run: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _present(memory: Memory) -> bool:
    if Memory.objects.filter(pk=memory.pk).exists():
        return True
    return Memory.objects.filter(namespace=memory.namespace, checksum=memory.checksum, archived=False).exists()


def _insert(memory: Memory, actor: str) -> None:
    with transaction.atomic():
        audit = funnel.Audit("REPAIR", actor, {"device_id": memory.device_id, "collection": memory.collection})
        # a memory this store held before: recovered whatever the namespace's quota (/health shows one over it)
        funnel.save_memory(memory, audit=audit, at=timezone.now(), insert=True, quota=False)


def _shared_index() -> VectorIndex:
    index = get_vector_index()
    if index is None or not index.shared:
        raise InvalidInput(
            'repair rebuilds this store from a shared Qdrant: set "vector_index": "qdrant" (see docs/configuration.md). '
            "With the embedded index the database is the only copy; use backup restore instead."
        )
    return index


def _recover(point: StoredPoint, index: VectorIndex, report: RepairReport, device_id: str | None) -> Memory | None:
    """The memory a point holds, or None (counted in the report) when it is skipped."""
    if device_id is not None and point.payload.get("device_id") != device_id:
        report.skipped_other_device += 1
        return None
    if not point.payload.get("content"):
        report.skipped_no_content += 1
        return None
    try:
        memory = memory_from_point(point, index.model_id, index.dimensions)
    except (KeyError, TypeError, ValueError):
        logger.warning("repair: unusable point %s", point.id)
        report.errors += 1
        return None
    if _present(memory):
        report.already_in_sqlite += 1
        return None
    return memory


def repair_from_index(*, dry_run: bool, device_id: str | None, actor: str,
                      progress: Progress | None = None) -> RepairReport:
    """Insert every memory the shared index holds and this store lacks (``dry_run``: count only).
    ``progress`` hears (collection, points scanned so far, None) after each point."""
    index = _shared_index()
    report = RepairReport(dry_run=dry_run)
    for name, points in index.scan():
        report.collections_scanned += 1
        for point in points:
            report.points_scanned += 1
            memory = _recover(point, index, report, device_id)
            if memory is not None:
                report.recovered += 1
                if not dry_run:
                    _insert(memory, actor)
            if progress is not None:
                progress(name, report.points_scanned, None)
    logger.info("repair%s: %s", " (dry run)" if dry_run else "", report.as_dict())
    return report
