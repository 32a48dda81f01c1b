"""remember, top to bottom: a fact or a conversation message from its input to the write funnel.

    prepare (normalise, reject secrets, checksum, fact key) → exact duplicate? (NOOP before any
    embedding) → embed (or degraded mode) → the collection's model lock → semantic dedup
    (memories/dedup.py) → tier (memories/pipeline/tiers.py) → insert, new version or in-place
    UPDATE → memories.funnel (audit, change feed, indexes) → the result (ADD, UPDATE, NOOP).

Facts over time (memories/temporal): every memory is valid from ``valid_from`` (given, else when
it happened, else now). A ``key`` puts it into that slot's history (the newest is current, a late
arrival goes in at its place); ``supersedes`` closes the memories named; a dedup UPDATE keeps the
old text as a superseded version (``deduplication.update_mode``: a pure rewording may be revised
in place instead). Only current facts are dedup candidates.

A message of a thread is an event, not a fact: it is never merged into another memory by
semantic dedup, and the same words said twice are two turns. What makes it idempotent is its
``message_id`` (unique per namespace: sent again, it is a NOOP with the existing id at any later
time; the same id with other words or in another thread is a CONFLICT). Without a message id, the
same words again in the same thread are a NOOP. The database enforces both (partial unique
indexes), so concurrent re-sends still make one memory. Its vector is computed over the turn
before it and itself (memories/conversations.py); its full-text context is written by the
full-text indexer, and the turns whose window holds it are indexed again by the funnel.
``thread_append`` stores a batch of messages the same way, embedded together.
"""
from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np
from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Case, QuerySet, Value, When
from django.utils import timezone

from bhgbrain_site.core.contracts import MAX_TAGS
from bhgbrain_site.core.errors import Conflict, EmbeddingUnavailable, InvalidInput
from bhgbrain_site.core.progress import Progress
from memories import conversations, funnel
from memories.dedup import Relation, compare, same_slot, semantic_match
from memories.embeddings import Embedder, get_embedder, to_bytes
from memories.models import Collection, Memory, MemoryRevision, Operation
from memories.pipeline import normalize, tiers
from memories.quotas.admission import lock_namespace
from memories.selectors import iso
from memories.temporal import chains
from memories.temporal.keys import normalise_key

logger = logging.getLogger("bhgbrain.memories")


# --------------------------------------------------------------------------- the input, the prepared write, the result


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
    # a message of a thread (message_remember, below)
    thread: str | None = None
    speaker: str | None = None
    occurred_at: datetime | None = None
    message_id: str | None = None
    # event validity
    event_at: datetime | None = None
    valid_until: datetime | None = None
    status: str | None = None
    # a fact's place in time (memories/temporal)
    valid_from: datetime | None = None
    key: str | None = None
    supersedes: tuple[str, ...] = ()


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
    valid_from: str | None = None
    key: str | None = None
    superseded_by: str | None = None
    superseded: tuple[str, ...] = ()  # what this write closed (a key's previous version, supersedes, dedup)

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
        out.update(valid_from=self.valid_from, key=self.key, current=self.superseded_by is None)
        if self.superseded_by:
            out["superseded_by"] = self.superseded_by
        if self.superseded:
            out["superseded"] = list(self.superseded)
        return out


@dataclass(frozen=True)
class Prepared:
    data: RememberInput
    content: str
    summary: str
    checksum: str
    vector: np.ndarray | None
    embedder: Embedder | None


def result(memory: Memory, operation: str, merged_with: str | None = None,
           superseded: Sequence[uuid.UUID] = ()) -> RememberResult:
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
        valid_from=iso(chains.valid_start(memory)),
        key=memory.fact_key,
        superseded_by=str(memory.superseded_by) if memory.superseded_by else None,
        superseded=tuple(str(i) for i in superseded),
    )


# --------------------------------------------------------------------------- the steps


def _links(data: RememberInput) -> bool:
    """Whether the write names its place among versions (a key, memories it supersedes)."""
    return bool(data.key or data.supersedes)


