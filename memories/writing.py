"""The steps every remember shares, plain facts and conversation messages alike: the input,
normalisation and secret rejection, embedding (or degraded mode), the collection's model lock,
the new row's tier and fields, and the result. memories/services.py (facts) and
memories/messages.py (threaded messages) build on them."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np
from django.conf import settings

from bhgbrain_site.errors import Conflict, EmbeddingUnavailable, InvalidInput
from memories import normalize, tiers
from memories.embeddings import Embedder, get_embedder, to_bytes
from memories.models import Collection, Memory, Operation
from memories.selectors import iso

logger = logging.getLogger("bhgbrain.memories")


@dataclass(frozen=True)
class RememberInput:
    content: str
    namespace: str
    collection: str
    type: str = "semantic"
    tags: tuple[str, ...] = ()
    category: str | None = None
    importance: float = 0.5
    source: str = "cli"
    retention_tier: str | None = None
    # conversation memory (memories/messages.py): one message of a thread
    thread: str | None = None
    speaker: str | None = None
    occurred_at: datetime | None = None
    message_id: str | None = None
    # event validity
    event_at: datetime | None = None
    valid_until: datetime | None = None
    status: str | None = None


@dataclass
class RememberResult:
    id: str
    summary: str
    type: str
    operation: str
    created_at: str
    retention_tier: str
    expires_at: str | None
    merged_with_id: str | None = None
    vector_synced: bool = True

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "summary": self.summary,
            "type": self.type,
            "operation": self.operation,
            "created_at": self.created_at,
            "retention_tier": self.retention_tier,
            "expires_at": self.expires_at,
        }
        if self.merged_with_id:
            out["merged_with_id"] = self.merged_with_id
        return out


@dataclass(frozen=True)
class Prepared:
    data: RememberInput
    content: str
    summary: str
    checksum: str
    vector: np.ndarray | None
    embedder: Embedder | None


def result(memory: Memory, operation: str, merged_with: str | None = None) -> RememberResult:
    return RememberResult(
        id=str(memory.id),
        summary=memory.summary,
        type=memory.type,
        operation=str(operation),
        created_at=iso(memory.created_at),
        retention_tier=memory.retention_tier,
        expires_at=iso(memory.expires_at),
        merged_with_id=merged_with,
        vector_synced=memory.vector_synced,
    )


def embed_or_degrade(content: str) -> tuple[np.ndarray | None, Embedder | None]:
    """Embed the passage; without an embedder, fall back or refuse per the pipeline config."""
    embedder = get_embedder()
    try:
        if embedder is None:
            raise EmbeddingUnavailable("No embedding provider is configured")
        return embedder.embed_passage(content), embedder
    except EmbeddingUnavailable:
        if not settings.BHGBRAIN.pipeline.fallback_to_threshold_dedup:
            raise
        logger.warning("embedding unavailable: checksum-only dedup, memory stored with vector_synced=false")
        return None, embedder


def ensure_collection(namespace: str, name: str, embedder: Embedder | None) -> None:
    """Create the collection on first use; its embedding model is locked (mismatch → CONFLICT)."""
    model = embedder.model_id if embedder else ""
    dims = embedder.dimensions if embedder else 0
    collection, created = Collection.objects.get_or_create(
        namespace=namespace, name=name, defaults={"embedding_model": model, "embedding_dimensions": dims}
    )
    if created or embedder is None:
        return
    if not collection.embedding_model:
        Collection.objects.filter(pk=collection.pk).update(embedding_model=model, embedding_dimensions=dims)
    elif (collection.embedding_model, collection.embedding_dimensions) != (model, dims):
        raise Conflict(
            f'Collection "{name}" uses {collection.embedding_model} ({collection.embedding_dimensions} dims); '
            f"the configured model is {model} ({dims} dims). Create a new collection."
        )


def prepare(data: RememberInput) -> Prepared:
    content = normalize.normalize_content(data.content)
    if not content:
        raise InvalidInput("content: must not be empty after normalization")
    normalize.reject_secrets(content)
    return Prepared(
        data=data,
        content=content,
        summary=normalize.make_summary(content),
        checksum=normalize.checksum(content),
        vector=None,
        embedder=None,
    )


def new_memory(prep: Prepared, now: datetime) -> tuple[Memory, str]:
    """The row a remember adds (not saved) and its tier, from the seed's tier chain."""
    data = prep.data
    tier = tiers.assign_tier(
        content=prep.content, tags=list(data.tags), source=data.source, memory_type=data.type,
        category=data.category, explicit_tier=data.retention_tier,
    )
    meta = tiers.tier_metadata(tier, anchor=now, ttl=settings.BHGBRAIN.retention.tier_ttl)
    memory = Memory(
        namespace=data.namespace, collection=data.collection, type=data.type, category=data.category,
        content=prep.content, summary=prep.summary, tags=list(dict.fromkeys(data.tags)),
        source=data.source, checksum=prep.checksum, importance=data.importance,
        retention_tier=tier, expires_at=meta.expires_at, decay_eligible=meta.decay_eligible,
        review_due=meta.review_due, last_operation=Operation.ADD, device_id=settings.BHGBRAIN_DEVICE_ID,
        thread=data.thread, speaker=data.speaker, message_id=data.message_id,
        occurred_at=data.occurred_at or (now if data.thread else None),
        event_at=data.event_at, valid_until=data.valid_until, status=data.status,
        created_at=now, updated_at=now,
    )
    apply_vector(memory, prep.vector, prep.embedder)
    return memory, tier


def apply_vector(memory: Memory, vector: np.ndarray | None, embedder: Embedder | None) -> None:
    if vector is not None and embedder is not None:
        memory.embedding = to_bytes(vector)
        memory.embedding_model = embedder.model_id
        memory.vector_synced = True
    else:
        memory.vector_synced = False


