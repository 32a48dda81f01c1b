"""Curators' edits (the admin, ``bhgbrain tier set``): the same rules as the tools, one audit row.

Besides the general :func:`memory_edit`, the governance console's actions each have a service
here: set a tier, pin / unpin, extend the expiry, confirm a T1 review, keep a consolidation
candidate, re-embed, move to a collection. Each works on one memory (a list action calls it
per memory and reports which failed and why), in one transaction, through the write funnel.
"""
from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from bhgbrain_site.core.contracts import EVENT_STATUSES, MAX_TAGS, MEMORY_TYPES, TIERS, is_collection, is_tag
from bhgbrain_site.core.errors import Conflict, EmbeddingUnavailable, InvalidInput, NotFound
from memories import conversations
from memories.embeddings import get_embedder
from memories.funnel import Audit, Revision, save_memory
from memories.models import Collection, Memory, MemoryRevision
from memories.pipeline import normalize, tiers
from memories.remember import apply_vector, embed_or_degrade, ensure_collection
from memories.selectors import iso, parse_memory_id
from memories.services import live_memory

EDITABLE_FIELDS = ("content", "type", "tags", "category", "importance", "retention_tier", "collection")


def _check_unknown(edits: dict[str, Any]) -> None:
    unknown = set(edits) - set(EDITABLE_FIELDS)
    if unknown:
        name = sorted(unknown)[0]
        raise InvalidInput(f"{name}: not editable", field=name)


def check_tags(tags: object) -> None:
    """The tools' tag rules (the admin's tag field and actions use them too): a list of at most
    MAX_TAGS tags, each made of letters, digits and "-"; INVALID_INPUT naming ``tags``."""
    if not isinstance(tags, list) or not all(is_tag(t) for t in tags):
        raise InvalidInput('tags: a list of tags, each made of letters, digits and "-" (at most 100 characters)',
                           field="tags")
    if len(tags) > MAX_TAGS:
        raise InvalidInput(f"tags: at most {MAX_TAGS} tags ({len(tags)} given)", field="tags")


def _check_fields(memory: Memory, edits: dict[str, Any]) -> None:
    check_tags(edits.get("tags", memory.tags))
    if edits.get("type", memory.type) not in MEMORY_TYPES:
        raise InvalidInput(f"type: one of {', '.join(MEMORY_TYPES)}", field="type")
    if edits.get("retention_tier", memory.retention_tier) not in TIERS:
        raise InvalidInput(f"retention_tier: one of {', '.join(TIERS)}", field="retention_tier")
    importance = edits.get("importance", memory.importance)
    if not isinstance(importance, (int, float)) or not 0.0 <= float(importance) <= 1.0:
        raise InvalidInput("importance: a number from 0 to 1", field="importance")
    if not is_collection(str(edits.get("collection", memory.collection))):
        raise InvalidInput('collection: letters, digits and "-" (1-100 characters)', field="collection")


def _check_content(memory: Memory, raw: str) -> None:
    content = normalize.normalize_content(raw)
    if not content:
        raise InvalidInput("content: must not be empty after normalization", field="content")
    normalize.reject_secrets(content)
    twin = (Memory.objects.filter(namespace=memory.namespace, checksum=normalize.checksum(content), archived=False)
            .exclude(pk=memory.pk).values_list("id", flat=True).first())
    if twin is not None:
        raise Conflict(f"content: another memory in this namespace already says exactly this ({twin})", field="content")


def _check_collection_lock(memory: Memory, name: str) -> None:
    """A collection keeps the embedding model it was created with: a memory embedded with the
    configured model cannot move into one locked to another (the same rule as remember's)."""
    embedder = get_embedder()
    locked = Collection.objects.filter(namespace=memory.namespace, name=name).values_list("embedding_model", flat=True)
    model = next(iter(locked), "")
    if embedder is not None and model and model != embedder.model_id:
        raise Conflict(f'collection: "{name}" uses {model}; the configured model is {embedder.model_id}',
                       field="collection")


def memory_edit_check(memory: Memory, changes: dict[str, Any]) -> None:
    """Every rule the tools apply, for an edit of ``memory`` (the admin form calls it too):
    raises InvalidInput, or Conflict when the new content duplicates another live memory or the
    new collection is locked to another embedding model; the error names the field in ``field``."""
    _check_unknown(changes)
    _check_fields(memory, changes)
    if "content" in changes:
        _check_content(memory, str(changes["content"]))
    if changes.get("collection", memory.collection) != memory.collection:
        _check_collection_lock(memory, str(changes["collection"]))


def _apply_content(memory: Memory, raw: str) -> bool:
    content = normalize.normalize_content(raw)
    if content == memory.content:
        return False
    memory.content, memory.summary, memory.checksum = content, normalize.make_summary(content), normalize.checksum(content)
    return True


def _apply_tier(memory: Memory, tier: str, now: Any) -> None:
    if tier == memory.retention_tier:
        return
    memory.retention_tier = tier
    meta = tiers.tier_metadata(tier, anchor=now, ttl=settings.BHGBRAIN.retention.tier_ttl)
    memory.expires_at, memory.decay_eligible, memory.review_due = meta.expires_at, meta.decay_eligible, meta.review_due


