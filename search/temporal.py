"""Facts over time on the read side: which versions a search may return and in what order.

A memory is *current* while ``superseded_by`` is empty; its validity is the half-open interval
[``valid_from``, ``valid_until``) (``valid_from`` null reads as ``created_at``, ``valid_until``
null is open). A default search reads only current facts (their index partition,
memories/indexes/partitions.py); ``as_of`` keeps the versions valid at that time, current or
not; ``include_history`` follows each result with its older versions, newest first, so a
superseded fact never ranks above its successor.
"""
from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, time
from typing import Any

import numpy as np

from memories.embeddings import calibrate, from_bytes
from memories.models import Memory
from memories.temporal import fact_chain, valid_start
from search.scored import Scored

_BARE_DATE = re.compile(r"^\s*(\d{4})-(\d{2})-(\d{2})\s*$")


@dataclass(frozen=True)
class TimeScope:
    """Which versions of facts a search answers with: current ones (the default), the versions
    valid ``as_of`` a time, and (``include_history``) each result's older versions after it."""

    as_of: datetime | None = None
    include_history: bool = False

    @property
    def default(self) -> bool:
        """Current facts only: the search reads the current partitions and nothing else."""
        return self.as_of is None and not self.include_history


CURRENT = TimeScope()


def end_of_day(value: Any) -> Any:
    """``as_of`` as given: a bare date (``2026-03-01``) means the end of that day, UTC, so "as of
    the 1st" includes what changed that day; anything else is left to the datetime parser."""
    found = _BARE_DATE.match(value) if isinstance(value, str) else None
    if found is None:
        return value
    day = datetime(int(found[1]), int(found[2]), int(found[3]), tzinfo=UTC).date()  # ValueError: no such day
    return datetime.combine(day, time.max, tzinfo=UTC)


def in_utc(value: datetime) -> datetime:
    """A time without a zone is UTC."""
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def valid_at(memory: Memory, moment: datetime) -> bool:
    """Whether the memory was valid at ``moment``: valid_from <= moment < valid_until."""
    return valid_start(memory) <= moment and (memory.valid_until is None or memory.valid_until > moment)


def temporal_fields(memory: Memory) -> dict[str, Any]:
    """What every result item says about the memory's place in time."""
    return {
        "valid_from": valid_start(memory),
        "valid_until": memory.valid_until,
        "superseded_by": None if memory.superseded_by is None else str(memory.superseded_by),
        "key": memory.fact_key,
        "current": memory.superseded_by is None,
    }


def with_predecessors(memory_ids: Sequence[uuid.UUID], *, namespace: str) -> set[uuid.UUID]:
    """Those of these memories that some older version of the namespace points to (one query)."""
    if not memory_ids:
        return set()
    found = Memory.objects.filter(namespace=namespace, archived=False, superseded_by__in=list(memory_ids))
    return set(found.values_list("superseded_by", flat=True).distinct())


def _chain_of(item: Scored, namespace: str) -> list[Memory]:
    """The item's fact chain, oldest first (the item alone when it has no other version)."""
    assert item.memory is not None
    return fact_chain(item.memory.id, namespaces=[namespace])


def _head_position(chain: list[Memory], item: Scored, as_of: datetime | None) -> int:
    """Where the result of this chain sits: the item itself under ``as_of`` (the version valid
    then), else the chain's current version (the newest current one)."""
    ids = [m.id for m in chain]
    assert item.memory is not None
    if as_of is not None or item.memory.superseded_by is None:
        return ids.index(item.memory.id)
    current = [i for i, m in enumerate(chain) if m.superseded_by is None]
    return current[-1] if current else ids.index(item.memory.id)


