"""Search and recall: full-text (BM25), semantic (calibrated cosine) and hybrid fusion.

Hybrid = weighted score fusion of the two ranked lists (see docs/retrieval.md for the
formula and the measurements behind every constant), then two bounded priors: the T0
boost and importance, applied multiplicatively so they reorder close results without
swamping relevance.
"""
from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol, TypeVar

import numpy as np
from django.conf import settings
from django.utils import timezone

from bhgbrain_site.core.errors import EmbeddingUnavailable
from bhgbrain_site.core.pools import run_beside
from memories.conversations import turns_after, turns_before
from memories.embeddings import calibrate, embed_query, get_embedder, start_query
from memories.indexes.embedded import get_vector_index
from memories.indexes.partitions import Versions
from memories.indexes.qdrant import QdrantVectorIndex, SparseVectorsMissing
from memories.indexes.sparse import query_weights
from memories.indexes.vectors import VectorHit
from memories.loading import memories_by_id
from memories.models import Memory
from memories.selectors import expiring_soon, inactive_reason, iso, turn_to_dict
from search import fulltext
from search.degraded import vector_hits
from search.scored import Scored
from search.temporal import CURRENT, TimeScope, newer_first, temporal_fields, valid_at, with_history

__all__ = ["Scored", "memories_recall", "memories_search"]  # Scored lives in search.scored; imported from here too

logger = logging.getLogger("bhgbrain.search")
T = TypeVar("T")

Mode = Literal["semantic", "fulltext", "hybrid"]


@dataclass(frozen=True)
class HybridParams:
    """Fusion constants (defaults chosen on the retrieval benchmark, docs/retrieval.md)."""

    semantic_weight: float = 0.4
    fulltext_weight: float = 0.6
    depth: int = 20  # candidates fetched from each side (at least the requested limit)
    fusion: Literal["rrf", "minmax", "zscore"] = "minmax"
    rrf_k: int = 60
    t0_boost: float = 0.10  # ×1.10 for T0
    importance_weight: float = 0.10  # ×(1 + 0.10·(importance − 0.5)): ±5 %


def default_params() -> HybridParams:
    search = settings.BHGBRAIN.search
    return HybridParams(
        semantic_weight=search.hybrid_weights.semantic,
        fulltext_weight=search.hybrid_weights.fulltext,
        fusion=search.fusion,
        depth=search.candidate_depth,
    )


# --- the two sides -----------------------------------------------------------------------


def semantic_hits(query: str, *, namespace: str, collection: str | None, limit: int, now: datetime) -> list[Scored]:
    """Vector search over every collection of the namespace unless one is given."""
    return start_semantic(query)(namespace=namespace, collection=collection, limit=limit, now=now)


class SemanticSearch(Protocol):
    def ready(self) -> None:
        """Wait for the query's vector (EmbeddingUnavailable if it failed)."""

    def __call__(self, *, namespace: str, collection: str | None, limit: int, now: datetime,
                 versions: Versions = "current") -> list[Scored]: ...


@dataclass(frozen=True)
class _PendingSemantic:
    index: Any
    vector: Any  # () -> np.ndarray: the query's vector once embedded
    curve: Any

    def ready(self) -> None:
        self.vector()

    def __call__(self, *, namespace: str, collection: str | None, limit: int, now: datetime,
                 versions: Versions = "current") -> list[Scored]:
        hits = vector_hits(self.index, self.vector(), namespace=namespace, collection=collection, limit=limit, now=now,
                           versions=versions)
        return _semantic_scored(hits, self.curve)


def start_semantic(query: str) -> SemanticSearch:
    """A semantic search whose query embedding starts now (on the local model's own thread), to
    be finished by calling the result (``ready()`` waits for the embedding alone).
    EmbeddingUnavailable when there is no embedder or index, or (from the call) when it fails."""
    embedder = get_embedder()
    index = get_vector_index()
    if embedder is None or index is None:
        raise EmbeddingUnavailable("No embedding provider is available for semantic search")
    return _PendingSemantic(index, start_query(embedder, query), embedder.curve)


def _semantic_scored(hits: list[VectorHit], curve: Any) -> list[Scored]:
    calibrated = calibrate(np.array([h.cosine for h in hits]), curve) if hits else []
    return [Scored(h.memory_id, float(c), semantic=float(c)) for h, c in zip(hits, calibrated, strict=True)]


def _text_scored(hits: list[tuple[str, float]]) -> list[Scored]:
    hits = [(memory_id, score) for memory_id, score in hits if score > 0]
    best = max((score for _, score in hits), default=0.0) or 1.0
    return [Scored(memory_id, score / best, fulltext=score / best) for memory_id, score in hits]


