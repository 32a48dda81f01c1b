"""Memory write services: remember (normalise → secrets → dedup → tier → store) and forget."""
from __future__ import annotations

import dataclasses
import logging
import re
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Max, Q
from django.utils import timezone

from bhgbrain_site.errors import Conflict, EmbeddingUnavailable, InvalidInput, NotFound
from memories import normalize, tiers
from memories.dedup import Relation, compare, tier_thresholds
from memories.embeddings import Embedder, calibrate, from_bytes, get_embedder, to_bytes
from memories.models import AuditLog, Collection, Memory, MemoryRevision, MemoryType, Operation, RetentionTier, VectorChange
from memories.selectors import iso
from memories.vector_index import VectorHit, get_vector_index, sync_after_commit
from search import fulltext

logger = logging.getLogger("bhgbrain.memories")

MAX_TAGS = 20
DEDUP_CANDIDATES = 10


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
    extra: dict[str, Any] = field(default_factory=dict)

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
class _Prepared:
    data: RememberInput
    content: str
    summary: str
    checksum: str
    vector: np.ndarray | None
    embedder: Embedder | None


def _result(memory: Memory, operation: str, merged_with: str | None = None) -> RememberResult:
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


def _live_duplicate(namespace: str, checksum: str) -> Memory | None:
    rows = Memory.objects.filter(namespace=namespace, checksum=checksum, archived=False).defer("embedding")
    return next(iter(rows[:1]), None)


def _embed_or_degrade(content: str) -> tuple[np.ndarray | None, Embedder | None]:
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


def _ensure_collection(namespace: str, name: str, embedder: Embedder | None) -> None:
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


def _prepare(data: RememberInput) -> _Prepared:
    content = normalize.normalize_content(data.content)
    if not content:
        raise InvalidInput("content: must not be empty after normalization")
    normalize.reject_secrets(content)
    return _Prepared(
        data=data,
        content=content,
        summary=normalize.make_summary(content),
        checksum=normalize.checksum(content),
        vector=None,
        embedder=None,
    )


def _stored_vector_search(prep: _Prepared, now: datetime) -> list[VectorHit]:
    """Exact cosine over the collection's vectors as stored in the database (the index is down)."""
    assert prep.vector is not None and prep.embedder is not None
    live = Q(decay_eligible=False) | Q(expires_at__isnull=True) | Q(expires_at__gt=now)
    rows = (Memory.objects.filter(live, namespace=prep.data.namespace, collection=prep.data.collection, archived=False,
                                  embedding_model=prep.embedder.model_id, embedding__isnull=False)
            .values_list("id", "embedding"))
    ids, vectors = [], []
    for memory_id, blob in rows.iterator(chunk_size=2000):
        vector = from_bytes(blob)
        if vector.shape == prep.vector.shape:
            ids.append(str(memory_id))
            vectors.append(vector)
    if not vectors:
        return []
    scores = np.vstack(vectors) @ prep.vector
    best = np.argsort(-scores)[:DEDUP_CANDIDATES]
    return [VectorHit(ids[i], float(scores[i])) for i in best]


def _find_semantic_match(prep: _Prepared, now: datetime) -> tuple[Memory, str] | None:
    """Top-10 of the collection; the best candidate past its tier's threshold decides.

    Past the threshold the fact guard (memories.dedup.compare) has the last word: a
    substitution is a different fact (skip the candidate), a subset changes nothing
    (NOOP), an elaboration is an UPDATE, the same words are NOOP or UPDATE by similarity.
    """
    index = get_vector_index()
    if prep.vector is None or prep.embedder is None or index is None:
        return None
    try:
        hits = index.search(
            prep.vector, namespace=prep.data.namespace, collection=prep.data.collection,
            limit=DEDUP_CANDIDATES, now=now,
        )
    except Exception:  # noqa: BLE001 - an index outage must not switch dedup off: scan the stored vectors
        logger.warning("vector index unavailable for dedup; scanning the collection's stored vectors instead")
        hits = _stored_vector_search(prep, now)
    if not hits:
        return None
    found = Memory.objects.defer("embedding").in_bulk([h.memory_id for h in hits])
    base = settings.BHGBRAIN.deduplication.similarity_threshold
    for hit in hits:
        candidate = found.get(uuid.UUID(hit.memory_id))
        if candidate is None or candidate.archived:
            continue
        similarity = float(calibrate(hit.cosine, prep.embedder.curve))
        limits = tier_thresholds(candidate.retention_tier, base)
        if similarity < limits.update:
            continue
        relation = compare(candidate.content, prep.content)
        if relation is Relation.CONFLICT:
            continue
        if relation is Relation.ELABORATES or (relation is Relation.SAME and similarity < limits.noop):
            return candidate, Operation.UPDATE
        return candidate, Operation.NOOP
    return None


