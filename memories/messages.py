"""Conversation messages: the threaded remember and the batch append.

A message of a thread is an event, not a fact: it is never merged into another memory by
semantic dedup, and the same words said twice are two turns. What makes a write idempotent is
its ``message_id`` (unique per namespace: sent again, it is a NOOP with the existing id at any
later time; the same id with other words or in another thread is a CONFLICT). Without a
message id, the same words again in the same thread are a NOOP. The database enforces both
(partial unique indexes), so concurrent re-sends still make one memory.

Its vector is computed over the turn before it and itself (memories.threads); its full-text
context (the turns around it, its date in words) is written by the full-text indexer, and the
turns whose window holds it are indexed again by the write funnel.
"""
from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from datetime import datetime, timedelta

import numpy as np
from django.db import IntegrityError, transaction
from django.utils import timezone

from bhgbrain_site.errors import Conflict, EmbeddingUnavailable
from bhgbrain_site.registry import Progress
from memories import changes, threads
from memories.embeddings import Embedder, get_embedder
from memories.models import Memory, Operation
from memories.writing import (
    Prepared,
    RememberInput,
    RememberResult,
    embed_or_degrade,
    ensure_collection,
    new_memory,
    prepare,
    result,
)

logger = logging.getLogger("bhgbrain.messages")


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
    return [turn.content for turn in threads.turns_before(probe, threads.EMBED_BEFORE)]


def _embed(content: str, previous: Sequence[str]) -> tuple[np.ndarray | None, Embedder | None]:
    return embed_or_degrade(threads.embedding_text(content, previous))


def _audit(memory: Memory, actor: str) -> changes.Audit:
    return changes.Audit("ADD", actor, {"tier": memory.retention_tier, "collection": memory.collection,
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
            changes.memory_saved(memory, audit=_audit(memory, actor), at=now, insert=True)
    except IntegrityError:  # a concurrent re-send won the race
        winner = _already_stored(prep)
        if winner is None:
            raise
        return result(winner, Operation.NOOP)
    return result(memory, Operation.ADD)


# --------------------------------------------------------------------------- batch append


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
        texts.append(threads.embedding_text(prep.content, previous))
        previous = [*previous, prep.content][-max(threads.EMBED_BEFORE, 1):]
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
                    changes.memories_inserted(rows, audit=lambda m: _audit(m, actor), at=now)
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
