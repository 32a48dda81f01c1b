"""How a memory is a Qdrant point, in the layout of the original BHGBrain 1.3+ (so devices and
existing deployments share it): one collection per namespace + collection,
``bhgbrain_{namespace}_{collection}`` (a ``/`` in a namespace, which Qdrant refuses in names,
becomes ``__``), cosine distance, point id = memory uuid, payload ``namespace type tags
collection content summary category source importance retention_tier decay_eligible expires_at
(Unix seconds or null) device_id created_at``, and the ``bm25`` sparse vector of its text.
Names may collide (``a_b`` + ``c`` and ``a`` + ``b_c``); every search also filters on the
payload's namespace and collection, so a collision never mixes results.
"""
from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import numpy as np
from django.conf import settings
from django.utils import timezone

from memories import incoming
from memories.embeddings import to_bytes
from memories.indexes import sparse
from memories.indexes.vectors import StoredPoint
from memories.models import Memory, MemorySource, MemoryType, Operation, RetentionTier
from memories.pipeline import normalize

PREFIX = "bhgbrain_"


def collection_name(namespace: str, collection: str) -> str:
    return f"{PREFIX}{namespace.replace('/', '__')}_{collection}"


def unix_seconds(value: datetime | None) -> int | None:
    return int(value.timestamp()) if value is not None else None


def expiry_payload(decay_eligible: bool, expires_at: datetime | None) -> dict[str, Any]:
    """The payload keys an expiry-only change moves (the feed's ``expiry`` rows)."""
    return {"decay_eligible": decay_eligible, "expires_at": unix_seconds(expires_at) if decay_eligible else None}


def point_payload(memory: Memory) -> dict[str, Any]:
    return {
        "namespace": memory.namespace, "collection": memory.collection, "type": memory.type, "tags": list(memory.tags),
        "content": memory.content, "summary": memory.summary, "category": memory.category, "source": memory.source,
        "importance": memory.importance, "retention_tier": memory.retention_tier,
        **expiry_payload(memory.decay_eligible, memory.expires_at),
        "device_id": memory.device_id, "created_at": memory.created_at.isoformat(),
        # beyond the original's layout (it ignores unknown keys): conversation and event fields
        "thread": memory.thread, "speaker": memory.speaker, "message_id": memory.message_id,
        "occurred_at": iso_or_none(memory.occurred_at), "event_at": iso_or_none(memory.event_at),
        "valid_until": iso_or_none(memory.valid_until), "status": memory.status,
        # facts over time: a superseded point is left out of default searches (its own filter key)
        "valid_from": iso_or_none(memory.valid_from), "superseded": memory.superseded_by is not None,
        "superseded_by": None if memory.superseded_by is None else str(memory.superseded_by),
        "fact_key": memory.fact_key,
    }


def iso_or_none(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def memory_from_point(point: StoredPoint, model_id: str, dimensions: int) -> Memory:
    """An (unsaved) Memory from a point's payload, the inverse of :func:`point_payload`: its
    metadata, expiry, device id (the local one when the payload has none) and vector, so nothing
    is embedded again. Raises ValueError on a payload it cannot trust."""
    payload = point.payload
    content = normalize.normalize_content(str(payload.get("content") or ""))
    namespace = str(payload.get("namespace") or "")
    if not namespace or not content:
        raise ValueError("payload without namespace or content")
    tier = incoming.choice_or(payload.get("retention_tier"), RetentionTier.values, RetentionTier.T2)
    decay = bool(payload.get("decay_eligible", tier != "T0"))
    synced = point.vector is not None and len(point.vector) == dimensions
    now = timezone.now()
    return Memory(
        id=uuid.UUID(point.id), namespace=incoming.namespace(namespace), collection=incoming.collection(payload.get("collection")),
        type=incoming.choice_or(payload.get("type"), MemoryType.values, MemoryType.SEMANTIC),
        category=payload.get("category"), content=content,
        summary=str(payload.get("summary") or normalize.make_summary(content))[: normalize.SUMMARY_MAX],
        tags=incoming.tags(payload.get("tags")), source=incoming.choice_or(payload.get("source"), MemorySource.values, MemorySource.AGENT),
        checksum=normalize.checksum(content), importance=incoming.unit_interval(payload.get("importance", 0.5)),
        retention_tier=tier, decay_eligible=decay, expires_at=incoming.when(payload.get("expires_at")) if decay else None,
        device_id=payload.get("device_id") or settings.BHGBRAIN_DEVICE_ID, last_operation=Operation.ADD,
        embedding=to_bytes(np.asarray(point.vector, dtype=np.float32)) if synced else None,
        embedding_model=model_id if synced else "", vector_synced=synced,
        created_at=incoming.when(payload.get("created_at")) or now, updated_at=now,
        **incoming.conversation(payload.get), **incoming.validity(payload.get),
    )


def stored_point(point: Any) -> StoredPoint:
    vector = point.vector.get("") if isinstance(point.vector, dict) else point.vector  # "": the unnamed dense vector
    return StoredPoint(id=str(point.id), payload=dict(point.payload or {}), vector=vector if isinstance(vector, list) else None)


def sparse_vector(weights: dict[int, float]) -> Any:
    from qdrant_client import models

    keys = sorted(weights)
    return models.SparseVector(indices=keys, values=[float(weights[k]) for k in keys])


def sparse_config() -> Any:
    from qdrant_client import models

    return models.SparseVectorParams(modifier=models.Modifier.IDF)


def memory_sparse(memory: Memory, context: str) -> Any:
    return sparse_vector(sparse.memory_weights(memory.content, sparse.labels(memory.tags, memory.fact_key), context))


def payload_sparse(payload: dict[str, Any]) -> Any:
    """Another device's point (no row here): its payload's content, tags and key; no context."""
    tags = payload.get("tags") if isinstance(payload.get("tags"), list) else []
    key = payload.get("fact_key") if isinstance(payload.get("fact_key"), str) else None
    return sparse_vector(sparse.memory_weights(str(payload.get("content") or ""), sparse.labels(map(str, tags), key)))
