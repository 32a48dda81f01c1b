"""REST API: policy categories (the category tool)."""
from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from bhgbrain_site.api import call_context
from bhgbrain_site.api import json_object as _body
from bhgbrain_site.api import namespace_arg as _ns
from mcp_bridge.registry import call_tool
from mcp_bridge.tools import CategoryParams

NAMESPACE = OpenApiParameter("namespace", str)


class CategoryListView(APIView):
    @extend_schema(parameters=[NAMESPACE], responses=OpenApiTypes.OBJECT, operation_id="categories_list")
    def get(self, request: Request) -> Response:
        return Response(call_tool("category", {"action": "list", **_ns(request)}, call_context(request)))

    @extend_schema(request=CategoryParams, responses=OpenApiTypes.OBJECT)
    def post(self, request: Request) -> Response:
        """Create or update a category ({"name", "slot", "content", "namespace"})."""
        return Response(call_tool("category", {**_body(request), "action": "set"}, call_context(request)))


class CategoryDetailView(APIView):
    @extend_schema(parameters=[NAMESPACE], responses=OpenApiTypes.OBJECT)
    def get(self, request: Request, name: str) -> Response:
        return Response(call_tool("category", {"action": "get", "name": name, **_ns(request)}, call_context(request)))

    @extend_schema(parameters=[NAMESPACE], responses=OpenApiTypes.OBJECT)
    def delete(self, request: Request, name: str) -> Response:
        return Response(call_tool("category", {"action": "delete", "name": name, **_ns(request)}, call_context(request)))
