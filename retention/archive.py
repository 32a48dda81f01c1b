"""The archive: list, search and restore memories the retention cleanup removed; a curator's
"archive now"; the archive's export.

A restore is lossless: the memory comes back with its id, content, tags, type, importance,
collection, category, device and creation time (its vector too when the model is unchanged),
as a T2 memory with a fresh expiry (the seed's rule; ``tier`` chooses another).
"""
from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from bhgbrain_site.core.contracts import TIERS
from bhgbrain_site.core.errors import Conflict, EmbeddingUnavailable, InvalidInput, NotFound
from memories import conversations, funnel
from memories.analyzer import analyze_query
from memories.curation.namespaces import Namespaces, within
from memories.embeddings import get_embedder, to_bytes
from memories.models import CONVERSATION_FIELDS, Memory, Operation
from memories.pipeline import tiers
from memories.quotas.admission import lock_namespace
from memories.selectors import iso, parse_memory_id
from memories.services import live_memory
from memories.temporal import chains as temporal
from retention import chains
from retention.cleanup import _archive as archived_copy  # the cleanup's own copy of a memory: one definition
from retention.models import ArchivedMemory

EXPORT_CHUNK = 2000  # rows read at a time by an export


def archived_to_dict(item: ArchivedMemory) -> dict[str, Any]:
    return {
        "id": str(item.memory_id), "namespace": item.namespace, "collection": item.collection, "type": item.type,
        "category": item.category, "summary": item.summary, "content": item.content, "tags": item.tags,
        "importance": item.importance, "tier": item.tier, "access_count": item.access_count,
        "device_id": item.device_id, "created_at": iso(item.created_at), "expired_at": iso(item.expired_at),
        "restored_at": iso(item.restored_at), "thread": item.thread, "speaker": item.speaker,
        "occurred_at": iso(item.occurred_at), "message_id": item.message_id, "status": item.status,
        "valid_from": iso(item.valid_from or item.occurred_at or item.created_at), "valid_until": iso(item.valid_until),
        "superseded_by": str(item.superseded_by) if item.superseded_by else None, "key": item.fact_key,
    }


def archive_entries(*, namespace: str, query: str | None = None, limit: int = 20,
                    include_restored: bool = False) -> list[dict[str, Any]]:
    """Newest first; with ``query``, entries matching most of its words first."""
    rows = ArchivedMemory.objects.filter(namespace=namespace)
    if not include_restored:
        rows = rows.filter(restored_at__isnull=True)
    if not query:
        return [archived_to_dict(a) for a in rows.order_by("-expired_at", "-id")[:limit]]
    terms = [t for t in dict.fromkeys(analyze_query(query)) if len(t) > 1] or [query.strip().lower()]
    match = Q()
    for term in terms:
        match |= Q(content__icontains=term) | Q(summary__icontains=term) | Q(tags__icontains=term)
    found = list(rows.filter(match).order_by("-expired_at", "-id")[:500])

    def hits(item: ArchivedMemory) -> int:
        haystack = f"{item.content} {item.summary} {' '.join(item.tags)}".lower()
        return sum(term in haystack for term in terms)

    found.sort(key=hits, reverse=True)  # stable: equally good matches stay newest first
    return [archived_to_dict(a) for a in found[:limit]]


def _vector_for(item: ArchivedMemory) -> tuple[bytes | None, str, bool]:
    embedder = get_embedder()
    if embedder is None:
        return item.embedding, item.embedding_model, False
    if item.embedding is not None and item.embedding_model == embedder.model_id:
        return bytes(item.embedding), item.embedding_model, True
    try:
        passage = conversations.passage(Memory(id=item.memory_id, namespace=item.namespace, content=item.content,
                                               **{name: getattr(item, name) for name in CONVERSATION_FIELDS},
                                               created_at=item.created_at))
        return to_bytes(embedder.embed_passage(passage)), embedder.model_id, True
    except EmbeddingUnavailable:
        return item.embedding, item.embedding_model, False  # the scheduled vector_sync embeds it later


def _live_twin(item: ArchivedMemory, place: chains.Place) -> Memory | None:
    """The live memory a restore would duplicate: the same message, or the same current fact (a
    version restored into a fact's history may say what the current one says)."""
    rows = Memory.objects.filter(namespace=item.namespace)
    if item.message_id:
        return rows.filter(message_id=item.message_id).first()
    if item.thread:
        return rows.filter(thread=item.thread, checksum=item.checksum, archived=False, message_id__isnull=True).first()
    if place.superseded_by is not None:
        return None
    return rows.filter(checksum=item.checksum, archived=False, thread__isnull=True, superseded_by__isnull=True).first()


def _validity(item: ArchivedMemory, place: chains.Place) -> dict[str, Any]:
    """The restored memory's conversation fields, its place in its fact chain included."""
    fields = {name: getattr(item, name) for name in CONVERSATION_FIELDS}
    fields.update(valid_from=item.valid_from or item.occurred_at or item.created_at,
                  superseded_by=place.superseded_by, valid_until=place.valid_until)
    return fields


