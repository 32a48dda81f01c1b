"""Curators' edits (the admin, ``bhgbrain tier set``): the same rules as the tools, one audit row."""
from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from bhgbrain_site.contracts import EVENT_STATUSES, MAX_TAGS, MEMORY_TYPES, TIERS, is_collection, is_tag
from bhgbrain_site.errors import Conflict, InvalidInput
from memories import normalize, threads, tiers
from memories.changes import Audit, memory_saved
from memories.models import Memory
from memories.services import apply_vector, embed_or_degrade, live_memory, snapshot_revision

EDITABLE_FIELDS = ("content", "type", "tags", "category", "importance", "retention_tier", "collection")


def _check_unknown(edits: dict[str, Any]) -> None:
    unknown = set(edits) - set(EDITABLE_FIELDS)
    if unknown:
        name = sorted(unknown)[0]
        raise InvalidInput(f"{name}: not editable", field=name)


def _check_fields(memory: Memory, edits: dict[str, Any]) -> None:
    tags = edits.get("tags", memory.tags)
    if not isinstance(tags, list) or not all(is_tag(t) for t in tags):
        raise InvalidInput('tags: a JSON list of tags made of letters, digits and "-" (at most 100 characters each)',
                           field="tags")
    if len(tags) > MAX_TAGS:
        raise InvalidInput(f"tags: at most {MAX_TAGS} tags ({len(tags)} given)", field="tags")
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


def memory_edit_check(memory: Memory, changes: dict[str, Any]) -> None:
    """Every rule the tools apply, for an edit of ``memory`` (the admin form calls it too):
    raises InvalidInput, or Conflict when the new content duplicates another live memory;
    the error names the field in ``field``."""
    _check_unknown(changes)
    _check_fields(memory, changes)
    if "content" in changes:
        _check_content(memory, str(changes["content"]))


def _apply_content(memory: Memory, raw: str, actor: str, now: Any) -> bool:
    content = normalize.normalize_content(raw)
    if content == memory.content:
        return False
    if memory.retention_tier == "T0":
        snapshot_revision(memory, actor, now)
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
    a tier change recomputes expiry; T0 content keeps a revision; one audit row.
    ``namespace``: the memory must belong to it (NOT_FOUND otherwise)."""
    edits = changes
    _check_unknown(edits)
    now = timezone.now()
    with transaction.atomic():
        memory = live_memory(memory_id, namespace)
        memory_edit_check(memory, edits)
        before = {name: getattr(memory, name) for name in edits}
        content_changed = "content" in edits and _apply_content(memory, edits["content"], actor, now)
        for name in ("type", "tags", "category", "importance", "collection"):
            if name in edits:
                setattr(memory, name, edits[name])
        if "retention_tier" in edits:
            _apply_tier(memory, edits["retention_tier"], now)
        if content_changed:
            apply_vector(memory, *embed_or_degrade(threads.passage(memory)))
        memory.updated_at = now
        audit = Audit("EDIT", actor, {"fields": sorted(edits), "before": {k: str(v)[:200] for k, v in before.items()}})
        try:
            with transaction.atomic():
                memory_saved(memory, audit=audit, at=now)
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
        memory_saved(memory, audit=audit, at=now, fields=(*changes, "updated_at"))
    return memory
