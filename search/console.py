"""The governance console's search box: the product's hybrid search (BM25 + semantic, fused and
weighted as the search tool does: search.selectors) over the namespaces a curator may see.

Both indexes answer per namespace (each holds a namespace mask), so a search over several
namespaces runs the hybrid search in each and merges the ranked lists by score. The query is
embedded once for all of them (the model costs ~12-40 ms a query, the index lookups ~2 ms a
namespace). Scores are on the tool's 0..1 scale in every namespace, so the merge keeps each
namespace's own order and interleaves them by score; a list filtered to one namespace searches
only that one. No access is recorded: a curator reading is not an agent recalling. A curator
finds superseded versions too: both partitions of each namespace are searched (the console's
filters tell current from superseded).

The semantic side always has nearest neighbours, however unrelated; a list is not a top-10, so
a memory is listed only when its words match or its calibrated similarity reaches recall's gate
(``defaults.min_score``, 0.6).
"""
from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime

import numpy as np
from django.conf import settings
from django.utils import timezone

from bhgbrain_site.core.errors import EmbeddingUnavailable
from memories.embeddings import Embedder, calibrate, embed_query, get_embedder
from memories.indexes.embedded import get_vector_index
from memories.indexes.partitions import Versions
from memories.loading import memories_by_id
from search.selectors import Scored, apply_priors, default_params, fulltext_hits, fuse


def _query_vector(query: str) -> tuple[np.ndarray, Embedder] | None:
    embedder = get_embedder()
    if embedder is None or get_vector_index() is None:
        return None
    try:
        return embed_query(embedder, query), embedder
    except EmbeddingUnavailable:
        return None  # full-text alone, as the search tool degrades


def _semantic(query: tuple[np.ndarray, Embedder] | None, namespace: str, limit: int, now: datetime,
              versions: Versions) -> list[Scored]:
    index = get_vector_index()
    if query is None or index is None:
        return []
    vector, embedder = query
    hits = index.search(vector, namespace=namespace, collection=None, limit=limit, now=now, versions=versions)
    calibrated = calibrate(np.array([h.cosine for h in hits]), embedder.curve) if hits else []
    return [Scored(h.memory_id, float(c), semantic=float(c)) for h, c in zip(hits, calibrated, strict=True)]


def _relevant(item: Scored, min_score: float) -> bool:
    return item.fulltext is not None or (item.semantic or 0.0) >= min_score


def memory_ids_ranked(*, query: str, namespaces: Sequence[str], limit: int) -> list[str]:
    """Ids of the live memories of ``namespaces`` that the hybrid search finds for ``query``,
    best first (at most ``limit``): the T0 boost and importance applied as the tool does; only
    hits whose words match or whose meaning passes ``defaults.min_score``."""
    now, params, gate = timezone.now(), default_params(), settings.BHGBRAIN.defaults.min_score
    depth = max(params.depth, limit)
    vector = _query_vector(query)
    fused: list[Scored] = []
    for namespace in namespaces:
        text = fulltext_hits(query, namespace=namespace, collection=None, limit=depth, now=now, versions="all")
        fused.extend(item for item in fuse(_semantic(vector, namespace, depth, now, "all"), text, params)[:limit]
                     if _relevant(item, gate))
    rows = memories_by_id([uuid.UUID(item.memory_id) for item in fused])
    kept = []
    for item in fused:
        item.memory = rows.get(uuid.UUID(item.memory_id))
        if item.memory is not None and item.memory.namespace in namespaces:
            kept.append(item)
    return [item.memory_id for item in apply_priors(kept, params)[:limit]]