def _audit(memory: Memory, operation: str, actor: str, now: datetime, details: dict[str, Any]) -> None:
    AuditLog.objects.create(
        timestamp=now, namespace=memory.namespace, operation=operation,
        memory_id=memory.id, client_id=actor, details=details,
    )


def _record_vector_change(memory: Memory, op: str) -> int:
    return VectorChange.objects.create(memory_id=memory.id, op=op).pk


def index_after_commit(memory: Memory, change_id: int | None = None) -> None:
    """Update this process's index after commit; a failure leaves vector_synced=false."""

    def sync() -> None:
        index = get_vector_index()
        if index is None:
            return
        try:
            index.upsert(memory, change_id=change_id)
        except Exception:  # noqa: BLE001 - any index failure must only flag the row, never lose it
            logger.exception("vector index upsert failed for %s", memory.id)
            Memory.objects.filter(pk=memory.pk).update(vector_synced=False)

    transaction.on_commit(sync)


def _apply_vector(memory: Memory, vector: np.ndarray | None, embedder: Embedder | None) -> None:
    if vector is not None and embedder is not None:
        memory.embedding = to_bytes(vector)
        memory.embedding_model = embedder.model_id
        memory.vector_synced = True
    else:
        memory.vector_synced = False


def _insert(prep: _Prepared, actor: str, now: datetime) -> Memory:
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
        created_at=now, updated_at=now,
    )
    _apply_vector(memory, prep.vector, prep.embedder)
    memory.save(force_insert=True)
    fulltext.index_memory(memory)
    _audit(memory, "ADD", actor, now, {"tier": tier, "collection": data.collection, "source": data.source})
    change_id = _record_vector_change(memory, VectorChange.Op.UPSERT)  # the feed also drives the text index
    index_after_commit(memory, change_id)
    return memory


def _snapshot_revision(memory: Memory, actor: str, now: datetime) -> None:
    latest = MemoryRevision.objects.filter(memory_id=memory.id).aggregate(m=Max("revision"))["m"] or 0
    MemoryRevision.objects.create(
        memory_id=memory.id, revision=latest + 1, content=memory.content, updated_at=now, updated_by=actor
    )


def _merge_tags(existing: list[str], incoming: tuple[str, ...]) -> tuple[list[str], list[str]]:
    merged = list(dict.fromkeys([*existing, *incoming]))
    return merged[:MAX_TAGS], merged[MAX_TAGS:]


def _update(target: Memory, prep: _Prepared, actor: str, now: datetime) -> Memory:
    """UPDATE merge: tags ∪, content replaced, importance max, tier/expiry recomputed."""
    data = prep.data
    if target.retention_tier == "T0":
        _snapshot_revision(target, actor, now)
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
    _apply_vector(target, prep.vector, prep.embedder)
    target.save()
    fulltext.index_memory(target)
    _audit(target, "UPDATE", actor, now, {"previous": previous, "tier": tier, "tags_dropped": dropped})
    index_after_commit(target, _record_vector_change(target, VectorChange.Op.UPSERT))
    return target


def _wants_tier_change(prep: _Prepared, memory: Memory) -> bool:
    """An explicit tier that differs turns a duplicate into an UPDATE (the seed's manual promotion)."""
    return bool(prep.data.retention_tier) and prep.data.retention_tier != memory.retention_tier


