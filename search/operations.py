"""The search app's operations (tools recall and search; the inject block) and memory://inject."""
from __future__ import annotations

from typing import Any, Literal

from django.conf import settings
from pydantic import Field

from bhgbrain_site.contracts import MemoryTypeName
from bhgbrain_site.inputs import CollectionName, Input, Namespace, Query, Tags
from bhgbrain_site.registry import CallContext, operation, resource
from search import inject, services


class RecallParams(Input):
    query: Query
    namespace: Namespace | None = None
    collection: CollectionName | None = None
    type: MemoryTypeName | None = None
    tags: Tags | None = None
    limit: int | None = Field(default=None, ge=1, le=20)
    min_score: float | None = Field(default=None, ge=0.0, le=1.0)


@operation("recall", RecallParams)
def recall(params: RecallParams, ctx: CallContext) -> dict[str, Any]:
    """Recall the memories most relevant to a query by meaning (semantic search), across
    every collection of the namespace unless one is given. Only results whose calibrated
    similarity reaches min_score (default 0.6) are returned; optional type and tags
    (any-match) filters. Returned memories count as accessed (sliding expiry, promotion)."""
    defaults = settings.BHGBRAIN.defaults
    return services.recall_run(
        query=params.query, namespace=params.namespace or defaults.namespace, collection=params.collection,
        memory_type=params.type, tags=params.tags, limit=params.limit or defaults.recall_limit,
        min_score=defaults.min_score if params.min_score is None else params.min_score,
    )


class SearchParams(Input):
    query: Query
    namespace: Namespace | None = None
    collection: CollectionName | None = None
    mode: Literal["semantic", "fulltext", "hybrid"] = "hybrid"
    limit: int = Field(default=10, ge=1, le=50)


@operation("search", SearchParams)
def search(params: SearchParams, ctx: CallContext) -> dict[str, Any]:
    """Search memories by hybrid (default: BM25 full-text fused with semantic similarity),
    fulltext or semantic mode, up to 50 results, optionally within one collection. Works in
    any language (Chinese is segmented). Returned memories count as accessed."""
    return services.search_run(query=params.query, namespace=params.namespace or settings.BHGBRAIN.defaults.namespace,
                               collection=params.collection, mode=params.mode, limit=params.limit)


class InjectParams(Input):
    namespace: Namespace | None = None
    query: Query | None = None


@operation("search.inject", InjectParams, tool=False)
def inject_block(params: InjectParams, ctx: CallContext) -> dict[str, Any]:
    """The session inject block: categories first, then the most useful memories (for the
    query when one is given), within the configured budget; included memories count as accessed."""
    return inject.build_inject(namespace=params.namespace or settings.BHGBRAIN.defaults.namespace, query=params.query)


resource("memory://inject", "Session inject",
         "Budgeted context block: categories, then the most useful memories (?namespace=&query=)",
         operation="search.inject")