def memory_edit(*, memory_id: str, changes: dict[str, Any], actor: str, namespace: str | None = None) -> Memory:
    """A curator's edit: content re-normalised, checked for secrets, re-embedded and re-indexed;
    a tier change recomputes expiry; a new collection is created locked to the configured model;
    T0 content keeps a revision; one audit row.
    ``namespace``: the memory must belong to it (NOT_FOUND otherwise)."""
    edits = changes
    _check_unknown(edits)
    now = timezone.now()
    with transaction.atomic():
        memory = live_memory(memory_id, namespace)
        memory_edit_check(memory, edits)
        before = {name: getattr(memory, name) for name in edits}
        revision = Revision(MemoryRevision.Kind.EDIT, memory.content) if memory.retention_tier == "T0" else None
        content_changed = "content" in edits and _apply_content(memory, edits["content"])
        if edits.get("collection", memory.collection) != memory.collection:
            ensure_collection(memory.namespace, edits["collection"], get_embedder())
        for name in ("type", "tags", "category", "importance", "collection"):
            if name in edits:
                setattr(memory, name, edits[name])
        if "retention_tier" in edits:
            _apply_tier(memory, edits["retention_tier"], now)
        if content_changed:
            apply_vector(memory, *embed_or_degrade(conversations.passage(memory)))
        memory.updated_at = now
        audit = Audit("EDIT", actor, {"fields": sorted(edits), "before": {k: str(v)[:200] for k, v in before.items()}})
        try:
            with transaction.atomic():
                save_memory(memory, audit=audit, at=now, revision=revision if content_changed else None)
        except IntegrityError:  # a concurrent write of the same content won the race
            raise Conflict("content: another memory in this namespace already says exactly this", field="content") from None
    return memory


EVENT_FIELDS = ("event_at", "valid_until", "status")


def memory_set_event(*, memory_id: str, namespace: str | None, changes: dict[str, Any], actor: str) -> Memory:
    """Set (or, with None, clear) a memory's event fields: status planned/done/cancelled,
    event_at, valid_until. One audit row (EVENT) with the values before."""
    unknown = set(changes) - set(EVENT_FIELDS)
    if unknown:
        raise InvalidInput(f"{sorted(unknown)[0]}: not an event field", field=sorted(unknown)[0])
    if changes.get("status") not in (None, *EVENT_STATUSES):
        raise InvalidInput(f"status: one of {', '.join(EVENT_STATUSES)}", field="status")
    now = timezone.now()
    with transaction.atomic():
        memory = live_memory(memory_id, namespace)
        before = {name: str(getattr(memory, name)) if getattr(memory, name) is not None else None for name in changes}
        for name, value in changes.items():
            setattr(memory, name, value)
        memory.updated_at = now
        audit = Audit("EVENT", actor, {"fields": sorted(changes), "before": before})
        save_memory(memory, audit=audit, at=now, fields=(*changes, "updated_at"))
    return memory


# --------------------------------------------------------------------------- the console's actions

UNPIN_TIER = "T1"  # an unpinned memory stays long-lived and comes up for review, never on a short fuse


def _edit_when(memory_id: str, namespace: str | None, actor: str, applies: Callable[[Memory], bool],
               changes: dict[str, Any]) -> bool:
    """``memory_edit`` with ``changes`` when ``applies`` to the locked memory; False (nothing
    written) when not."""
    with transaction.atomic():
        if not applies(live_memory(memory_id, namespace)):
            return False
        memory_edit(memory_id=memory_id, changes=changes, actor=actor, namespace=namespace)
    return True


def memory_set_tier(*, memory_id: str, tier: str, actor: str, namespace: str | None = None) -> bool:
    """Move a memory to ``tier`` (T0…T3) as the ``memories.set_tier`` tool does: expiry and review
    date recomputed from now, one EDIT audit row. False when it has that tier already (nothing
    written)."""
    return _edit_when(memory_id, namespace, actor, lambda m: m.retention_tier != tier, {"retention_tier": tier})


def memory_unpin(*, memory_id: str, actor: str, namespace: str | None = None) -> bool:
    """Unpin a T0 memory: it becomes ``UNPIN_TIER`` (T1: a year's TTL and a review date), not T2,
    so unpinning never puts foundational knowledge on a short fuse; a curator who wants it gone
    sooner sets the tier. False for a memory that is not pinned (nothing written)."""
    return _edit_when(memory_id, namespace, actor, lambda m: m.retention_tier == "T0", {"retention_tier": UNPIN_TIER})


def _renewed(memory: Memory, anchor: datetime) -> tiers.TierMetadata:
    """The memory's tier rule applied from ``anchor``; INVALID_INPUT for a tier that never expires."""
    meta = tiers.tier_metadata(memory.retention_tier, anchor=anchor, ttl=settings.BHGBRAIN.retention.tier_ttl)
    if meta.expires_at is None:
        raise InvalidInput(f"retention_tier: {memory.retention_tier} memories never expire", field="retention_tier")
    return meta