def prepare(data: RememberInput) -> Prepared:
    if data.thread and _links(data):
        raise InvalidInput("key and supersedes describe a fact, not a message of a thread",
                           field="key" if data.key else "supersedes")
    if data.key is not None:
        data = dataclasses.replace(data, key=normalise_key(data.key))
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


def _live_facts(namespace: str, checksum: str) -> QuerySet[Memory]:
    """The namespace's live facts (not conversation messages) holding this content, current or superseded."""
    return Memory.objects.filter(namespace=namespace, checksum=checksum, archived=False, thread__isnull=True).defer("embedding")


def _live_duplicate(namespace: str, checksum: str) -> Memory | None:
    """The live, current fact (not a conversation message) with this content."""
    return next(iter(_live_facts(namespace, checksum).filter(superseded_by__isnull=True)[:1]), None)


SAME_TEXT_ROWS = 64  # versions with one text read at once; a namespace holding more asks again for the one it needs


@dataclass(frozen=True)
class SameText:
    """The namespace's live facts (not messages) holding a write's text: the current one (there is
    at most one: uniq_live_memory_checksum) and its superseded versions, newest first. One query before
    the write serves both of remember's checks (a retry, a known version)."""

    current: Memory | None
    superseded: list[Memory]
    complete: bool  # every superseded version is in the list


def _same_text(namespace: str, checksum: str) -> SameText:
    current_first = Case(When(superseded_by__isnull=True, then=Value(0)), default=Value(1))
    rows = list(_live_facts(namespace, checksum).order_by(current_first, "-created_at")[:SAME_TEXT_ROWS + 1])
    current = rows[0] if rows and rows[0].superseded_by is None else None
    return SameText(current, rows[1:] if current is not None else rows, complete=len(rows) <= SAME_TEXT_ROWS)


def _known_version(prep: Prepared, same: SameText) -> Memory | None:
    """A superseded version that says what this write says, when the write cannot mean to bring it
    back: without key, supersedes or valid_from the same text again is a retry (NOOP, as before
    facts had versions; to bring an old fact back, name what it replaces or its key); with a key
    and a start, the same text at the same start of that key is that version again."""
    data = prep.data
    if not _links(data) and data.valid_from is None:
        return same.superseded[0] if same.superseded else None
    start = data.valid_from or data.occurred_at
    if not data.key or data.supersedes or start is None:
        return None
    found = next((m for m in same.superseded if m.fact_key == data.key and m.valid_from == start), None)
    if found is not None or same.complete:
        return found
    return _live_facts(data.namespace, prep.checksum).filter(superseded_by__isnull=False, fact_key=data.key,
                                                            valid_from=start).first()


def _wants_tier_change(prep: Prepared, memory: Memory) -> bool:
    """An explicit tier that differs turns a duplicate into an UPDATE (the seed's manual promotion)."""
    return bool(prep.data.retention_tier) and prep.data.retention_tier != memory.retention_tier


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


def _decide(prep: Prepared, duplicate: Memory | None, now: datetime) -> tuple[Memory, str] | None:
    if duplicate is not None:
        return duplicate, Operation.NOOP
    if not settings.BHGBRAIN.deduplication.enabled or prep.vector is None or prep.embedder is None:
        return None
    return semantic_match(prep.vector, prep.embedder, prep.content, namespace=prep.data.namespace,
                          collection=prep.data.collection, now=now, key=prep.data.key)


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
        valid_from=data.valid_from or data.occurred_at or now, fact_key=data.key,
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


def _add_details(prep: Prepared, tier: str, dedup_target: Memory | None) -> dict[str, Any]:
    data = prep.data
    details: dict[str, Any] = {"tier": tier, "collection": data.collection, "source": data.source}
    if data.key:
        details["key"] = data.key
    if data.supersedes:
        details["supersedes"] = list(data.supersedes)
    if dedup_target is not None:
        details["new_version_of"] = str(dedup_target.id)
    return details