def with_history(items: list[Scored], *, namespace: str, as_of: datetime | None, limit: int) -> list[Scored]:
    """``include_history``: each result (best first, rows loaded) followed by its older versions,
    newest first, marked by their ``superseded_by``. A superseded hit (no ``as_of``) stands for its
    chain's current version, which takes the chain's best score and place, so a superseded fact
    never ranks above its successor. ``limit`` counts results, not the versions that follow them."""
    loaded = [item for item in items if item.memory is not None]
    linked = with_predecessors([uuid.UUID(i.memory_id) for i in loaded], namespace=namespace)
    hits = {item.memory_id: item for item in loaded}
    out: list[Scored] = []
    seen: set[uuid.UUID] = set()
    results = 0
    for item in loaded:
        memory = item.memory
        assert memory is not None
        if memory.id in seen:
            continue
        if results == limit:
            break
        chain = _chain_of(item, namespace) if memory.id in linked or memory.superseded_by is not None else [memory]
        at = _head_position(chain, item, as_of)
        head = hits.get(str(chain[at].id)) or Scored(str(chain[at].id), memory=chain[at])
        head.score = max(head.score, item.score)
        out.append(head)
        out.extend(hits.get(str(m.id)) or Scored(str(m.id), memory=m) for m in reversed(chain[:at]))
        seen.update(m.id for m in chain)
        results += 1
    return out


# --------------------------------------------------------------------------- later restatements first


@dataclass(frozen=True)
class Restatements:
    """When a later statement passes an earlier one (``newer_first``; docs/facts-over-time.md,
    decision 0021). Both in calibrated similarity, the scale dedup's thresholds use."""

    similarity: float = 0.84  # the two stored vectors at least this alike (e5: raw cosine 0.92)
    margin: float = 0.04  # the later one's semantic score at most this below the earlier one's
    depth: int = 10  # among the first results


RESTATEMENTS = Restatements()


def newer_first(items: list[Scored], *, curve: tuple[tuple[float, float], ...],
                rule: Restatements = RESTATEMENTS) -> list[Scored]:
    """Among the first ``rule.depth`` results, a fact that restates a higher-ranked one (their
    stored vectors at least ``rule.similarity`` alike), answers the question about as well (its
    semantic score within ``rule.margin``) and holds from later goes before it, taking its place
    and score. Nothing said they are versions of one fact (no key, no ``supersedes``), so nothing is
    hidden or marked: of two statements that alike, the later one is more likely the current one."""
    head = items[:rule.depth]
    facts = [item.memory for item in head if _eligible(item) and item.memory is not None]
    if len(facts) < 2:
        return items
    vectors = _vectors(facts)
    out = list(head)
    for i in range(len(out)):
        while (later := _latest_restatement(out, i, vectors, curve, rule)) is not None:
            moved = out.pop(later)
            moved.score = max(moved.score, out[i].score)
            out.insert(i, moved)
    return out + items[rule.depth:]


def _eligible(item: Scored) -> bool:
    """A fact (not a message of a thread: turns are events, not versions) found by meaning."""
    return item.memory is not None and not item.memory.thread and item.semantic is not None


def _vectors(memories: Sequence[Memory]) -> dict[uuid.UUID, np.ndarray]:
    """The stored embeddings of these memories (unit vectors, as dedup reads them; one query;
    those without one are left out)."""
    rows = Memory.objects.filter(id__in=[m.id for m in memories]).values_list("id", "embedding")
    return {memory_id: from_bytes(blob) for memory_id, blob in rows if blob}


def _latest_restatement(out: list[Scored], i: int, vectors: dict[uuid.UUID, np.ndarray],
                        curve: tuple[tuple[float, float], ...], rule: Restatements) -> int | None:
    """The position after ``i`` of the latest restatement of ``out[i]`` that may pass it, if any."""
    a = out[i].memory
    if a is None or not _eligible(out[i]) or a.id not in vectors:
        return None
    floor = (out[i].semantic or 0.0) - rule.margin
    best, best_start = None, valid_start(a)
    for j in range(i + 1, len(out)):
        b = out[j].memory
        if b is None or not _eligible(out[j]) or b.id not in vectors or (out[j].semantic or 0.0) < floor:
            continue
        if valid_start(b) <= best_start or (a.fact_key and b.fact_key):  # two keys: the write side chains them
            continue
        if float(calibrate(float(vectors[a.id] @ vectors[b.id]), curve)) >= rule.similarity:
            best, best_start = j, valid_start(b)
    return best