def archive_restore(*, memory_id: str, namespace: str, actor: str, tier: str = "T2") -> dict[str, Any]:
    """Bring an archived memory back as a live one (same id), refusing to create a duplicate.
    A version of a fact goes back to its place in its chain (retention/chains.py: restore_place)."""
    if tier not in TIERS:
        raise InvalidInput(f"Invalid input: tier must be one of {', '.join(TIERS)}", field="tier")
    try:
        pk = uuid.UUID(memory_id)
    except ValueError:
        raise InvalidInput("Invalid input: id must be a UUID") from None
    item = (ArchivedMemory.objects.filter(memory_id=pk, namespace=namespace, restored_at__isnull=True)
            .order_by("-expired_at").first())
    if item is None:
        raise NotFound(f"No archived memory {pk} in namespace {namespace}")
    embedding, model, synced = _vector_for(item)  # outside the transaction: embedding is slow
    now = timezone.now()
    meta = tiers.tier_metadata(tier, anchor=now, ttl=settings.BHGBRAIN.retention.tier_ttl)
    with transaction.atomic():
        if Memory.objects.filter(pk=pk).exists():
            raise Conflict(f"Memory {pk} exists already")
        place = chains.restore_place(item)
        duplicate = _live_twin(item, place)
        if duplicate is not None:
            raise Conflict(f"A live memory with the same content exists: {duplicate.id}")
        memory = Memory(
            id=pk, namespace=item.namespace, collection=item.collection, type=item.type, category=item.category,
            content=item.content, summary=item.summary, tags=item.tags, source=item.source, checksum=item.checksum,
            importance=item.importance, retention_tier=tier, expires_at=meta.expires_at,
            decay_eligible=meta.decay_eligible, review_due=meta.review_due, access_count=item.access_count,
            last_accessed=item.last_accessed, last_operation=Operation.ADD, device_id=item.device_id,
            embedding=embedding, embedding_model=model, vector_synced=synced, created_at=item.created_at,
            updated_at=now, **_validity(item, place),
        )
        audit = funnel.Audit("RESTORE_ARCHIVE", actor,
                              {"tier": tier, "archived_tier": item.tier, "expired_at": iso(item.expired_at),
                               "superseded_by": str(place.superseded_by) if place.superseded_by else None})
        funnel.save_memory(memory, audit=audit, at=now, insert=True)
        if place.previous is not None:  # the live version before its place now leads to it
            temporal.close(place.previous, memory, actor=actor, reason="restore", at=now)
        ArchivedMemory.objects.filter(pk=item.pk).update(restored_at=now)
    return {"restored": True, "id": str(pk), "namespace": namespace, "retention_tier": tier,
            "expires_at": iso(meta.expires_at), "vector_synced": synced,
            "current": place.superseded_by is None,
            "superseded_by": str(place.superseded_by) if place.superseded_by else None}


def memory_archive(*, memory_id: str, actor: str, namespace: str | None = None) -> dict[str, Any]:
    """A curator's "archive now": the live memory is copied whole into the archive, exactly as the
    cleanup archives an expired one (restorable with :func:`archive_restore`), and deleted through
    the write funnel (every index, other processes and Qdrant are told). ``namespace``: the memory
    must belong to it (NOT_FOUND otherwise). One ARCHIVE audit row; the live older versions of its
    fact chain go with it (retention/chains.py), an ARCHIVE row each, reason ``successor_archived``."""
    now = timezone.now()
    with transaction.atomic():
        lock_scope = namespace or Memory.objects.filter(pk=parse_memory_id(memory_id)).values_list(
            "namespace", flat=True).first()
        if lock_scope:  # before any row lock, as every writer of a fact chain (memories/temporal)
            lock_namespace(lock_scope)
        memory = live_memory(memory_id, namespace)
        older = chains.predecessors([memory])
        ArchivedMemory.objects.bulk_create([archived_copy(m, now) for m in [*older, memory]])

        def audit(m: Memory) -> funnel.Audit:
            if m.id == memory.id:
                return funnel.Audit("ARCHIVE", actor, {"reason": "curator", "tier": m.retention_tier, "summary": m.summary})
            return funnel.Audit("ARCHIVE", actor, {"reason": chains.CASCADE_REASON, "successor": str(m.superseded_by),
                                                   "tier": m.retention_tier, "summary": m.summary})

        funnel.delete_memories([*older, memory], audit=audit, at=now)
    return {"archived": True, "id": str(memory.id), "namespace": memory.namespace,
            "with_successor": [str(m.id) for m in older]}


def archive_export(*, rows: QuerySet[ArchivedMemory], namespaces: Namespaces,
                   chunk_size: int = EXPORT_CHUNK) -> Iterator[dict[str, Any]]:
    """Every archive entry of ``rows`` within ``namespaces`` (None: all) as ``archived_to_dict``
    shapes it, read ``chunk_size`` rows at a time (a 100k-row archive never sits in memory)."""
    for item in within(rows, namespaces).defer("embedding").iterator(chunk_size=chunk_size):
        yield archived_to_dict(item)
