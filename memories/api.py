"""REST: memories, collections and the audit log (DRF viewsets over the operation registry)."""
from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from bhgbrain_site.registry import input_model, output_model
from bhgbrain_site.rest import OperationViewSet
from memories.outputs import CollectionCreated, CollectionDeleted, CollectionList

NAMESPACE = OpenApiParameter("namespace", str, description="namespace (default: the configured one)")
CURSOR = OpenApiParameter("cursor", str, description="cursor from the previous page (created_at|id)")
LIMIT = OpenApiParameter("limit", int, description="page size 1–100 (default 20)")
MEMORY_ID = OpenApiParameter("memory_id", str, OpenApiParameter.PATH, description="the memory's id (a UUID)")
NAME = OpenApiParameter("name", str, OpenApiParameter.PATH, description="the collection's name")


class MemoryViewSet(OperationViewSet):
    embedding_actions = frozenset({"create"})  # remember
    lookup_url_kwarg = "memory_id"
    lookup_value_regex = "[^/]+"

    @extend_schema(parameters=[NAMESPACE, CURSOR, LIMIT, OpenApiParameter("type", str), OpenApiParameter("tier", str),
                               OpenApiParameter("tag", str)], responses=OpenApiTypes.OBJECT, operation_id="memories_list")
    def list(self, request: Request) -> Response:
        """Memories, newest first, keyset-paginated; filters: type, tier, tag."""
        return self.run("memories.list", self.query("namespace", "limit", "cursor", "type", "tier", "tag"), coerce=True)

    @extend_schema(request=input_model("remember"), responses={200: output_model("remember"), 201: output_model("remember")})
    def create(self, request: Request) -> Response:
        """Remember (the remember tool): 201 for ADD, 200 for UPDATE/NOOP."""
        response = self.run("remember", self.body())
        response.status_code = 201 if response.data["operation"] == "ADD" else 200
        return response

    @extend_schema(parameters=[MEMORY_ID, NAMESPACE], responses=OpenApiTypes.OBJECT)
    def retrieve(self, request: Request, memory_id: str) -> Response:
        """One memory (counts as an access, like memory://{id})."""
        return self.run("memories.get", {**self.query("namespace"), "id": memory_id}, coerce=True)

    @extend_schema(parameters=[MEMORY_ID, NAMESPACE], responses={200: output_model("forget")})
    def destroy(self, request: Request, memory_id: str) -> Response:
        """Forget: permanently delete the memory."""
        return self.run("forget", {**self.query("namespace"), "id": memory_id}, coerce=True)

    @extend_schema(parameters=[MEMORY_ID, NAMESPACE], responses={200: output_model("memories.history")},
                   operation_id="memories_history")
    @action(detail=True, methods=["get"])
    def history(self, request: Request, memory_id: str) -> Response:
        """The versions of the memory's fact, oldest first, with validity and who superseded them."""
        return self.run("memories.history", {**self.query("namespace"), "id": memory_id}, coerce=True)

    @extend_schema(parameters=[MEMORY_ID], request=input_model("tag"), responses=output_model("tag"))
    @action(detail=True, methods=["post"])
    def tags(self, request: Request, memory_id: str) -> Response:
        """Add/remove tags ({"add": [...], "remove": [...]})."""
        return self.run("tag", {**self.body(), "id": memory_id})


class CollectionViewSet(OperationViewSet):
    lookup_url_kwarg = "name"
    lookup_value_regex = "[^/]+"

    @extend_schema(parameters=[NAMESPACE], responses=CollectionList, operation_id="collections_list")
    def list(self, request: Request) -> Response:
        """The collections of a namespace with their memory counts."""
        return self.run("collections", {**self.query("namespace"), "action": "list"}, coerce=True)

    @extend_schema(request=input_model("collections"), responses={201: CollectionCreated})
    def create(self, request: Request) -> Response:
        """Create a collection ({"name": ..., "namespace": ...})."""
        return self.run("collections", {**self.body(), "action": "create"}, status=201)

    @extend_schema(parameters=[NAME, NAMESPACE, CURSOR, LIMIT], responses=OpenApiTypes.OBJECT)
    def retrieve(self, request: Request, name: str) -> Response:
        """The memories of one collection, newest first."""
        return self.run("collections.get", {**self.query("namespace", "cursor", "limit"), "name": name}, coerce=True)

    @extend_schema(parameters=[NAME, NAMESPACE, OpenApiParameter("force", bool)], responses={200: CollectionDeleted})
    def destroy(self, request: Request, name: str) -> Response:
        """Delete a collection (a non-empty one only with force=true: its memories go too)."""
        arguments = {**self.query("namespace", "force"), "action": "delete", "name": name}
        return self.run("collections", arguments, coerce=True)


class AuditViewSet(OperationViewSet):
    @extend_schema(parameters=[NAMESPACE, OpenApiParameter("limit", int, description="1–500 (default 50)"),
                               OpenApiParameter("operation", str), OpenApiParameter("memory_id", str)],
                   responses=OpenApiTypes.OBJECT, operation_id="audit_list")
    def list(self, request: Request) -> Response:
        """Recent audit entries of a namespace, newest first."""
        return self.run("audit.list", self.query("namespace", "limit", "operation", "memory_id"), coerce=True)


THREAD = OpenApiParameter("thread", str, OpenApiParameter.PATH, description="the thread's id (yours; no \"/\")")


class ThreadViewSet(OperationViewSet):
    embedding_actions = frozenset({"messages"})  # thread_append
    lookup_url_kwarg = "thread"
    lookup_value_regex = "[^/]+"

    @extend_schema(parameters=[NAMESPACE, OpenApiParameter("limit", int, description="1–100 (default 20)")],
                   responses=OpenApiTypes.OBJECT, operation_id="threads_list")
    def list(self, request: Request) -> Response:
        """The conversation threads of a namespace, most recently active first."""
        return self.run("threads.list", self.query("namespace", "limit"), coerce=True)

    @extend_schema(parameters=[THREAD, NAMESPACE, CURSOR, OpenApiParameter("limit", int, description="1–500 (default 100)")],
                   responses=OpenApiTypes.OBJECT, operation_id="threads_retrieve")
    def retrieve(self, request: Request, thread: str) -> Response:
        """A thread's transcript in conversation order."""
        return self.run("threads.get", {**self.query("namespace", "limit", "cursor"), "thread": thread}, coerce=True)

    @extend_schema(parameters=[THREAD], request=input_model("thread_append"),
                   responses={200: output_model("thread_append"), 201: output_model("thread_append")},
                   operation_id="threads_messages_create")
    @action(detail=True, methods=["post"])
    def messages(self, request: Request, thread: str) -> Response:
        """Append up to 500 messages ({"messages": [{"content", "speaker", "occurred_at", "message_id"}, …]})."""
        response = self.run("thread_append", {**self.body(), "thread": thread})
        response.status_code = 201 if response.data["added"] else 200
        return response