def _insert(prep: Prepared, actor: str, now: datetime, dedup_target: Memory | None = None) -> tuple[Memory, list[uuid.UUID]]:
    """Insert the new memory at its place in time; returns it and the memories it closed: its key's
    previous version, the dedup target (a new version of it), the memories it ``supersedes``."""
    memory, tier = new_memory(prep, now)
    audit = funnel.Audit("ADD", actor, _add_details(prep, tier, dedup_target))
    closed: list[uuid.UUID] = []

    def write() -> None:
        funnel.save_memory(memory, audit=audit, at=now, insert=True)

    if memory.fact_key:
        dedup_slot = dedup_target is not None and dedup_target.fact_key == memory.fact_key
        closed += chains.place_by_key(memory, write, actor=actor, at=now, reason="dedup" if dedup_slot else "key")
    else:
        write()
    if dedup_target is not None and dedup_target.id not in closed and memory.superseded_by is None:
        closed += chains.supersede_loaded([dedup_target.id], memory, actor=actor, reason="dedup", at=now)
    if prep.data.supersedes:
        closed += chains.supersede_loaded(prep.data.supersedes, memory, actor=actor, reason="explicit", at=now)
    return memory, list(dict.fromkeys(closed))


def _restated(existing: Memory, prep: Prepared, actor: str, now: datetime) -> RememberResult:
    """A write that says what a current memory says: NOOP; its key (when the memory had none) and
    its ``supersedes`` still apply to that memory."""
    closed: list[uuid.UUID] = []
    if prep.data.key and not existing.fact_key:
        existing.fact_key, existing.vector_synced = prep.data.key, False  # vector_sync re-embeds it with its key

        def write() -> None:
            funnel.save_memory(existing, audit=funnel.Audit("KEY", actor, {"key": existing.fact_key}), at=now,
                               fields=("fact_key", "vector_synced", *chains.CLOSED_FIELDS))

        closed += chains.place_by_key(existing, write, actor=actor, at=now)
    if prep.data.supersedes:
        closed += chains.supersede_loaded(prep.data.supersedes, existing, actor=actor, reason="explicit", at=now)
    return result(existing, Operation.NOOP, superseded=closed)


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
    keeps what the memory said before as a MERGE revision (memories/curation/merges.py undoes it)."""
    data = prep.data
    before = funnel.Revision(MemoryRevision.Kind.MERGE, target.content, merge_state(target))
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
    audit = funnel.Audit("UPDATE", actor, {"previous": previous, "tier": tier, "tags_dropped": dropped})
    revision = dataclasses.replace(before, state={**before.state, "after_checksum": target.checksum})
    funnel.save_memory(target, audit=audit, at=now, revision=revision)
    return target


def _in_place(target: Memory, prep: Prepared, operation: str) -> bool:
    """Whether a dedup UPDATE revises ``target`` in place (a MERGE revision) rather than adding a
    new version: a tier promotion of the same text, mode "in_place", or a pure rewording under
    "reword_in_place" (memories/dedup.py compare: the same words; docs/decisions/0018)."""
    mode = settings.BHGBRAIN.deduplication.update_mode
    if operation == Operation.NOOP or mode == "in_place":
        return True
    return mode == "reword_in_place" and compare(target.content, prep.content) is Relation.SAME


def _new_version(target: Memory, prep: Prepared, actor: str, now: datetime) -> RememberResult:
    """A dedup UPDATE that keeps what ``target`` said: the new text is a new current memory (the
    tags united, the higher importance, a tier never demoted, the same collection and key) and
    ``target`` is superseded by it (reason "dedup")."""
    data = prep.data
    classified = tiers.assign_tier(
        content=prep.content, tags=[*target.tags, *data.tags], source=data.source, memory_type=data.type,
        category=data.category or target.category, explicit_tier=data.retention_tier,
    )
    tags, _dropped = _merge_tags(target.tags, data.tags)
    inherited = dataclasses.replace(
        data, tags=tuple(tags), category=data.category or target.category, key=data.key or target.fact_key,
        importance=max(target.importance, data.importance),
        retention_tier=data.retention_tier or tiers.more_durable(target.retention_tier, classified),
    )
    memory, closed = _insert(dataclasses.replace(prep, data=inherited), actor, now, dedup_target=target)
    return result(memory, Operation.UPDATE, merged_with=str(target.id), superseded=closed)


def _write(prep: Prepared, duplicate: Memory | None, actor: str) -> RememberResult:
    now = timezone.now()
    match = _decide(prep, duplicate, now)
    if match and match[1] == Operation.NOOP and not _wants_tier_change(prep, match[0]) and not _links(prep.data):
        return result(match[0], Operation.NOOP)
    with transaction.atomic():
        if _links(prep.data) or (match and match[1] == Operation.UPDATE):
            # a chain may change: the namespace's lock before any row lock, the order every chain writer keeps
            lock_namespace(prep.data.namespace)
        duplicate = _live_duplicate(prep.data.namespace, prep.checksum)
        if duplicate is not None and not _wants_tier_change(prep, duplicate):
            return _restated(duplicate, prep, actor, now)
        if match:
            target = (Memory.objects.select_for_update()
                      .filter(pk=match[0].pk, archived=False, superseded_by__isnull=True).first())
            if target is not None and same_slot(target, prep.data.key):
                if match[1] == Operation.NOOP and not _wants_tier_change(prep, target):
                    return _restated(target, prep, actor, now)
                if _in_place(target, prep, match[1]):
                    updated = _update(target, prep, actor, now)
                    return result(updated, Operation.UPDATE, merged_with=str(updated.id))
                return _new_version(target, prep, actor, now)
        memory, closed = _insert(prep, actor, now)
        return result(memory, Operation.ADD, superseded=closed)


# --------------------------------------------------------------------------- remember


def memory_remember(*, data: RememberInput, actor: str) -> RememberResult:
    """Store content with normalisation, secret rejection, two-stage dedup and tier assignment.

    Returns ADD (new memory), UPDATE (merged into a near-duplicate, ``merged_with_id``)
    or NOOP (exact or near duplicate; the existing id). Identical concurrent writes
    produce one memory: the partial unique index on live (namespace, checksum) decides.
    A message of a thread (``data.thread``) is an event, never merged: memories/remember.py.
    ``data.key``, ``data.supersedes`` and ``data.valid_from`` place the fact among its versions
    (memories/temporal); ``superseded`` in the result names what the write closed.
    """
    if data.thread:
        return message_remember(data=data, actor=actor)
    prep = prepare(data)
    same = _same_text(data.namespace, prep.checksum)
    existing = same.current
    if existing is not None and not _wants_tier_change(prep, existing):
        if not _links(prep.data):
            return result(existing, Operation.NOOP)  # before any embedding work
        with transaction.atomic():
            lock_namespace(data.namespace)  # before the row lock (memories/temporal/chains.py)
            locked = Memory.objects.select_for_update().filter(pk=existing.pk).first()
            if locked is not None:
                return _restated(locked, prep, actor, timezone.now())
    known = _known_version(prep, same) if existing is None else None
    if known is not None:
        return result(known, Operation.NOOP)
    vector, embedder = embed_or_degrade(conversations.keyed_passage(prep.content, prep.data.key))
    prep = dataclasses.replace(prep, vector=vector, embedder=embedder)
    ensure_collection(data.namespace, data.collection, embedder if vector is not None else None)
    try:
        return _write(prep, existing, actor)
    except IntegrityError:
        duplicate = _live_duplicate(data.namespace, prep.checksum)
        if duplicate is None and prep.data.key:  # uniq_current_fact_key: a writer that bypassed the namespace lock
            raise Conflict(f'key "{prep.data.key}" changed while this write ran; send it again', retryable=True,
                           field="key") from None
        if duplicate is None:
            raise
        return result(duplicate, Operation.NOOP)


# --------------------------------------------------------------------------- a message of a thread


def _same_message(existing: Memory, prep: Prepared) -> Memory:
    """A re-sent message id: the stored message if it is the same one, else CONFLICT."""
    if existing.checksum != prep.checksum or existing.thread != prep.data.thread:
        where = f'thread "{existing.thread}"' if existing.thread != prep.data.thread else "other words"
        raise Conflict(
            f'message_id "{prep.data.message_id}" already names memory {existing.id} ({where}); '
            "a message id names one message: send a new id for a new message", field="message_id",
        )
    return existing


def _already_stored(prep: Prepared) -> Memory | None:
    """The message this write repeats: same message id, or (without one) the same words in the thread."""
    data = prep.data
    if data.message_id:
        existing = Memory.objects.filter(namespace=data.namespace, message_id=data.message_id).defer("embedding").first()
        return _same_message(existing, prep) if existing is not None else None
    return (Memory.objects.filter(namespace=data.namespace, thread=data.thread, checksum=prep.checksum, archived=False,
                                  message_id__isnull=True).defer("embedding").first())


def _previous_contents(data: RememberInput, occurred_at: datetime, now: datetime) -> list[str]:
    """The turns right before a new message (what its vector is computed over with it)."""
    probe = Memory(namespace=data.namespace, thread=data.thread, occurred_at=occurred_at, created_at=now,
                   id="ffffffff-ffff-ffff-ffff-ffffffffffff")
    return [turn.content for turn in conversations.turns_before(probe, conversations.EMBED_BEFORE)]


def _embed(content: str, previous: Sequence[str]) -> tuple[np.ndarray | None, Embedder | None]:
    return embed_or_degrade(conversations.embedding_text(content, previous))


def _audit(memory: Memory, actor: str) -> funnel.Audit:
    return funnel.Audit("ADD", actor, {"tier": memory.retention_tier, "collection": memory.collection,
                                       "source": memory.source, "thread": memory.thread,
                                       "message_id": memory.message_id})


def message_remember(*, data: RememberInput, actor: str) -> RememberResult:
    """Store one message of a thread: ADD, or NOOP with the existing id (a re-sent message)."""
    prep = prepare(data)
    existing = _already_stored(prep)
    if existing is not None:
        return result(existing, Operation.NOOP)  # before any embedding work
    now = timezone.now()
    occurred_at = data.occurred_at or now
    vector, embedder = _embed(prep.content, _previous_contents(data, occurred_at, now))
    prep = dataclasses.replace(prep, data=dataclasses.replace(data, occurred_at=occurred_at), vector=vector,
                               embedder=embedder)
    ensure_collection(data.namespace, data.collection, embedder if vector is not None else None)
    try:
        with transaction.atomic():
            memory, _tier = new_memory(prep, now)
            funnel.save_memory(memory, audit=_audit(memory, actor), at=now, insert=True)
    except IntegrityError:  # a concurrent re-send won the race
        winner = _already_stored(prep)
        if winner is None:
            raise
        return result(winner, Operation.NOOP)
    return result(memory, Operation.ADD)


# --------------------------------------------------------------------------- a batch of messages


def _ordered(messages: Sequence[RememberInput], now: datetime) -> list[tuple[int, RememberInput]]:
    """Every message gets its time (default: now, in the order given), then conversation order
    (each with its place in the call, which the results keep)."""
    timed = [(i, dataclasses.replace(m, occurred_at=m.occurred_at or now + timedelta(microseconds=i)))
             for i, m in enumerate(messages)]
    return sorted(timed, key=lambda pair: (pair[1].occurred_at, pair[0]))


PROGRESS_SLICE = 16  # messages embedded between two progress reports (only when someone watches)


def _embed_batch(texts: list[str], progress: Progress | None = None) -> tuple[list[np.ndarray | None], Embedder | None]:
    """One vector a text; with ``progress``, embedded in slices so it hears ("embedding", done, total)."""
    embedder = get_embedder()
    if embedder is None:
        return [None] * len(texts), None
    step = PROGRESS_SLICE if progress is not None else max(len(texts), 1)
    vectors: list[np.ndarray | None] = []
    try:
        for start in range(0, len(texts), step):
            vectors.extend(embedder.embed_passages(texts[start:start + step]))
            if progress is not None:
                progress("embedding", len(vectors), len(texts))
    except EmbeddingUnavailable:
        logger.warning("embedding unavailable: %d messages stored with vector_synced=false", len(texts))
        return [None] * len(texts), None  # the scheduled vector_sync embeds them
    return vectors, embedder


def _new_rows(fresh: list[Prepared], now: datetime, progress: Progress | None = None) -> list[Memory]:
    """Rows for the messages not stored yet, each vector over the turn before it and itself."""
    first = fresh[0].data
    previous = _previous_contents(first, first.occurred_at or now, now)
    texts = []
    for prep in fresh:
        texts.append(conversations.embedding_text(prep.content, previous))
        previous = [*previous, prep.content][-max(conversations.EMBED_BEFORE, 1):]
    vectors, embedder = _embed_batch(texts, progress)
    rows = []
    for i, (prep, vector) in enumerate(zip(fresh, vectors, strict=True)):
        with_vector = dataclasses.replace(prep, vector=vector, embedder=embedder if vector is not None else None)
        rows.append(new_memory(with_vector, now + timedelta(microseconds=i))[0])
    return rows


def _key(prep: Prepared) -> str:
    return f"id:{prep.data.message_id}" if prep.data.message_id else f"text:{prep.checksum}"


def _plan(prepared: list[Prepared]) -> tuple[list[tuple[Prepared, Memory | None, int]], list[Prepared]]:
    """Each message: the stored one it repeats, or its place among the new ones (a message sent
    twice in one batch shares the first one's place)."""
    plan: list[tuple[Prepared, Memory | None, int]] = []
    fresh: list[Prepared] = []
    first_of: dict[str, int] = {}
    for prep in prepared:
        stored = _already_stored(prep)
        if stored is not None:
            plan.append((prep, stored, -1))
        elif _key(prep) in first_of:
            earlier = fresh[first_of[_key(prep)]]
            if earlier.checksum != prep.checksum:
                raise Conflict(f'message_id "{prep.data.message_id}" is used twice in this batch for different words',
                               field="message_id")
            plan.append((prep, None, first_of[_key(prep)]))
        else:
            first_of[_key(prep)] = len(fresh)
            plan.append((prep, None, len(fresh)))
            fresh.append(prep)
    return plan, fresh


def _outcome(plan: list[tuple[Prepared, Memory | None, int]], rows: list[Memory]) -> list[dict[str, str | None]]:
    """One result a message, in conversation order (the caller puts them back in its own order)."""
    out, used = [], set()
    for prep, stored, index in plan:
        if stored is not None:
            memory_id, operation = str(stored.id), Operation.NOOP
        else:
            memory_id, operation = str(rows[index].id), Operation.NOOP if index in used else Operation.ADD
            used.add(index)
        out.append({"id": memory_id, "operation": str(operation), "message_id": prep.data.message_id})
    return out


def thread_append(*, messages: Sequence[RememberInput], actor: str,
                  progress: Progress | None = None) -> list[dict[str, str | None]]:
    """Append messages of a thread: embedded in one batch, written in one transaction; each is
    ADD, or NOOP with the existing id when it was stored already (a re-sent batch is all NOOP).
    The results are in the order the messages were given. ``progress`` hears ("embedding",
    embedded, new messages) and then ("stored", messages, messages)."""
    for attempt in range(2):
        now = timezone.now()
        ordered = _ordered(messages, now)
        plan, fresh = _plan([prepare(m) for _, m in ordered])
        rows = _new_rows(fresh, now, progress) if fresh else []
        try:
            if rows:
                ensure_collection(rows[0].namespace, rows[0].collection, get_embedder() if rows[0].embedding else None)
                with transaction.atomic():
                    funnel.insert_memories(rows, audit=lambda m: _audit(m, actor), at=now)
        except IntegrityError:  # a concurrent writer stored some of these: plan again, once
            if attempt:
                raise
            continue
        if progress is not None:
            progress("stored", len(messages), len(messages))
        results: list[dict[str, str | None]] = [{}] * len(messages)
        for (position, _message), outcome in zip(ordered, _outcome(plan, rows), strict=True):
            results[position] = outcome
        return results
    raise AssertionError("unreachable")
