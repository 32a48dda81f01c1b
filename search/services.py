"""Read-path operations with their side effect: results returned to a caller count as accesses."""
from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

from django.conf import settings
from django.db import connection
from django.utils import timezone

from memories.access import memories_touch
from memories.selectors import iso
from search.selectors import Mode, Scored, memories_recall, memories_search, result_dict

logger = logging.getLogger("bhgbrain.search")


def _fit(results: list[dict[str, Any]], budget: int) -> tuple[list[dict[str, Any]], bool]:
    """Keep the response within defaults.max_response_chars: long contents fall back to their
    summary (``content_truncated``), and results that still do not fit are left out."""
    kept, used = [], 0
    for result in results:
        size = len(json.dumps(result, ensure_ascii=False))
        if used + size > budget:
            result = {**result, "content": result["summary"], "content_truncated": True}
            size = len(json.dumps(result, ensure_ascii=False))
        if used + size > budget:
            return kept, True
        kept.append(result)
        used += size
    return kept, False


def _deliver(items: list[Scored]) -> dict[str, Any]:
    now = timezone.now()
    results = [result_dict(item, now=now) for item in items]
    for result in results:
        result["last_accessed"] = iso(now)  # this retrieval is an access
    results, truncated = _fit(results, settings.BHGBRAIN.defaults.max_response_chars)
    memories_touch(memory_ids=[r["id"] for r in results], at=now)
    return {"results": results, "truncated": truncated} if truncated else {"results": results}


def search_run(*, query: str, namespace: str, collection: str | None, mode: Mode, limit: int) -> dict[str, Any]:
    """The search tool: ranked results; each returned memory is tracked as accessed."""
    return _deliver(memories_search(query=query, namespace=namespace, collection=collection, mode=mode, limit=limit))


def recall_run(
    *, query: str, namespace: str, collection: str | None, memory_type: str | None,
    tags: list[str] | None, limit: int, min_score: float,
) -> dict[str, Any]:
    """The recall tool: semantic results above min_score; each is tracked as accessed."""
    items = memories_recall(
        query=query, namespace=namespace, collection=collection, memory_type=memory_type,
        tags=tags, limit=limit, min_score=min_score,
    )
    return _deliver(items)


def indexes_warm() -> None:
    """Load the embedding model and both in-process indexes now, off the request path.

    Run in a daemon thread at server start: without it the first search after a start pays
    the load (≈3 s for each index on a 100k store). A search in an unused namespace touches
    every load path and returns nothing, so no memory is counted as accessed.
    """
    started = time.monotonic()
    try:
        # semantic first: recall, what agents call most, needs only the model and the vectors
        memories_search(query="warm up", namespace="__warmup__", collection=None, mode="semantic", limit=1)
        memories_search(query="warm up", namespace="__warmup__", collection=None, mode="fulltext", limit=1)
        logger.info("indexes warm in %.1f s", time.monotonic() - started)
    except Exception:  # noqa: BLE001 - a failed warm-up only means the first search loads lazily
        logger.exception("index warm-up failed; indexes load on first search")
    finally:
        connection.close()


def start_warming() -> None:
    threading.Thread(target=indexes_warm, name="bhgbrain-warm", daemon=True).start()

