"""REST: policy categories (the category tool, as a DRF viewset)."""
from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response

from bhgbrain_site.registry import input_model
from bhgbrain_site.rest import OperationViewSet
from categories.outputs import CategoryDeleted, CategoryList, CategoryView

NAMESPACE = OpenApiParameter("namespace", str, description="namespace (default: the configured one)")
NAME = OpenApiParameter("name", str, OpenApiParameter.PATH, description="the category's name")


class CategoryViewSet(OperationViewSet):
    lookup_url_kwarg = "name"
    lookup_value_regex = "[^/]+"  # names may hold dots

    @extend_schema(parameters=[NAMESPACE], responses=CategoryList, operation_id="categories_list")
    def list(self, request: Request) -> Response:
        """The categories of a namespace, with previews."""
        return self.run("category", {**self.query("namespace"), "action": "list"}, coerce=True)

    @extend_schema(request=input_model("category"), responses=CategoryView)
    def create(self, request: Request) -> Response:
        """Create or update a category ({"name", "slot", "content", "namespace"}): a new revision."""
        return self.run("category", {**self.body(), "action": "set"})

    @extend_schema(parameters=[NAME, NAMESPACE], responses=CategoryView)
    def retrieve(self, request: Request, name: str) -> Response:
        """One category with its full content."""
        return self.run("category", {**self.query("namespace"), "action": "get", "name": name}, coerce=True)

    @extend_schema(parameters=[NAME, NAMESPACE], responses={200: CategoryDeleted})
    def destroy(self, request: Request, name: str) -> Response:
        """Delete a category."""
        return self.run("category", {**self.query("namespace"), "action": "delete", "name": name}, coerce=True)
