"""Read-path operations with their side effect: results returned to a caller count as accesses."""
from __future__ import annotations

import json
import logging
from typing import Any

from django.conf import settings
from django.utils import timezone

from memories.access import memories_touch
from memories.conversations import thread_turns
from memories.selectors import iso
from search.gating import FOLLOW_UP_TURNS, expand_follow_up, is_follow_up, skip_reason
from search.selectors import Mode, Scored, memories_recall, memories_search, neighbouring_turns, result_dict
from search.temporal import CURRENT, TimeScope

logger = logging.getLogger("bhgbrain.search")

def _shrunk(result: dict[str, Any]) -> dict[str, Any]:
    """A result that does not fit: its neighbouring turns go, then the content falls back to the summary."""
    if "context" in result:
        return {key: value for key, value in result.items() if key != "context"} | {"context_truncated": True}
    return {**result, "content": result["summary"], "content_truncated": True}


def _fit(results: list[dict[str, Any]], budget: int) -> tuple[list[dict[str, Any]], bool]:
    """Keep the response within defaults.max_response_chars: a result's context turns are dropped
    first (``context_truncated``), then long contents fall back to their summary
    (``content_truncated``), and results that still do not fit are left out."""
    kept, used = [], 0
    for result in results:
        size = len(json.dumps(result, ensure_ascii=False))
        for _ in range(2):
            if used + size <= budget:
                break
            result = _shrunk(result)
            size = len(json.dumps(result, ensure_ascii=False))
        if used + size > budget:
            return kept, True
        kept.append(result)
        used += size
    return kept, False


def _deliver(items: list[Scored], *, with_context: int = 0, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    now = timezone.now()
    results = [result_dict(item, now=now) for item in items]
    for item, result in zip(items, results, strict=True):
        result["last_accessed"] = iso(now)  # this retrieval is an access
        if with_context and item.memory is not None and item.memory.thread:
            result["context"] = neighbouring_turns(item.memory, with_context)
    results, truncated = _fit(results, settings.BHGBRAIN.defaults.max_response_chars)
    memories_touch(memory_ids=[r["id"] for r in results], at=now)
    out: dict[str, Any] = {"results": results}
    if truncated:
        out["truncated"] = True
    if meta:
        out["meta"] = meta
    return out


def search_run(*, query: str, namespace: str, collection: str | None, mode: Mode, limit: int,
               with_context: int = 0, scope: TimeScope = CURRENT) -> dict[str, Any]:
    """The search tool: ranked results (inactive events marked ``inactive``); each returned
    memory is tracked as accessed; ``with_context`` neighbouring turns for a thread's messages.
    Current facts only unless ``scope`` says ``as_of`` a time or ``include_history``."""
    items = memories_search(query=query, namespace=namespace, collection=collection, mode=mode, limit=limit,
                            scope=scope)
    return _deliver(items, with_context=with_context)


def gated_query(query: str, *, namespace: str, thread: str | None) -> tuple[str | None, dict[str, Any]]:
    """Recall gating: (None, meta with ``skipped``) for small talk; otherwise the query to search
    with — a short follow-up in a thread borrows that thread's last turns."""
    reason = skip_reason(query)
    if reason is not None:
        return None, {"skipped": reason}
    if thread and is_follow_up(query):
        recent = [turn.content for turn in thread_turns(namespace, thread).reverse()[:FOLLOW_UP_TURNS]][::-1]
        if recent:
            return expand_follow_up(query, recent), {"expanded_with_thread_turns": len(recent)}
    return query, {}


def recall_run(
    *, query: str, namespace: str, collection: str | None, memory_type: str | None,
    tags: list[str] | None, limit: int, min_score: float, gate: bool = False, thread: str | None = None,
    with_context: int = 0, include_inactive: bool = False, scope: TimeScope = CURRENT,
) -> dict[str, Any]:
    """The recall tool: semantic results above min_score; each is tracked as accessed. ``gate``
    skips small talk (``meta.skipped``); cancelled events and past plans are left out unless
    ``include_inactive``; current facts only unless ``scope`` says otherwise."""
    meta: dict[str, Any] = {}
    if gate:
        gated, meta = gated_query(query, namespace=namespace, thread=thread)
        if gated is None:
            return {"results": [], "meta": meta}
        query = gated
    items = memories_recall(
        query=query, namespace=namespace, collection=collection, memory_type=memory_type,
        tags=tags, limit=limit, min_score=min_score, include_inactive=include_inactive, scope=scope,
    )
    return _deliver(items, with_context=with_context, meta=meta)
