"""Memory write services: remember (normalise → secrets → dedup → tier → store) and forget."""
from __future__ import annotations

import dataclasses
import logging
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from bhgbrain_site.contracts import MAX_TAGS
from bhgbrain_site.errors import Conflict, EmbeddingUnavailable, InvalidInput, NotFound
from memories import changes, threads, tiers
from memories.dedup import semantic_match
from memories.embeddings import get_embedder, to_bytes
from memories.messages import message_remember
from memories.models import Collection, Memory, MemoryRevision, Operation
from memories.selectors import iso, parse_memory_id
from memories.writing import (
    Prepared,
    RememberInput,
    RememberResult,
    apply_vector,
    embed_or_degrade,
    ensure_collection,
    new_memory,
    prepare,
    result,
)

__all__ = ["RememberInput", "RememberResult", "memory_remember", "memory_forget", "memory_tag", "memories_vector_sync",
           "collection_create", "collection_delete", "live_memory", "merge_state", "apply_vector", "embed_or_degrade",
           "ensure_collection"]

logger = logging.getLogger("bhgbrain.memories")


def _live_duplicate(namespace: str, checksum: str) -> Memory | None:
    """The live fact (not a conversation message) with this content."""
    rows = Memory.objects.filter(namespace=namespace, checksum=checksum, archived=False, thread__isnull=True)
    return next(iter(rows.defer("embedding")[:1]), None)


def _insert(prep: Prepared, actor: str, now: datetime) -> Memory:
    memory, tier = new_memory(prep, now)
    audit = changes.Audit("ADD", actor, {"tier": tier, "collection": prep.data.collection, "source": prep.data.source})
    changes.memory_saved(memory, audit=audit, at=now, insert=True)
    return memory


MERGE_FIELDS = ("tags", "importance", "category", "retention_tier", "expires_at", "decay_eligible", "review_due",
                "last_operation", "merged_from")  # what a merge may change besides the content


def merge_state(memory: Memory) -> dict[str, Any]:
    """The fields a merge may change, as JSON (a MERGE revision's ``state``: what an undo restores)."""
    return {name: iso(value) if isinstance(value, datetime) else value
            for name, value in ((name, getattr(memory, name)) for name in MERGE_FIELDS)}


def _merge_tags(existing: list[str], incoming: tuple[str, ...]) -> tuple[list[str], list[str]]:
    merged = list(dict.fromkeys([*existing, *incoming]))
    return merged[:MAX_TAGS], merged[MAX_TAGS:]


def _update(target: Memory, prep: Prepared, actor: str, now: datetime) -> Memory:
    """UPDATE merge: tags ∪, content replaced, importance max, tier/expiry recomputed. Every merge
    keeps what the memory said before as a MERGE revision (memories/merges.py undoes it)."""
    data = prep.data
    before = changes.Revision(MemoryRevision.Kind.MERGE, target.content, merge_state(target))
    classified = tiers.assign_tier(
        content=prep.content, tags=[*target.tags, *data.tags], source=data.source, memory_type=data.type,
        category=data.category or target.category, explicit_tier=data.retention_tier,
    )
    # An explicit tier wins; otherwise a merge never demotes (demotion needs explicit intent).
    tier = classified if data.retention_tier else tiers.more_durable(target.retention_tier, classified)
    meta = tiers.tier_metadata(tier, anchor=now, ttl=settings.BHGBRAIN.retention.tier_ttl)
    previous = {"checksum": target.checksum, "tier": target.retention_tier, "summary": target.summary}
    target.tags, dropped = _merge_tags(target.tags, data.tags)
    target.content, target.summary, target.checksum = prep.content, prep.summary, prep.checksum
    target.importance = max(target.importance, data.importance)
    target.category = data.category or target.category
    target.retention_tier, target.expires_at = tier, meta.expires_at
    target.decay_eligible, target.review_due = meta.decay_eligible, meta.review_due
    target.last_operation, target.merged_from, target.updated_at = Operation.UPDATE, str(target.id), now
    apply_vector(target, prep.vector, prep.embedder)
    audit = changes.Audit("UPDATE", actor, {"previous": previous, "tier": tier, "tags_dropped": dropped})
    revision = dataclasses.replace(before, state={**before.state, "after_checksum": target.checksum})
    changes.memory_saved(target, audit=audit, at=now, revision=revision)
    return target


def _wants_tier_change(prep: Prepared, memory: Memory) -> bool:
    """An explicit tier that differs turns a duplicate into an UPDATE (the seed's manual promotion)."""
    return bool(prep.data.retention_tier) and prep.data.retention_tier != memory.retention_tier


def _decide(prep: Prepared, duplicate: Memory | None, now: datetime) -> tuple[Memory, str] | None:
    if duplicate is not None:
        return duplicate, Operation.NOOP
    if not settings.BHGBRAIN.deduplication.enabled or prep.vector is None or prep.embedder is None:
        return None
    return semantic_match(prep.vector, prep.embedder, prep.content, namespace=prep.data.namespace,
                          collection=prep.data.collection, now=now)