def _decide(prep: _Prepared, duplicate: Memory | None, now: datetime) -> tuple[Memory, str] | None:
    if duplicate is not None:
        return duplicate, Operation.NOOP
    if not settings.BHGBRAIN.deduplication.enabled:
        return None
    return _find_semantic_match(prep, now)


def _write(prep: _Prepared, duplicate: Memory | None, actor: str) -> RememberResult:
    now = timezone.now()
    match = _decide(prep, duplicate, now)
    if match and match[1] == Operation.NOOP and not _wants_tier_change(prep, match[0]):
        return _result(match[0], Operation.NOOP)
    with transaction.atomic():
        duplicate = _live_duplicate(prep.data.namespace, prep.checksum)
        if duplicate is not None and not _wants_tier_change(prep, duplicate):
            return _result(duplicate, Operation.NOOP)
        if match:
            target = Memory.objects.select_for_update().filter(pk=match[0].pk, archived=False).first()
            if target is not None:
                updated = _update(target, prep, actor, now)
                return _result(updated, Operation.UPDATE, merged_with=str(updated.id))
        return _result(_insert(prep, actor, now), Operation.ADD)


def memory_remember(*, data: RememberInput, actor: str) -> RememberResult:
    """Store content with normalisation, secret rejection, two-stage dedup and tier assignment.

    Returns ADD (new memory), UPDATE (merged into a near-duplicate, ``merged_with_id``)
    or NOOP (exact or near duplicate; the existing id). Identical concurrent writes
    produce one memory: the partial unique index on live (namespace, checksum) decides.
    """
    prep = _prepare(data)
    existing = _live_duplicate(data.namespace, prep.checksum)
    if existing is not None and not _wants_tier_change(prep, existing):
        return _result(existing, Operation.NOOP)  # before any embedding work
    vector, embedder = _embed_or_degrade(prep.content)
    prep = dataclasses.replace(prep, vector=vector, embedder=embedder)
    _ensure_collection(data.namespace, data.collection, embedder if vector is not None else None)
    try:
        return _write(prep, existing, actor)
    except IntegrityError:
        duplicate = _live_duplicate(data.namespace, prep.checksum)
        if duplicate is None:
            raise
        return _result(duplicate, Operation.NOOP)


def _parse_uuid(value: str, field_name: str = "id") -> uuid.UUID:
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise InvalidInput(f"{field_name}: must be a UUID") from None


def memory_forget(*, memory_id: str, namespace: str | None, actor: str) -> dict[str, Any]:
    """Permanently delete one live memory (scoped to ``namespace`` when given)."""
    pk = _parse_uuid(memory_id)
    with transaction.atomic():
        rows = Memory.objects.select_for_update().filter(pk=pk, archived=False)
        if namespace is not None:
            rows = rows.filter(namespace=namespace)
        memory = rows.first()
        if memory is None:
            raise NotFound(f"Memory {pk} not found")
        now = timezone.now()
        _audit(memory, "FORGET", actor, now, {"summary": memory.summary, "tier": memory.retention_tier})
        VectorChange.objects.create(memory_id=memory.id, op=VectorChange.Op.DELETE)
        fulltext.remove_memory(memory.id)
        memory.delete()

        def drop() -> None:
            index = get_vector_index()
            if index is None:
                return
            try:
                index.delete(str(pk))
            except Exception:  # noqa: BLE001 - the feed keeps the DELETE; the scheduled vector_sync retries
                logger.exception("vector index delete failed for %s; retried from the change feed", pk)

        transaction.on_commit(drop)
    return {"deleted": True, "id": str(pk)}


