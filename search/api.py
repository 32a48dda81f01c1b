"""REST: search and recall (the same tools as MCP, as DRF viewsets)."""
from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from bhgbrain_site.registry import input_model, output_model
from bhgbrain_site.rest import OperationViewSet


class SearchViewSet(OperationViewSet):
    reads_only = True

    @extend_schema(request=input_model("search"), responses=output_model("search"), operation_id="search_create")
    def create(self, request: Request) -> Response:
        """Hybrid (default), fulltext or semantic search."""
        return self.run("search", self.body())


class RecallViewSet(OperationViewSet):
    reads_only = True

    @extend_schema(request=input_model("recall"), responses=output_model("recall"), operation_id="recall_create")
    def create(self, request: Request) -> Response:
        """Semantic recall gated by min_score."""
        return self.run("recall", self.body())
