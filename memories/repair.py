"""repair: rebuild this device's store from a shared Qdrant (the seed's "修复与恢复").

Scans every ``bhgbrain_*`` collection; a point whose memory is missing here and whose payload
has ``content`` is inserted with its payload's metadata — namespace, collection, type, tags,
category, source, importance, tier, **expiry** (the original set it to null), device id (the
local one when the payload has none), creation time — and its vector, so nothing is embedded
again when the model matches. Points without content (stored before BHGBrain 1.3) are counted
as ``skipped_no_content``. A live memory with the same content in the namespace counts as
already present. ``dry_run`` reports without writing.
"""
from __future__ import annotations

import logging
import uuid
from dataclasses import asdict, dataclass
from datetime import datetime, timezone as dt_timezone
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from bhgbrain_site.errors import InvalidInput
from memories import normalize
from memories.backup import choice_or
from memories.embeddings import to_bytes
from memories.models import AuditLog, Memory, MemorySource, MemoryType, Operation, RetentionTier, VectorChange
from memories.vector_index import get_vector_index, sync_after_commit
from search import fulltext

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


def _when(payload: dict[str, Any], key: str) -> datetime | None:
    value = payload.get(key)
    if isinstance(value, (int, float)):
        return datetime.fromtimestamp(value, tz=dt_timezone.utc)
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt_timezone.utc)
    return None


def memory_from_point(point: Any, model_id: str, dimensions: int) -> Memory:
    """A Memory row from a Qdrant point; raises ValueError on a payload it cannot trust."""
    payload = point.payload or {}
    content = normalize.normalize_content(str(payload["content"]))
    namespace = str(payload.get("namespace") or "")
    if not namespace or not content:
        raise ValueError("payload without namespace or content")
    tags = [t for t in payload.get("tags") or [] if isinstance(t, str)][:20]
    tier = choice_or(payload.get("retention_tier"), RetentionTier.values, RetentionTier.T2)
    decay = bool(payload.get("decay_eligible", tier != "T0"))
    vector = point.vector if isinstance(point.vector, list) else None
    synced = vector is not None and len(vector) == dimensions
    now = timezone.now()
    return Memory(
        id=uuid.UUID(str(point.id)), namespace=namespace[:200],
        collection=str(payload.get("collection") or "general")[:100],
        type=choice_or(payload.get("type"), MemoryType.values, MemoryType.SEMANTIC), category=payload.get("category"),
        content=content, summary=str(payload.get("summary") or normalize.make_summary(content))[:120], tags=tags,
        source=choice_or(payload.get("source"), MemorySource.values, MemorySource.AGENT),
        checksum=normalize.checksum(content), importance=min(1.0, max(0.0, float(payload.get("importance", 0.5)))),
        retention_tier=tier, decay_eligible=decay, expires_at=_when(payload, "expires_at") if decay else None,
        device_id=payload.get("device_id") or settings.BHGBRAIN_DEVICE_ID, last_operation=Operation.ADD,
        embedding=to_bytes(vector) if synced else None, embedding_model=model_id if synced else "",
        vector_synced=synced, created_at=_when(payload, "created_at") or now, updated_at=now,
    )


def _present(memory: Memory) -> bool:
    if Memory.objects.filter(pk=memory.pk).exists():
        return True
    return Memory.objects.filter(namespace=memory.namespace, checksum=memory.checksum, archived=False).exists()


def _insert(memory: Memory, actor: str) -> None:
    with transaction.atomic():
        memory.save(force_insert=True)
        fulltext.index_memory(memory)
        VectorChange.objects.create(memory_id=memory.id, op=VectorChange.Op.UPSERT)
        AuditLog.objects.create(
            timestamp=timezone.now(), namespace=memory.namespace, operation="REPAIR", memory_id=memory.id,
            client_id=actor, details={"device_id": memory.device_id, "collection": memory.collection},
        )
        sync_after_commit()


def repair_from_index(*, dry_run: bool, device_id: str | None, actor: str) -> RepairReport:
    from memories.qdrant_index import QdrantVectorIndex

    index = get_vector_index()
    if not isinstance(index, QdrantVectorIndex):
        raise InvalidInput(
            'repair rebuilds this store from a shared Qdrant: set "vector_index": "qdrant" (see docs/configuration.md). '
            "With the embedded index the database is the only copy; use backup restore instead."
        )
    report = RepairReport(dry_run=dry_run)
    for name in index.collections():
        report.collections_scanned += 1
        for point in index.scroll(name):
            report.points_scanned += 1
            payload = point.payload or {}
            if device_id is not None and payload.get("device_id") != device_id:
                report.skipped_other_device += 1
                continue
            if not payload.get("content"):
                report.skipped_no_content += 1
                continue
            try:
                memory = memory_from_point(point, index.model_id, index.dimensions)
            except (KeyError, TypeError, ValueError):
                logger.warning("repair: unusable point %s in %s", point.id, name)
                report.errors += 1
                continue
            if _present(memory):
                report.already_in_sqlite += 1
                continue
            report.recovered += 1
            if not dry_run:
                _insert(memory, actor)
    return report