def memories_vector_sync(*, limit: int = 500) -> dict[str, int]:
    """Embed and index memories left with vector_synced=false (degraded writes, index failures)."""
    embedder = get_embedder()
    if embedder is None:
        return {"synced": 0, "failed": 0, "pending": Memory.objects.filter(vector_synced=False, archived=False).count()}
    synced = failed = 0
    for memory in Memory.objects.filter(vector_synced=False, archived=False).order_by("created_at")[:limit]:
        try:
            if memory.embedding is None or memory.embedding_model != embedder.model_id:
                vector = embedder.embed_passage(memory.content)
                memory.embedding, memory.embedding_model = to_bytes(vector), embedder.model_id
        except EmbeddingUnavailable:
            failed += 1
            break
        with transaction.atomic():
            memory.vector_synced = True
            memory.save(update_fields=["embedding", "embedding_model", "vector_synced"])
            index_after_commit(memory, _record_vector_change(memory, VectorChange.Op.UPSERT))
        synced += 1
    pending = Memory.objects.filter(vector_synced=False, archived=False).count()
    return {"synced": synced, "failed": failed, "pending": pending}


def memory_tag(*, memory_id: str, add: list[str], remove: list[str], namespace: str | None, actor: str) -> dict[str, Any]:
    """Add/remove tags atomically; the full-text index and the vector payload follow."""
    pk = _parse_uuid(memory_id)
    with transaction.atomic():
        rows = Memory.objects.select_for_update().filter(pk=pk, archived=False)
        memory = (rows.filter(namespace=namespace) if namespace is not None else rows).defer("embedding").first()
        if memory is None:
            raise NotFound(f"Memory {pk} not found")
        removing = set(remove)
        tags = [t for t in dict.fromkeys([*memory.tags, *add]) if t not in removing]
        if len(tags) > MAX_TAGS:
            raise InvalidInput(f"tags: a memory holds at most {MAX_TAGS} tags ({len(tags)} after this change)")
        if tags != memory.tags:
            before, memory.tags, memory.updated_at = memory.tags, tags, timezone.now()
            memory.save(update_fields=["tags", "updated_at"])
            fulltext.index_memory(memory)
            _audit(memory, "TAG", actor, memory.updated_at, {"before": before, "after": tags})
            _record_vector_change(memory, VectorChange.Op.UPSERT)
            sync_after_commit()  # the tags reach an external index's payload (Qdrant)
    return {"id": str(memory.id), "tags": tags}


def collection_create(*, namespace: str, name: str, actor: str) -> dict[str, Any]:
    """Create an (empty) collection locked to the configured embedding model."""
    embedder = get_embedder()
    _ensure_collection(namespace, name, embedder)
    return {"ok": True, "namespace": namespace, "name": name}


def collection_delete(*, namespace: str, name: str, force: bool, actor: str) -> dict[str, Any]:
    """Delete a collection; a non-empty one only with force (its memories are deleted)."""
    with transaction.atomic():
        collection = Collection.objects.select_for_update().filter(namespace=namespace, name=name).first()
        members = Memory.objects.filter(namespace=namespace, collection=name, archived=False)
        count = members.count()
        if collection is None and count == 0:
            raise NotFound(f'Collection "{name}" not found')
        if count and not force:
            raise Conflict(
                f'Collection "{name}" is not empty ({count} memories). Retry with force=true to delete all collection data.'
            )
        now = timezone.now()
        for memory_id in members.values_list("id", flat=True):
            VectorChange.objects.create(memory_id=memory_id, op=VectorChange.Op.DELETE)
            fulltext.remove_memory(memory_id)
        Memory.objects.filter(namespace=namespace, collection=name).delete()
        if collection is not None:
            collection.delete()
        sync_after_commit()
        AuditLog.objects.create(
            timestamp=now, namespace=namespace, operation="COLLECTION_DELETE", client_id=actor,
            details={"name": name, "deleted_memory_count": count},
        )
    return {"ok": True, "namespace": namespace, "name": name, "deleted_memory_count": count}


EDITABLE_FIELDS = ("content", "type", "tags", "category", "importance", "retention_tier", "collection")


_TAG = re.compile(r"^[a-zA-Z0-9-]{1,100}$")
_COLLECTION = re.compile(r"^[a-zA-Z0-9-]{1,100}$")


