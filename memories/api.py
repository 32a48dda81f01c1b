"""REST API for memories, collections and the audit log: thin views over the tool registry."""
from __future__ import annotations


from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from bhgbrain_site.api import call_context
from bhgbrain_site.api import json_object as _body
from bhgbrain_site.api import namespace_arg as _ns
from bhgbrain_site.errors import InvalidInput
from mcp_bridge.registry import CallContext, call_tool
from mcp_bridge.resources import read_resource
from mcp_bridge.tools import CollectionsParams, RememberParams, TagParams

NAMESPACE = OpenApiParameter("namespace", str, description="namespace (default: the configured one)")
CURSOR = OpenApiParameter("cursor", str, description="cursor from the previous page (created_at|id)")
LIMIT = OpenApiParameter("limit", int, description="page size 1–100 (default 20)")


class MemoryListView(APIView):
    @extend_schema(parameters=[NAMESPACE, CURSOR, LIMIT, OpenApiParameter("type", str), OpenApiParameter("tier", str),
                               OpenApiParameter("tag", str)], responses=OpenApiTypes.OBJECT, operation_id="memories_list")
    def get(self, request: Request) -> Response:
        """Memories, newest first, keyset-paginated; filters: type, tier, tag."""
        from memories.selectors import memories_page

        namespace, _ = _scoped_namespace(request, writes=False)
        params = request.query_params
        return Response(memories_page(namespace=namespace, limit=_limit(request, default=20, maximum=100), cursor=params.get("cursor"),
                                      memory_type=params.get("type"), tier=params.get("tier"), tag=params.get("tag")))

    @extend_schema(request=RememberParams, responses=OpenApiTypes.OBJECT)
    def post(self, request: Request) -> Response:
        """Remember (the remember tool): 201 for ADD, 200 for UPDATE/NOOP."""
        result = call_tool("remember", _body(request), call_context(request))
        return Response(result, status=201 if result["operation"] == "ADD" else 200)


def _default_namespace() -> str:
    from django.conf import settings

    return settings.BHGBRAIN.defaults.namespace


def _scoped_namespace(request: Request, *, writes: bool) -> tuple[str, CallContext]:
    """The ?namespace= (or the caller's default), checked against the caller's token."""
    ctx = call_context(request)
    namespace = request.query_params.get("namespace") or ctx.principal.default_namespace(_default_namespace())
    ctx.principal.check(namespace, writes=writes)
    return namespace, ctx


def _limit(request: Request, *, default: int, maximum: int) -> int:
    limit = request.query_params.get("limit", str(default))
    if not limit.isdigit() or not 1 <= int(limit) <= maximum:
        raise InvalidInput(f"limit: must be an integer from 1 to {maximum}")
    return int(limit)


class MemoryDetailView(APIView):
    @extend_schema(parameters=[NAMESPACE], responses=OpenApiTypes.OBJECT)
    def get(self, request: Request, memory_id: str) -> Response:
        """One memory (counts as an access, like memory://{id})."""
        query = f"?namespace={request.query_params['namespace']}" if "namespace" in request.query_params else ""
        return Response(read_resource(f"memory://{memory_id}{query}", call_context(request)))

    @extend_schema(parameters=[NAMESPACE], responses=OpenApiTypes.OBJECT)
    def delete(self, request: Request, memory_id: str) -> Response:
        """Forget: permanently delete the memory."""
        return Response(call_tool("forget", {"id": memory_id, **_ns(request)}, call_context(request)))


class MemoryTagsView(APIView):
    @extend_schema(request=TagParams, responses=OpenApiTypes.OBJECT)
    def post(self, request: Request, memory_id: str) -> Response:
        """Add/remove tags ({"add": [...], "remove": [...]})."""
        return Response(call_tool("tag", {**_body(request), "id": memory_id}, call_context(request)))


class CollectionListView(APIView):
    @extend_schema(parameters=[NAMESPACE], responses=OpenApiTypes.OBJECT, operation_id="collections_list")
    def get(self, request: Request) -> Response:
        return Response(call_tool("collections", {"action": "list", **_ns(request)}, call_context(request)))

    @extend_schema(request=CollectionsParams, responses=OpenApiTypes.OBJECT)
    def post(self, request: Request) -> Response:
        """Create a collection ({"name": ..., "namespace": ...})."""
        return Response(call_tool("collections", {**_body(request), "action": "create"}, call_context(request)), status=201)