def _write(prep: Prepared, duplicate: Memory | None, actor: str) -> RememberResult:
    now = timezone.now()
    match = _decide(prep, duplicate, now)
    if match and match[1] == Operation.NOOP and not _wants_tier_change(prep, match[0]):
        return result(match[0], Operation.NOOP)
    with transaction.atomic():
        duplicate = _live_duplicate(prep.data.namespace, prep.checksum)
        if duplicate is not None and not _wants_tier_change(prep, duplicate):
            return result(duplicate, Operation.NOOP)
        if match:
            target = Memory.objects.select_for_update().filter(pk=match[0].pk, archived=False).first()
            if target is not None:
                updated = _update(target, prep, actor, now)
                return result(updated, Operation.UPDATE, merged_with=str(updated.id))
        return result(_insert(prep, actor, now), Operation.ADD)


def memory_remember(*, data: RememberInput, actor: str) -> RememberResult:
    """Store content with normalisation, secret rejection, two-stage dedup and tier assignment.

    Returns ADD (new memory), UPDATE (merged into a near-duplicate, ``merged_with_id``)
    or NOOP (exact or near duplicate; the existing id). Identical concurrent writes
    produce one memory: the partial unique index on live (namespace, checksum) decides.
    A message of a thread (``data.thread``) is an event, never merged: memories/messages.py.
    """
    if data.thread:
        return message_remember(data=data, actor=actor)
    prep = prepare(data)
    existing = _live_duplicate(data.namespace, prep.checksum)
    if existing is not None and not _wants_tier_change(prep, existing):
        return result(existing, Operation.NOOP)  # before any embedding work
    vector, embedder = embed_or_degrade(prep.content)
    prep = dataclasses.replace(prep, vector=vector, embedder=embedder)
    ensure_collection(data.namespace, data.collection, embedder if vector is not None else None)
    try:
        return _write(prep, existing, actor)
    except IntegrityError:
        duplicate = _live_duplicate(data.namespace, prep.checksum)
        if duplicate is None:
            raise
        return result(duplicate, Operation.NOOP)


def live_memory(memory_id: str, namespace: str | None) -> Memory:
    """The live memory with this id (in ``namespace`` when given), locked, or NOT_FOUND."""
    pk = parse_memory_id(memory_id)
    rows = Memory.objects.select_for_update().filter(pk=pk, archived=False)
    memory = (rows.filter(namespace=namespace) if namespace is not None else rows).first()
    if memory is None:
        raise NotFound(f"Memory {pk} not found")
    return memory


def memory_forget(*, memory_id: str, namespace: str | None, actor: str) -> dict[str, Any]:
    """Permanently delete one live memory (scoped to ``namespace`` when given)."""
    with transaction.atomic():
        memory = live_memory(memory_id, namespace)
        audit = changes.Audit("FORGET", actor, {"summary": memory.summary, "tier": memory.retention_tier})
        changes.memories_removed([memory], audit=lambda _m: audit, at=timezone.now())
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
        changes.memory_saved(locked, audit=None, at=timezone.now(), fields=("embedding", "embedding_model", "vector_synced"))
    return True


def memories_vector_sync(*, limit: int = 500) -> dict[str, int]:
    """Embed and index memories left with vector_synced=false (degraded writes, index failures)."""
    embedder = get_embedder()
    if embedder is None:
        return {"synced": 0, "failed": 0, "pending": Memory.objects.filter(vector_synced=False, archived=False).count()}
    synced = failed = 0
    for memory in Memory.objects.filter(vector_synced=False, archived=False).order_by("created_at")[:limit]:
        try:
            if memory.embedding is None or memory.embedding_model != embedder.model_id:
                vector = embedder.embed_passage(threads.passage(memory))
                memory.embedding, memory.embedding_model = to_bytes(vector), embedder.model_id
        except EmbeddingUnavailable:
            failed += 1
            break
        synced += _vector_synced(memory)
    pending = Memory.objects.filter(vector_synced=False, archived=False).count()
    return {"synced": synced, "failed": failed, "pending": pending}


def memories_index_catch_up() -> dict[str, int]:
    """The scheduled vector_sync: embed rows left with vector_synced=false, push the change feed to
    the index (an external index such as Qdrant catches up after an outage), and refill a Qdrant
    that lost points the feed had already delivered."""
    from memories.qdrant_index import QdrantVectorIndex
    from memories.vector_index import get_vector_index

    result = memories_vector_sync()
    index = get_vector_index()
    result["feed_rows_applied"] = index.sync() if index is not None else 0
    result["refilled"] = index.refill() if isinstance(index, QdrantVectorIndex) else 0
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
            changes.memory_saved(memory, audit=changes.Audit("TAG", actor, {"before": before, "after": tags}),
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
        changes.memories_removed(members, audit=None, at=now)
        if collection is not None:
            collection.delete()
        changes.audit(operation="COLLECTION_DELETE", actor=actor, namespace=namespace, at=now,
                      details={"name": name, "deleted_memory_count": count})
    return {"ok": True, "namespace": namespace, "name": name, "deleted_memory_count": count}
