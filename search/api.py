"""REST API: search and recall (the same tools as MCP)."""
from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from bhgbrain_site.api import call_context
from bhgbrain_site.api import json_object as _body
from mcp_bridge.registry import call_tool
from mcp_bridge.tools import RecallParams, SearchParams


class SearchView(APIView):
    @extend_schema(request=SearchParams, responses=OpenApiTypes.OBJECT)
    def post(self, request: Request) -> Response:
        """Hybrid (default), fulltext or semantic search."""
        return Response(call_tool("search", _body(request), call_context(request)))


class RecallView(APIView):
    @extend_schema(request=RecallParams, responses=OpenApiTypes.OBJECT)
    def post(self, request: Request) -> Response:
        """Semantic recall gated by min_score."""
        return Response(call_tool("recall", _body(request), call_context(request)))