def _qdrant() -> QdrantVectorIndex | None:
    """The Qdrant index when it serves full-text too (``vector_index: "qdrant"``): then no
    per-process text index is ever loaded. None on the embedded backend, and in degraded mode
    (no embedder, so no index: full-text falls back to the in-process index)."""
    if settings.BHGBRAIN.vector_index != "qdrant":
        return None
    index = get_vector_index()
    return index if isinstance(index, QdrantVectorIndex) else None


def fulltext_hits(query: str, *, namespace: str, collection: str | None, limit: int, now: datetime,
                  versions: Versions = "current") -> list[Scored]:
    """BM25-ranked memories (current facts; ``versions``: the superseded ones, or both), each
    scored against the query's best (0..1)."""
    return _text_scored(_bm25_hits(query, namespace=namespace, collection=collection, limit=limit, now=now,
                                   versions=versions))


def _bm25_hits(query: str, *, namespace: str, collection: str | None, limit: int, now: datetime,
               versions: Versions = "current") -> list[tuple[str, float]]:
    """(memory id, BM25) best first, from Qdrant's sparse vectors or this process's text index."""
    index = _qdrant()
    if index is not None:
        terms = query_weights(query)
        try:
            _, text = index.query(None, terms, namespace=namespace, collection=collection, limit=limit, now=now,
                                  versions=versions) if terms else ([], [])
            return text
        except _unreachable():
            logger.exception("qdrant cannot answer full-text: it falls back to this process's own index")
    hits = fulltext.search(query, namespace=namespace, collection=collection, now=now, limit=limit, versions=versions)
    return [(h.memory_id, h.score) for h in hits]


def _both_sides(query: str, *, namespace: str, collection: str | None, limit: int, now: datetime) -> tuple[list[Scored], list[Scored]]:
    """The semantic and full-text candidate lists of a hybrid search (semantic empty without an
    embedder). On Qdrant both come from one Query API call a collection."""
    index = _qdrant()
    if index is None:
        return _embedded_sides(query, namespace=namespace, collection=collection, limit=limit, now=now)
    embedder = get_embedder()
    assert embedder is not None  # _qdrant() found an index, which needs one
    try:
        dense, text_hits = index.query(embed_query(embedder, query), query_weights(query), namespace=namespace,
                                       collection=collection, limit=limit, now=now)
    except _unreachable():
        logger.exception("qdrant cannot answer: hybrid search falls back to this process's full-text index alone")
        hits = fulltext.search(query, namespace=namespace, collection=collection, now=now, limit=limit)
        return [], _text_scored([(h.memory_id, h.score) for h in hits])
    return _semantic_scored(dense, embedder.curve), _text_scored(text_hits)


def _embedded_sides(query: str, *, namespace: str, collection: str | None, limit: int,
                    now: datetime) -> tuple[list[Scored], list[Scored]]:
    """Both sides on the in-process indexes. The query is embedded first, with the cores to itself
    (scoring the full-text side meanwhile stretched the model's OpenMP team: query embedding p95 30
    against 21 ms at 1M on a 2-vCPU EPYC), then the vector search runs on a side thread while this
    one scores the full-text side (decision 0022). Without an embedder: full-text alone."""
    try:
        pending = start_semantic(query)
        pending.ready()
    except EmbeddingUnavailable:
        return [], fulltext_hits(query, namespace=namespace, collection=collection, limit=limit, now=now)
    return _sides_at_once(functools.partial(pending, namespace=namespace, collection=collection, limit=limit, now=now),
                          functools.partial(fulltext_hits, query, namespace=namespace, collection=collection,
                                            limit=limit, now=now))


def _sides_at_once(semantic_side: Callable[[], list[Scored]], text_side: Callable[[], T]) -> tuple[list[Scored], T]:
    """The vector search (its query already embedded) on a side thread, or here when none is free
    or inside a transaction (``run_beside``), while this thread runs the full-text side. A vector
    search that fails gives no semantic hits: the search degrades silently to full-text."""
    beside = run_beside(semantic_side)
    text = text_side()
    try:
        semantic = beside.result() if beside is not None else semantic_side()
    except EmbeddingUnavailable:
        semantic = []
    return semantic, text


def _unreachable() -> tuple[type[Exception], ...]:
    """What qdrant-client raises when the server cannot be reached or answers an error, and a
    collection an old server could not give its sparse vector."""
    from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

    return ResponseHandlingException, UnexpectedResponse, ConnectionError, SparseVectorsMissing


# --- fusion ------------------------------------------------------------------------------


