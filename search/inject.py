"""memory://inject: a budgeted context block — categories first, then the most useful memories.

With a ``query`` the memories are the hybrid search results for it; without one they are
ranked by a prior that prefers foundational, important and recently used memories
(the original simply took the newest K); current facts only, never a superseded version.
Memories included count as accessed. Those that
expire within retention.pre_expiry_warning_days are flagged, in their line ("expiring soon")
and by id in ``expiring_soon``, so the agent can re-save them with a longer-lived tier.
"""
from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from django.conf import settings
from django.utils import timezone

from categories.selectors import categories_for_inject
from memories.access import memories_touch
from memories.models import Memory
from memories.selectors import expiring_soon, inactive_reason
from search.selectors import memories_search
from search.services import gated_query

TIER_PRIOR = {"T0": 1.0, "T1": 0.8, "T2": 0.6, "T3": 0.4}
RECENCY_HALF_LIFE_DAYS = 30.0


def _prior(memory: Memory, now: datetime) -> float:
    used = memory.last_accessed or memory.created_at
    age_days = max((now - used).total_seconds() / 86400, 0.0)
    recency = math.exp(-math.log(2) * age_days / RECENCY_HALF_LIFE_DAYS)
    return TIER_PRIOR[memory.retention_tier] * (0.5 + memory.importance) * (0.5 + recency)


def _top_memories(namespace: str, query: str | None, limit: int, now: datetime, include_inactive: bool) -> list[Memory]:
    """The query's hybrid results, or the best by prior; inactive events left out unless asked for."""
    if query:
        items = memories_search(query=query, namespace=namespace, collection=None, mode="hybrid", limit=limit * 2,
                                now=now)
        found = [i.memory for i in items if i.memory is not None]
    else:
        alive = Memory.objects.filter(namespace=namespace, archived=False, superseded_by__isnull=True).defer("embedding")
        alive = alive.exclude(decay_eligible=True, expires_at__lte=now)
        pool = list(alive.order_by("-importance", "-created_at")[: max(limit * 20, 200)])
        found = sorted(pool, key=lambda m: _prior(m, now), reverse=True)
    return [m for m in found if include_inactive or inactive_reason(m, now) is None][:limit]


def _budget() -> int:
    cfg = settings.BHGBRAIN.auto_inject
    chars = min(cfg.max_chars, settings.BHGBRAIN.defaults.max_response_chars)
    return min(chars, cfg.max_tokens * 4) if cfg.max_tokens else chars  # ≈4 chars a token


def build_inject(*, namespace: str, query: str | None = None, gate: bool = False, thread: str | None = None,
                 include_inactive: bool = False) -> dict[str, Any]:
    """Categories (full content, in slot order), then memories (content, or summary if tight).
    ``gate``: a small-talk ``query`` adds no memories (``meta.skipped``); a short follow-up in a
    ``thread`` borrows its last turns."""
    meta: dict[str, Any] = {}
    if gate and query:
        query, meta = gated_query(query, namespace=namespace, thread=thread)
        if query is None:
            return {**_assemble(namespace, [], timezone.now()), "meta": meta}
    out = _assemble(namespace, None, timezone.now(), query=query, include_inactive=include_inactive)
    return {**out, "meta": meta} if meta else out


def _category_blocks(categories: list[Any], budget: int) -> tuple[list[str], bool]:
    parts, used = [], 0
    for category in categories:
        block = f"## {category.name} ({category.slot})\n{category.content}\n"
        if used + len(block) > budget:
            parts.append(block[: max(budget - used, 0)])
            return parts, True
        parts.append(block)
        used += len(block)
    return parts, False


def _memory_lines(memories: list[Memory], budget: int, now: datetime) -> tuple[list[str], list[str], bool]:
    """One line a memory (its summary if the content does not fit); the ids included."""
    parts: list[str] = []
    included: list[str] = []
    used = 0
    for memory in memories:
        label = f"{memory.type}, expiring soon" if expiring_soon(memory, now) else memory.type
        line = f"- [{label}] {memory.content}\n"
        if used + len(line) > budget:
            line = f"- [{label}] {memory.summary}\n"
        if used + len(line) > budget:
            return parts, included, True
        parts.append(line)
        used += len(line)
        included.append(str(memory.id))
    return parts, included, False


def _assemble(namespace: str, memories: list[Memory] | None, now: datetime, *, query: str | None = None,
              include_inactive: bool = False) -> dict[str, Any]:
    """The block: every category, then ``memories`` (None: the best ones for ``query``)."""
    budget = _budget()
    categories = categories_for_inject(namespace=namespace)
    parts, truncated = _category_blocks(categories, budget)
    used = sum(len(p) for p in parts)
    if memories is None:
        limit = settings.BHGBRAIN.defaults.auto_inject_limit
        memories = [] if truncated else _top_memories(namespace, query, limit, now, include_inactive)
    lines, included, cut = _memory_lines(memories, budget - used, now)
    shown = set(included)
    expiring = [str(m.id) for m in memories if str(m.id) in shown and expiring_soon(m, now)]
    memories_touch(memory_ids=included, at=now)
    return {
        "content": "".join(parts + lines),
        "truncated": truncated or cut,
        "total_results": len(categories) + len(memories),
        "categories_count": len(categories),
        "memories_count": len(included),
        "expiring_soon": expiring,
    }