def memory_edit_check(memory: Memory, changes: dict[str, Any]) -> None:
    """Every rule the tools apply, for an edit of ``memory`` (the admin form calls it too):
    raises InvalidInput, or Conflict when the new content duplicates another live memory."""
    unknown = set(changes) - set(EDITABLE_FIELDS)
    if unknown:
        raise InvalidInput(f"{sorted(unknown)[0]}: not editable")
    tags = changes.get("tags", memory.tags)
    if not isinstance(tags, list) or not all(isinstance(t, str) and _TAG.match(t) for t in tags):
        raise InvalidInput('tags: a JSON list of tags made of letters, digits and "-" (at most 100 characters each)')
    if len(tags) > MAX_TAGS:
        raise InvalidInput(f"tags: at most {MAX_TAGS} tags ({len(tags)} given)")
    if changes.get("type", memory.type) not in MemoryType.values:
        raise InvalidInput(f"type: one of {', '.join(MemoryType.values)}")
    if changes.get("retention_tier", memory.retention_tier) not in RetentionTier.values:
        raise InvalidInput("retention_tier: one of T0, T1, T2, T3")
    importance = changes.get("importance", memory.importance)
    if not isinstance(importance, (int, float)) or not 0.0 <= float(importance) <= 1.0:
        raise InvalidInput("importance: a number from 0 to 1")
    if not _COLLECTION.match(str(changes.get("collection", memory.collection))):
        raise InvalidInput('collection: letters, digits and "-" (1-100 characters)')
    if "content" in changes:
        content = normalize.normalize_content(str(changes["content"]))
        if not content:
            raise InvalidInput("content: must not be empty after normalization")
        normalize.reject_secrets(content)
        twin = (Memory.objects.filter(namespace=memory.namespace, checksum=normalize.checksum(content), archived=False)
                .exclude(pk=memory.pk).values_list("id", flat=True).first())
        if twin is not None:
            raise Conflict(f"content: another memory in this namespace already says exactly this ({twin})")


def memory_edit(*, memory_id: str, changes: dict[str, Any], actor: str) -> Memory:
    """A curator's edit (the admin): content re-normalised, checked for secrets, re-embedded and
    re-indexed; a tier change recomputes expiry; T0 content keeps a revision; one audit row."""
    unknown = set(changes) - set(EDITABLE_FIELDS)
    if unknown:
        raise InvalidInput(f"{sorted(unknown)[0]}: not editable")
    now = timezone.now()
    content_changed = False
    with transaction.atomic():
        memory = Memory.objects.select_for_update().filter(pk=_parse_uuid(memory_id), archived=False).first()
        if memory is None:
            raise NotFound(f"Memory {memory_id} not found")
        memory_edit_check(memory, changes)
        before = {field: getattr(memory, field) for field in changes}
        if "content" in changes and normalize.normalize_content(changes["content"]) != memory.content:
            content = normalize.normalize_content(changes["content"])
            if memory.retention_tier == "T0":
                _snapshot_revision(memory, actor, now)
            memory.content, memory.summary, memory.checksum = content, normalize.make_summary(content), normalize.checksum(content)
            content_changed = True
        for name in ("type", "tags", "category", "importance", "collection"):
            if name in changes:
                setattr(memory, name, changes[name])
        if "retention_tier" in changes and changes["retention_tier"] != memory.retention_tier:
            memory.retention_tier = changes["retention_tier"]
            meta = tiers.tier_metadata(memory.retention_tier, anchor=now, ttl=settings.BHGBRAIN.retention.tier_ttl)
            memory.expires_at, memory.decay_eligible, memory.review_due = meta.expires_at, meta.decay_eligible, meta.review_due
        if content_changed:
            _apply_vector(memory, *_embed_or_degrade(memory.content))
        memory.updated_at = now
        try:
            with transaction.atomic():
                memory.save()
        except IntegrityError:  # a concurrent write of the same content won the race
            raise Conflict("content: another memory in this namespace already says exactly this") from None
        fulltext.index_memory(memory)
        _audit(memory, "EDIT", actor, now, {"fields": sorted(changes), "before": {k: str(v)[:200] for k, v in before.items()}})
        index_after_commit(memory, _record_vector_change(memory, VectorChange.Op.UPSERT))
    return memory