def _normalise(values: list[float], method: str) -> list[float]:
    if not values:
        return []
    arr = np.asarray(values, dtype=np.float64)
    if method == "zscore":
        std = arr.std()
        z = (arr - arr.mean()) / std if std > 1e-9 else np.zeros_like(arr)
        return list(1 / (1 + np.exp(-z)))  # squash to 0..1 so a missing side counts as 0
    low, high = arr.min(), arr.max()
    return list((arr - low) / (high - low)) if high - low > 1e-12 else [1.0] * len(values)


def _side_contributions(hits: list[Scored], raw: list[float], params: HybridParams) -> list[float]:
    if params.fusion == "rrf":
        return [1.0 / (params.rrf_k + rank) for rank in range(1, len(hits) + 1)]
    return _normalise(raw, params.fusion)


def fuse(semantic: list[Scored], text: list[Scored], params: HybridParams) -> list[Scored]:
    """Weighted fusion of two best-first lists; an item missing from one side gets 0 there."""
    merged: dict[str, Scored] = {}
    sides = (
        (semantic, [h.semantic or 0.0 for h in semantic], params.semantic_weight),
        (text, [h.fulltext or 0.0 for h in text], params.fulltext_weight),
    )
    for hits, raw, weight in sides:
        for hit, contribution in zip(hits, _side_contributions(hits, raw, params), strict=True):
            item = merged.setdefault(hit.memory_id, Scored(hit.memory_id))
            item.score += weight * contribution
            item.semantic = hit.semantic if hit.semantic is not None else item.semantic
            item.fulltext = hit.fulltext if hit.fulltext is not None else item.fulltext
    if params.fusion == "rrf":  # scale to 0..1: the best possible RRF score is 1/(k+1)
        for item in merged.values():
            item.score *= params.rrf_k + 1
    return sorted(merged.values(), key=lambda s: s.score, reverse=True)


def apply_priors(items: list[Scored], params: HybridParams) -> list[Scored]:
    """T0 boost and importance as bounded multipliers (documented in docs/retrieval.md)."""
    for item in items:
        memory = item.memory
        if memory is None:
            continue
        factor = 1.0 + params.importance_weight * (memory.importance - 0.5)
        if memory.retention_tier == "T0":
            factor *= 1.0 + params.t0_boost
        item.score = float(min(1.0, item.score * factor))
    return sorted(items, key=lambda s: s.score, reverse=True)


# --- loading and shaping -------------------------------------------------------------------


def _remote(missing: list[str], namespace: str) -> dict[uuid.UUID, Memory]:
    """Memories another device wrote to a shared index (Qdrant) and this store lacks: built
    from the index's payload (unsaved), as the original does, instead of being dropped."""
    index = get_vector_index() if missing else None
    if index is None or not index.shared:
        return {}
    try:
        return {m.id: m for m in index.remote_memories(missing, namespace)}
    except Exception:  # noqa: BLE001 - the local results stand on their own
        logger.exception("could not read payloads of %d remote memories", len(missing))
        return {}


def _searchable(ids: Iterable[str], *, namespace: str, now: datetime, scope: TimeScope) -> dict[str, Memory]:
    """The rows of these ids a search in ``scope`` may return, re-checked on the DB side:
    namespace, archive, expiry; current facts only by default, the versions valid then ``as_of``."""
    wanted = list(dict.fromkeys(ids))
    rows = memories_by_id([uuid.UUID(i) for i in wanted])
    rows.update(_remote([i for i in wanted if uuid.UUID(i) not in rows], namespace))
    kept = {}
    for memory_id in wanted:
        memory = rows.get(uuid.UUID(memory_id))
        if memory is None or memory.archived or memory.namespace != namespace:
            continue
        if memory.decay_eligible and memory.expires_at is not None and memory.expires_at <= now:
            continue
        if scope.as_of is not None and not valid_at(memory, scope.as_of):
            continue
        if scope.default and memory.superseded_by is not None:
            continue  # an index that has not caught up with the supersede yet
        kept[memory_id] = memory
    return kept


def _attach(items: list[Scored], *, namespace: str, now: datetime, scope: TimeScope = CURRENT) -> list[Scored]:
    """Load the rows of the items a search may return; the others are left out."""
    rows = _searchable([i.memory_id for i in items], namespace=namespace, now=now, scope=scope)
    kept = []
    for item in items:
        memory = rows.get(item.memory_id)
        if memory is not None:
            item.memory = memory
            kept.append(item)
    return kept


