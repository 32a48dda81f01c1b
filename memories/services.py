"""Memory write services beside remember (memories/remember.py): forget, tag, collections, the
vector index's sync and catch-up, and the live-memory lookup the other writes share."""
from __future__ import annotations

import logging
from typing import Any

from django.db import transaction
from django.utils import timezone

from bhgbrain_site.core.contracts import MAX_TAGS
from bhgbrain_site.core.errors import Conflict, EmbeddingUnavailable, InvalidInput, NotFound
from memories import conversations, funnel
from memories.embeddings import get_embedder, to_bytes
from memories.models import Collection, Memory
from memories.quotas import admission, usage
from memories.quotas.admission import lock_namespace
from memories.remember import ensure_collection
from memories.selectors import parse_memory_id
from memories.temporal import chains

logger = logging.getLogger("bhgbrain.memories")


def live_memory(memory_id: str, namespace: str | None) -> Memory:
    """The live memory with this id (in ``namespace`` when given), locked, or NOT_FOUND."""
    pk = parse_memory_id(memory_id)
    rows = Memory.objects.select_for_update().filter(pk=pk, archived=False)
    memory = (rows.filter(namespace=namespace) if namespace is not None else rows).first()
    if memory is None:
        raise NotFound(f"Memory {pk} not found")
    return memory


def _namespace_of(memory_id: str) -> str:
    """The namespace of a memory, read without a lock ("" when there is none)."""
    found = Memory.objects.filter(pk=parse_memory_id(memory_id)).values_list("namespace", flat=True).first()
    return found or ""


def memory_forget(*, memory_id: str, namespace: str | None, actor: str) -> dict[str, Any]:
    """Permanently delete one live memory (scoped to ``namespace`` when given)."""
    with transaction.atomic():
        lock_scope = namespace or _namespace_of(memory_id)
        if lock_scope:  # before the row lock (memories/temporal/chains.py); no memory, nothing to lock
            lock_namespace(lock_scope)
        memory = live_memory(memory_id, namespace)
        now = timezone.now()
        audit = funnel.Audit("FORGET", actor, {"summary": memory.summary, "tier": memory.retention_tier})
        funnel.delete_memories([memory], audit=lambda _m: audit, at=now)
        chains.unlink(memory, actor=actor, at=now)  # its predecessors lead to its successor, or are current again
    return {"deleted": True, "id": str(memory.id)}


def _vector_synced(memory: Memory) -> bool:
    """Store the vector computed (outside any transaction) for ``memory`` and mark it synced, unless
    the memory went or its words changed meanwhile: a forget must not stop the run, and an edit must
    not get the old words' vector (the next run embeds what it says now)."""
    with transaction.atomic():
        locked = (Memory.objects.select_for_update().defer("embedding")
                  .filter(pk=memory.pk, archived=False, vector_synced=False).first())
        if locked is None or locked.checksum != memory.checksum:
            return False
        locked.embedding, locked.embedding_model, locked.vector_synced = memory.embedding, memory.embedding_model, True
        funnel.save_memory(locked, audit=None, at=timezone.now(), fields=("embedding", "embedding_model", "vector_synced"))
    return True


def memories_vector_sync(*, limit: int = 500) -> dict[str, int]:
    """Embed and index memories left with vector_synced=false (degraded writes, index failures, a
    key given to a stored fact: its vector is computed with the key, so it is embedded again)."""
    embedder = get_embedder()
    if embedder is None:
        return {"synced": 0, "failed": 0, "pending": Memory.objects.filter(vector_synced=False, archived=False).count()}
    synced = failed = 0
    for memory in Memory.objects.filter(vector_synced=False, archived=False).order_by("created_at")[:limit]:
        try:
            if memory.embedding is None or memory.embedding_model != embedder.model_id or memory.fact_key:
                vector = embedder.embed_passage(conversations.passage(memory))
                memory.embedding, memory.embedding_model = to_bytes(vector), embedder.model_id
        except EmbeddingUnavailable:
            failed += 1
            break
        synced += _vector_synced(memory)
    pending = Memory.objects.filter(vector_synced=False, archived=False).count()
    return {"synced": synced, "failed": failed, "pending": pending}


def memories_index_catch_up() -> dict[str, int]:
    """The scheduled vector_sync: embed rows left with vector_synced=false, push the change feed to
    the index (an external index such as Qdrant catches up after an outage), refill a Qdrant
    that lost points the feed had already delivered, and fold the usage rows of a namespace that
    has gathered many (PostgreSQL)."""
    from memories.indexes.embedded import get_vector_index
    from memories.indexes.qdrant import QdrantVectorIndex

    result = memories_vector_sync()
    index = get_vector_index()
    result["feed_rows_applied"] = index.sync() if index is not None else 0
    result["refilled"] = index.refill() if isinstance(index, QdrantVectorIndex) else 0
    result["usage_folded"] = admission.fold_crowded(usage.FOLD_AT)  # between the nightly cleanup's folds
    return result


def memory_tag(*, memory_id: str, add: list[str], remove: list[str], namespace: str | None, actor: str) -> dict[str, Any]:
    """Add/remove tags atomically; the full-text index and the vector payload follow."""
    with transaction.atomic():
        memory = live_memory(memory_id, namespace)
        removing = set(remove)
        tags = [t for t in dict.fromkeys([*memory.tags, *add]) if t not in removing]
        if len(tags) > MAX_TAGS:
            raise InvalidInput(f"tags: a memory holds at most {MAX_TAGS} tags ({len(tags)} after this change)",
                               field="tags")
        if tags != memory.tags:
            before, memory.tags, memory.updated_at = memory.tags, tags, timezone.now()
            funnel.save_memory(memory, audit=funnel.Audit("TAG", actor, {"before": before, "after": tags}),
                               at=memory.updated_at, fields=("tags", "updated_at"))
    return {"id": str(memory.id), "tags": tags}


def collection_create(*, namespace: str, name: str, actor: str) -> dict[str, Any]:
    """Create an (empty) collection locked to the configured embedding model."""
    embedder = get_embedder()
    ensure_collection(namespace, name, embedder)
    return {"ok": True, "namespace": namespace, "name": name}


def collection_delete(*, namespace: str, name: str, force: bool, actor: str) -> dict[str, Any]:
    """Delete a collection; a non-empty one only with force (its memories are deleted)."""
    with transaction.atomic():
        collection = Collection.objects.select_for_update().filter(namespace=namespace, name=name).first()
        members = list(Memory.objects.filter(namespace=namespace, collection=name).defer("embedding"))
        count = sum(not m.archived for m in members)
        if collection is None and count == 0:
            raise NotFound(f'Collection "{name}" not found')
        if count and not force:
            raise Conflict(
                f'Collection "{name}" is not empty ({count} memories). Retry with force=true to delete all collection data.'
            )
        now = timezone.now()
        funnel.delete_memories(members, audit=None, at=now)
        if collection is not None:
            collection.delete()
        funnel.record_audit(operation="COLLECTION_DELETE", actor=actor, namespace=namespace, at=now,
                            details={"name": name, "deleted_memory_count": count})
    return {"ok": True, "namespace": namespace, "name": name, "deleted_memory_count": count}