def _save_lifecycle(memory: Memory, audit: Audit, now: datetime, *extra: str) -> Memory:
    memory.updated_at = now
    save_memory(memory, audit=audit, at=now, fields=("expires_at", "decay_eligible", "review_due", "updated_at", *extra))
    return memory


def memory_extend_expiry(*, memory_id: str, actor: str, namespace: str | None = None) -> Memory:
    """Push a memory's expiry out by its tier's TTL (retention.tier_ttl, tiers.tier_metadata),
    counted from its current expiry, or from now when that has passed. T0 never expires
    (INVALID_INPUT). One EXTEND audit row with the expiry before and after."""
    now = timezone.now()
    with transaction.atomic():
        memory = live_memory(memory_id, namespace)
        before = memory.expires_at
        meta = _renewed(memory, max(before or now, now))
        memory.expires_at, memory.decay_eligible = meta.expires_at, True
        audit = Audit("EXTEND", actor, {"before": iso(before), "after": iso(memory.expires_at)})
        return _save_lifecycle(memory, audit, now)


def memory_review_confirm(*, memory_id: str, actor: str, namespace: str | None = None) -> Memory:
    """A curator confirms a T1 memory still holds: its review date and expiry are reset by the
    tier's rule from now (tiers.tier_metadata; an expiry already later is kept). INVALID_INPUT
    for another tier. One REVIEW audit row (``result`` confirmed, the review date it had)."""
    now = timezone.now()
    with transaction.atomic():
        memory = live_memory(memory_id, namespace)
        if memory.retention_tier != "T1":
            raise InvalidInput(f"retention_tier: only T1 memories are reviewed (this one is {memory.retention_tier})",
                               field="retention_tier")
        before = memory.review_due
        meta = _renewed(memory, now)
        memory.review_due = meta.review_due
        memory.expires_at, memory.decay_eligible = max(memory.expires_at or now, meta.expires_at), True
        audit = Audit("REVIEW", actor, {"result": "confirmed", "review_due_before": iso(before),
                                        "review_due": iso(memory.review_due)})
        return _save_lifecycle(memory, audit, now)


def memory_keep(*, memory_id: str, actor: str, namespace: str | None = None) -> Memory:
    """Keep a consolidation candidate: clear ``stale`` and renew its expiry by its tier's rule from
    now (consolidation made it expire at once, so the next cleanup would archive it).
    INVALID_INPUT when it is not stale. One KEEP audit row."""
    now = timezone.now()
    with transaction.atomic():
        memory = live_memory(memory_id, namespace)
        if not memory.stale:
            raise InvalidInput("stale: this memory is not a consolidation candidate", field="stale")
        meta = tiers.tier_metadata(memory.retention_tier, anchor=now, ttl=settings.BHGBRAIN.retention.tier_ttl)
        memory.stale = False
        memory.expires_at, memory.decay_eligible, memory.review_due = meta.expires_at, meta.decay_eligible, meta.review_due
        return _save_lifecycle(memory, Audit("KEEP", actor, {"expires_at": iso(memory.expires_at)}), now, "stale")


def memory_move(*, memory_id: str, collection: str, actor: str, namespace: str | None = None) -> bool:
    """Move a memory to another collection of its namespace (created on first use, locked to the
    configured embedding model like remember's: CONFLICT when it is locked to another). One EDIT
    audit row; False when it is in that collection already (nothing written)."""
    return _edit_when(memory_id, namespace, actor, lambda m: m.collection != collection, {"collection": collection})


def memory_reembed(*, memory_id: str, actor: str, namespace: str | None = None) -> Memory:
    """Recompute a memory's vector from the passage every write embeds (threads.passage) with the
    configured model, and hand it to the vector index: ``vector_synced`` is true once the index
    has it (an index failure after commit flags it false again, for the scheduled vector_sync).
    EMBEDDING_UNAVAILABLE without a provider; CONFLICT when its collection is locked to another
    model or the memory changed meanwhile. One REEMBED audit row."""
    rows = Memory.objects.filter(pk=parse_memory_id(memory_id), archived=False)
    memory = (rows if namespace is None else rows.filter(namespace=namespace)).defer("embedding").first()
    if memory is None:
        raise NotFound(f"Memory {parse_memory_id(memory_id)} not found")
    vector, embedder = embed_or_degrade(conversations.passage(memory))  # outside the transaction: embedding is slow
    if vector is None or embedder is None:
        raise EmbeddingUnavailable("No embedding provider is available: the memory keeps its vector")
    with transaction.atomic():
        locked = live_memory(memory_id, namespace)
        if locked.checksum != memory.checksum:
            raise Conflict("content: the memory changed while it was embedded; try again", field="content")
        ensure_collection(locked.namespace, locked.collection, embedder)
        apply_vector(locked, vector, embedder)
        audit = Audit("REEMBED", actor, {"model": embedder.model_id, "before_model": memory.embedding_model})
        save_memory(locked, audit=audit, at=timezone.now(), fields=("embedding", "embedding_model", "vector_synced"))
    return locked