def result_dict(item: Scored, *, now: datetime) -> dict[str, Any]:
    """The seed's recall/search result, plus fulltext_score, device_id, namespace, collection."""
    memory = item.memory
    assert memory is not None
    return {
        "id": str(memory.id),
        "namespace": memory.namespace,
        "collection": memory.collection,
        "content": memory.content,
        "summary": memory.summary,
        "type": memory.type,
        "tags": list(memory.tags),
        "category": memory.category,
        "importance": memory.importance,
        "score": round(item.score, 6),
        "semantic_score": None if item.semantic is None else round(item.semantic, 6),
        "fulltext_score": None if item.fulltext is None else round(item.fulltext, 6),
        "retention_tier": memory.retention_tier,
        "expires_at": iso(memory.expires_at),
        "expiring_soon": expiring_soon(memory, now),
        "created_at": iso(memory.created_at),
        "last_accessed": iso(memory.last_accessed),
        "device_id": memory.device_id,
        **_conversation_dict(memory, now),
        **{name: iso(value) if isinstance(value, datetime) else value
           for name, value in temporal_fields(memory).items()},
    }


def _conversation_dict(memory: Memory, now: datetime) -> dict[str, Any]:
    """A message's thread fields and an event's, only when the memory has them."""
    out: dict[str, Any] = {}
    if memory.thread:
        out.update(thread=memory.thread, speaker=memory.speaker, occurred_at=iso(memory.occurred_at),
                   message_id=memory.message_id)
    if memory.status or memory.event_at or memory.valid_until:
        out.update(status=memory.status, event_at=iso(memory.event_at), valid_until=iso(memory.valid_until),
                   inactive=inactive_reason(memory, now))
    return out


def neighbouring_turns(memory: Memory, count: int) -> dict[str, list[dict[str, Any]]]:
    """The ``count`` turns before and after a message of a thread (speaker, time, content)."""
    return {"before": [turn_to_dict(t) for t in turns_before(memory, count)],
            "after": [turn_to_dict(t) for t in turns_after(memory, count)]}


# --- facts over time: both partitions, filtered by validity before fusion -----------------------

TEMPORAL_ROUNDS = 4  # a search in the past deepens its candidate lists (×4) at most this many times


def _partition_sides(query: str, *, mode: Mode, namespace: str, collection: str | None, limit: int,
                     now: datetime) -> tuple[list[Scored], list[tuple[str, float]]]:
    """The semantic hits (calibrated) and the raw BM25 hits of the namespace's current *and*
    superseded partitions, one pass each (BM25 with the two partitions' joint statistics), best
    first (semantic empty without an embedder, unless ``mode`` is semantic: then EmbeddingUnavailable).
    As in a default hybrid search (``_embedded_sides``), the query is embedded first, then the
    vector search runs on a side thread while this one scores the full-text side."""
    text_side = functools.partial(_bm25_hits, query, namespace=namespace, collection=collection, limit=limit, now=now,
                                  versions="all")
    if mode == "fulltext":
        return [], text_side()
    try:
        pending = start_semantic(query)
        pending.ready()
    except EmbeddingUnavailable:
        if mode == "semantic":
            raise
        return [], text_side()
    semantic_side = functools.partial(pending, namespace=namespace, collection=collection, limit=limit, now=now,
                                      versions="all")
    if mode == "semantic":
        return semantic_side(), []  # EmbeddingUnavailable reaches the caller
    return _sides_at_once(semantic_side, text_side)


def _temporal_round(query: str, *, mode: Mode, namespace: str, collection: str | None, depth: int, now: datetime,
                    scope: TimeScope, params: HybridParams) -> tuple[list[Scored], bool]:
    """One round of a search in ``scope``: the candidates of both partitions that the scope keeps,
    fused (or one side), rows attached; and whether a deeper round could find more."""
    semantic, text = _partition_sides(query, mode=mode, namespace=namespace, collection=collection, limit=depth, now=now)
    full = len(semantic) >= depth or len(text) >= depth  # a side was cut at ``depth``: a deeper round may find more
    rows = _searchable([s.memory_id for s in semantic] + [m for m, _ in text], namespace=namespace, now=now, scope=scope)
    semantic = [s for s in semantic if s.memory_id in rows]
    text_kept = _text_scored([hit for hit in text if hit[0] in rows])
    if mode == "semantic":
        ranked = semantic
    elif mode == "fulltext":
        ranked = text_kept
    else:
        ranked = fuse(semantic, text_kept, params)
    for item in ranked:
        item.memory = rows[item.memory_id]
    if mode == "hybrid":
        ranked = apply_priors(ranked, params)
    return ranked, full


