"""memory://inject: a budgeted context block — categories first, then the most useful memories.

With a ``query`` the memories are the hybrid search results for it; without one they are
ranked by a prior that prefers foundational, important and recently used memories
(the original simply took the newest K). Memories included count as accessed.
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
from search.selectors import memories_search

TIER_PRIOR = {"T0": 1.0, "T1": 0.8, "T2": 0.6, "T3": 0.4}
RECENCY_HALF_LIFE_DAYS = 30.0


def _prior(memory: Memory, now: datetime) -> float:
    used = memory.last_accessed or memory.created_at
    age_days = max((now - used).total_seconds() / 86400, 0.0)
    recency = math.exp(-math.log(2) * age_days / RECENCY_HALF_LIFE_DAYS)
    return TIER_PRIOR[memory.retention_tier] * (0.5 + memory.importance) * (0.5 + recency)


def _top_memories(namespace: str, query: str | None, limit: int, now: datetime) -> list[Memory]:
    if query:
        items = memories_search(query=query, namespace=namespace, collection=None, mode="hybrid", limit=limit, now=now)
        return [i.memory for i in items if i.memory is not None]
    alive = Memory.objects.filter(namespace=namespace, archived=False).defer("embedding")
    alive = alive.exclude(decay_eligible=True, expires_at__lte=now)
    pool = list(alive.order_by("-importance", "-created_at")[: max(limit * 20, 200)])
    return sorted(pool, key=lambda m: _prior(m, now), reverse=True)[:limit]


def _budget() -> int:
    cfg = settings.BHGBRAIN.auto_inject
    chars = min(cfg.max_chars, settings.BHGBRAIN.defaults.max_response_chars)
    return min(chars, cfg.max_tokens * 4) if cfg.max_tokens else chars  # ≈4 chars a token


def build_inject(*, namespace: str, query: str | None = None) -> dict[str, Any]:
    """Categories (full content, in slot order), then memories (content, or summary if tight)."""
    now = timezone.now()
    budget = _budget()
    parts: list[str] = []
    used = 0
    truncated = False
    categories = categories_for_inject(namespace=namespace)
    for category in categories:
        block = f"## {category.name} ({category.slot})\n{category.content}\n"
        if used + len(block) > budget:
            block = block[: max(budget - used, 0)]
            truncated = True
        parts.append(block)
        used += len(block)
    memories = _top_memories(namespace, query, settings.BHGBRAIN.defaults.auto_inject_limit, now) if not truncated else []
    included: list[str] = []
    for memory in memories:
        line = f"- [{memory.type}] {memory.content}\n"
        if used + len(line) > budget:
            line = f"- [{memory.type}] {memory.summary}\n"
        if used + len(line) > budget:
            truncated = True
            break
        parts.append(line)
        used += len(line)
        included.append(str(memory.id))
    memories_touch(memory_ids=included, at=now)
    return {
        "content": "".join(parts),
        "truncated": truncated,
        "total_results": len(categories) + len(memories),
        "categories_count": len(categories),
        "memories_count": len(included),
    }