class CollectionDetailView(APIView):
    @extend_schema(parameters=[NAMESPACE, CURSOR, LIMIT], responses=OpenApiTypes.OBJECT)
    def get(self, request: Request, name: str) -> Response:
        from urllib.parse import urlencode

        query = urlencode({k: v for k, v in request.query_params.items() if k in ("namespace", "cursor", "limit")})
        return Response(read_resource(f"collection://{name}?{query}", call_context(request)))

    @extend_schema(parameters=[NAMESPACE, OpenApiParameter("force", bool)], responses=OpenApiTypes.OBJECT)
    def delete(self, request: Request, name: str) -> Response:
        force = request.query_params.get("force", "false").lower() in ("1", "true", "yes")
        return Response(call_tool("collections", {"action": "delete", "name": name, "force": force, **_ns(request)},
                                  call_context(request)))


class AuditListView(APIView):
    @extend_schema(parameters=[NAMESPACE, LIMIT, OpenApiParameter("operation", str), OpenApiParameter("memory_id", str)],
                   responses=OpenApiTypes.OBJECT)
    def get(self, request: Request) -> Response:
        """Recent audit entries of a namespace, newest first."""
        from memories.selectors import audit_entries

        namespace, _ = _scoped_namespace(request, writes=False)
        return Response({"entries": audit_entries(namespace=namespace, limit=_limit(request, default=50, maximum=500),
                                                  operation=request.query_params.get("operation"),
                                                  memory_id=request.query_params.get("memory_id"))})


class BackupListView(APIView):
    @extend_schema(responses=OpenApiTypes.OBJECT, operation_id="backups_list")
    def get(self, request: Request) -> Response:
        """Known backups, newest first (master token only)."""
        return Response(call_tool("backup", {"action": "list"}, call_context(request)))

    @extend_schema(request=None, responses={201: OpenApiTypes.OBJECT}, operation_id="backups_create")
    def post(self, request: Request) -> Response:
        """Create a backup of the whole store (master token only)."""
        return Response(call_tool("backup", {"action": "create"}, call_context(request)), status=201)


BackupRestoreBody = inline_serializer("BackupRestore", {"path": serializers.CharField(max_length=4096)})


class BackupRestoreView(APIView):
    @extend_schema(request=BackupRestoreBody, responses=OpenApiTypes.OBJECT, operation_id="backups_restore")
    def post(self, request: Request) -> Response:
        """Replace the store with a backup from <data_dir>/backups ({"path": ...}; master token only)."""
        body = _body(request)
        return Response(call_tool("backup", {**body, "action": "restore"}, call_context(request)))


class ArchiveListView(APIView):
    @extend_schema(parameters=[NAMESPACE, OpenApiParameter("q", str, description="words to look for"),
                               OpenApiParameter("limit", int, description="1–100 (default 20)")],
                   responses=OpenApiTypes.OBJECT, operation_id="archive_list")
    def get(self, request: Request) -> Response:
        """Memories the retention cleanup archived in a namespace, newest first (or best match for q)."""
        from retention.archive import archive_entries

        namespace, _ = _scoped_namespace(request, writes=False)
        limit = _limit(request, default=20, maximum=100)
        query = (request.query_params.get("q") or "").strip()
        if len(query) > 500:
            raise InvalidInput("q: at most 500 characters")
        return Response({"entries": archive_entries(namespace=namespace, query=query or None, limit=limit)})


ArchiveRestoreBody = inline_serializer("ArchiveRestore", {"tier": serializers.ChoiceField(["T0", "T1", "T2", "T3"], required=False)})


class ArchiveRestoreView(APIView):
    @extend_schema(parameters=[NAMESPACE], request=ArchiveRestoreBody, responses=OpenApiTypes.OBJECT,
                   operation_id="archive_restore")
    def post(self, request: Request, memory_id: str) -> Response:
        """Restore an archived memory (same id; T2 unless {"tier": ...})."""
        from retention.archive import archive_restore

        namespace, ctx = _scoped_namespace(request, writes=True)
        body = _body(request) if request.body else {}
        unknown = set(body) - {"tier"}
        if unknown:
            raise InvalidInput(f"Invalid input: unknown field(s) {', '.join(sorted(map(str, unknown)))[:200]}")
        tier = body.get("tier", "T2")
        if not isinstance(tier, str):
            raise InvalidInput("tier: must be T0, T1, T2 or T3")
        return Response(archive_restore(memory_id=memory_id, namespace=namespace, actor=ctx.actor, tier=tier))