def _temporal_search(query: str, *, mode: Mode, namespace: str, collection: str | None, limit: int, now: datetime,
                     scope: TimeScope, params: HybridParams) -> list[Scored]:
    """search with ``as_of`` and/or ``include_history``: deepened until ``limit`` candidates pass."""
    depth = max(params.depth, limit) if mode == "hybrid" else limit
    for _ in range(TEMPORAL_ROUNDS):
        ranked, deeper = _temporal_round(query, mode=mode, namespace=namespace, collection=collection, depth=depth,
                                         now=now, scope=scope, params=params)
        if len(ranked) >= limit or not deeper:
            break
        depth *= 4
    return _in_scope(ranked, namespace=namespace, scope=scope, limit=limit)


def _in_scope(ranked: list[Scored], *, namespace: str, scope: TimeScope, limit: int) -> list[Scored]:
    """The ``limit`` best, each followed by its older versions when the scope includes history."""
    if scope.include_history:
        return with_history(ranked, namespace=namespace, as_of=scope.as_of, limit=limit)
    return _newer(ranked)[:limit]


def _newer(items: list[Scored]) -> list[Scored]:
    """Later restatements first (search/temporal.py), unless ``search.later_restatements_first`` is off."""
    embedder = get_embedder()
    if embedder is None or not settings.BHGBRAIN.search.later_restatements_first:
        return items
    return newer_first(items, curve=embedder.curve)


# --- public selectors ----------------------------------------------------------------------


def memories_search(
    *, query: str, namespace: str, collection: str | None, mode: Mode, limit: int,
    params: HybridParams | None = None, now: datetime | None = None, scope: TimeScope = CURRENT,
) -> list[Scored]:
    """search: semantic | fulltext | hybrid; hybrid falls back to full-text without an embedder.
    Current facts only, unless ``scope`` asks for the versions valid ``as_of`` a time or for each
    result's history (search/temporal.py)."""
    now = now or timezone.now()
    params = params or default_params()
    if not scope.default:
        return _temporal_search(query, mode=mode, namespace=namespace, collection=collection, limit=limit, now=now,
                                scope=scope, params=params)
    if mode == "fulltext":
        items = fulltext_hits(query, namespace=namespace, collection=collection, limit=limit, now=now)
        return _attach(items, namespace=namespace, now=now)[:limit]
    if mode == "semantic":
        items = semantic_hits(query, namespace=namespace, collection=collection, limit=limit, now=now)
        return _newer(_attach(items, namespace=namespace, now=now))[:limit]
    depth = max(params.depth, limit)
    semantic, text = _both_sides(query, namespace=namespace, collection=collection, limit=depth, now=now)
    fused = _attach(fuse(semantic, text, params), namespace=namespace, now=now)
    return _newer(apply_priors(fused, params))[:limit]


def _matches(memory: Memory, memory_type: str | None, tags: Iterable[str] | None) -> bool:
    if memory_type and memory.type != memory_type:
        return False
    return not tags or bool(set(tags) & set(memory.tags))


def _semantic_round(query: str, *, namespace: str, collection: str | None, depth: int, now: datetime,
                    scope: TimeScope) -> list[Scored]:
    """recall's candidates: the current partition's, or (a scope beyond current facts) both partitions'."""
    if scope.default:
        return semantic_hits(query, namespace=namespace, collection=collection, limit=depth, now=now)
    return _partition_sides(query, mode="semantic", namespace=namespace, collection=collection, limit=depth, now=now)[0]


def memories_recall(
    *, query: str, namespace: str, collection: str | None, memory_type: str | None,
    tags: list[str] | None, limit: int, min_score: float, now: datetime | None = None,
    include_inactive: bool = False, scope: TimeScope = CURRENT,
) -> list[Scored]:
    """Semantic recall gated by min_score; type/tags filters go deeper until limit is met.
    Cancelled events and plans whose time has passed are left out unless ``include_inactive``.
    Current facts only, unless ``scope`` asks for another time or for history."""
    now = now or timezone.now()
    depth = max(limit * 4, 20)
    while True:
        hits = _semantic_round(query, namespace=namespace, collection=collection, depth=depth, now=now, scope=scope)
        passing = [h for h in hits if (h.semantic or 0.0) >= min_score]
        chosen = [h for h in _attach(passing, namespace=namespace, now=now, scope=scope)
                  if _matches(h.memory, memory_type, tags) and (include_inactive or inactive_reason(h.memory, now) is None)]
        exhausted = len(hits) < depth or len(passing) < len(hits)
        if len(chosen) >= limit or exhausted:
            return _in_scope(chosen, namespace=namespace, scope=scope, limit=limit)
        depth *= 4
