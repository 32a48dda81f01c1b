"""Semantic-dedup merges a curator reviews: what a merged memory said before, the word diff to
what it says now, and undo.

``memory_remember`` merges a near-duplicate into the memory it resembles (``last_operation``
UPDATE): the content is replaced, the tags united, importance and tier kept at the higher. Every
merge keeps a MERGE revision (memories/remember.py) with the content and the fields it replaced
(``state``, plus the checksum it wrote: ``after_checksum``), so :func:`memory_undo_merge` can put
them back as long as nothing changed the memory since.
"""
from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import datetime
from difflib import SequenceMatcher
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from bhgbrain_site.core.errors import Conflict, NotFound
from memories import conversations
from memories.curation.namespaces import Namespaces, within
from memories.funnel import Audit, Revision, save_memory
from memories.models import Memory, MemoryRevision
from memories.pipeline import normalize
from memories.remember import MERGE_FIELDS, apply_vector, embed_or_degrade, merge_state
from memories.selectors import parse_memory_id
from memories.services import live_memory

MERGE = MemoryRevision.Kind.MERGE
UNDO = MemoryRevision.Kind.UNDO_MERGE
# a CJK character is a word of its own (they are written without spaces); other words and the
# spaces between them are kept, so the diff re-assembles into the two texts
_TOKEN_RE = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]|[^\s\u3040-\u30ff"
                       r"\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+|\s+")


@dataclass(frozen=True)
class MergeReview:
    """One merged memory as the review page shows it."""

    memory: Memory
    revision: MemoryRevision  # its latest merge
    diff: list[tuple[str, str]]  # ("equal" | "delete" | "insert", text), before → now
    status: str  # "undoable" | "undone" | "changed" (edited since: undo refused) | "legacy" (no state kept)


def word_diff(before: str, after: str) -> list[tuple[str, str]]:
    """Word-level diff (CJK: character-level) of two texts as (operation, text) runs."""
    a, b = _TOKEN_RE.findall(before), _TOKEN_RE.findall(after)
    runs: list[tuple[str, str]] = []
    for tag, i1, i2, j1, j2 in SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if tag == "equal":
            runs.append(("equal", "".join(a[i1:i2])))
            continue
        if i2 > i1:
            runs.append(("delete", "".join(a[i1:i2])))
        if j2 > j1:
            runs.append(("insert", "".join(b[j1:j2])))
    return runs


def _status(memory: Memory, revision: MemoryRevision, undone: set[tuple[uuid.UUID, int]]) -> str:
    if (memory.id, revision.revision) in undone:
        return "undone"
    if "after_checksum" not in revision.state:
        return "legacy"
    return "undoable" if revision.state["after_checksum"] == memory.checksum else "changed"


def _latest_merges(live: Any, limit: int) -> list[MemoryRevision]:
    rows = (MemoryRevision.objects.filter(operation=MERGE, memory_id__in=live.values("id"))
            .order_by("-updated_at", "-revision"))
    latest: dict[uuid.UUID, MemoryRevision] = {}
    for revision in rows.iterator(chunk_size=500):
        latest.setdefault(revision.memory_id, revision)
        if len(latest) >= limit:
            break
    return list(latest.values())


def merges_for_review(*, namespaces: Namespaces, limit: int = 100) -> list[MergeReview]:
    """The latest merge into each live memory of ``namespaces`` (None: all), newest first, with
    the diff from what the memory said before it to what it says now."""
    live = within(Memory.objects.filter(archived=False), namespaces)
    picked = _latest_merges(live, limit)
    memories = live.defer("embedding").in_bulk([r.memory_id for r in picked])
    undone = {(memory_id, state.get("undid")) for memory_id, state in MemoryRevision.objects.filter(
        operation=UNDO, memory_id__in=list(memories)).values_list("memory_id", "state")}
    return [MergeReview(memory=memories[r.memory_id], revision=r, diff=word_diff(r.content, memories[r.memory_id].content),
                        status=_status(memories[r.memory_id], r, undone))
            for r in picked if r.memory_id in memories]


def _restore(memory: Memory, revision: MemoryRevision) -> None:
    """The content and the fields the merge replaced, as they were."""
    content = revision.content
    memory.content, memory.summary, memory.checksum = content, normalize.make_summary(content), normalize.checksum(content)
    for name in MERGE_FIELDS:
        if name in revision.state:
            value = revision.state[name]
            is_date = name in ("expires_at", "review_due") and value is not None
            setattr(memory, name, datetime.fromisoformat(value) if is_date else value)


def _merge_of(memory_id: str, namespace: str | None) -> tuple[Memory, MemoryRevision]:
    pk = parse_memory_id(memory_id)
    rows = Memory.objects.filter(pk=pk, archived=False).defer("embedding")
    memory = (rows if namespace is None else rows.filter(namespace=namespace)).first()
    revision = MemoryRevision.objects.filter(memory_id=pk, operation=MERGE).order_by("-revision").first()
    if memory is None or revision is None:
        raise NotFound(f"No merge into a live memory {pk}")
    if revision.state.get("after_checksum") != memory.checksum:
        raise Conflict("The memory changed since its last merge (or the merge was undone, or predates undo): "
                       "edit it instead")
    return memory, revision


def memory_undo_merge(*, memory_id: str, actor: str, namespace: str | None = None) -> Memory:
    """Undo the latest dedup merge into a memory: its content and the fields the merge changed
    (tags, importance, category, tier, expiry, review date, last operation) come back from the
    MERGE revision; the vector is recomputed (without an embedder the memory waits for
    vector_sync) and every index follows. The merged text is kept as an UNDO_MERGE revision.
    NOT_FOUND without a merge; CONFLICT when the memory changed since, or when another live
    memory now says what it said before. One UNDO_MERGE audit row."""
    memory, revision = _merge_of(memory_id, namespace)
    _restore(memory, revision)
    vector, embedder = embed_or_degrade(conversations.passage(memory))  # outside the transaction: embedding is slow
    now = timezone.now()
    with transaction.atomic():
        locked = live_memory(memory_id, namespace)
        if revision.state.get("after_checksum") != locked.checksum:
            raise Conflict("The memory changed while the undo was prepared: try again")
        put_aside = Revision(UNDO, locked.content, {**merge_state(locked), "undid": revision.revision})
        merged_summary = locked.summary
        _restore(locked, revision)
        apply_vector(locked, vector, embedder)
        locked.updated_at = now
        audit = Audit("UNDO_MERGE", actor, {"revision": revision.revision, "discarded": merged_summary})
        try:
            with transaction.atomic():
                save_memory(locked, audit=audit, at=now, revision=put_aside)
        except IntegrityError:  # the old content is a live memory again (written since the merge)
            raise Conflict("content: another live memory says what this one said before the merge", field="content") from None
    return locked
