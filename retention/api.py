"""REST: the archive and backups (DRF viewsets over the operation registry)."""
from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, inline_serializer
from rest_framework import serializers
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from bhgbrain_site.core.contracts import PATH_MAX, TIERS
from bhgbrain_site.rest import OperationViewSet
from retention.outputs import BackupList, BackupRestored, BackupView

NAMESPACE = OpenApiParameter("namespace", str, description="namespace (default: the configured one)")
MEMORY_ID = OpenApiParameter("memory_id", str, OpenApiParameter.PATH, description="the archived memory's id")
ArchiveRestoreBody = inline_serializer("ArchiveRestore", {"tier": serializers.ChoiceField(list(TIERS), required=False)})
BackupRestoreBody = inline_serializer("BackupRestore", {"path": serializers.CharField(max_length=PATH_MAX)})


class ArchiveViewSet(OperationViewSet):
    lookup_url_kwarg = "memory_id"
    lookup_value_regex = "[^/]+"

    @extend_schema(parameters=[NAMESPACE, OpenApiParameter("q", str, description="words to look for"),
                               OpenApiParameter("limit", int, description="1–100 (default 20)")],
                   responses=OpenApiTypes.OBJECT, operation_id="archive_list")
    def list(self, request: Request) -> Response:
        """Memories the retention cleanup archived in a namespace, newest first (or best match for q)."""
        return self.run("archive.list", self.query("namespace", "limit", query="q"), coerce=True)

    @extend_schema(parameters=[MEMORY_ID, NAMESPACE], request=ArchiveRestoreBody, responses=OpenApiTypes.OBJECT,
                   operation_id="archive_restore")
    @action(detail=True, methods=["post"])
    def restore(self, request: Request, memory_id: str) -> Response:
        """Restore an archived memory (same id; T2 unless {"tier": ...})."""
        return self.run("archive.restore", {**self.body(), **self.query("namespace"), "id": memory_id})


class BackupViewSet(OperationViewSet):
    @extend_schema(responses=BackupList, operation_id="backups_list")
    def list(self, request: Request) -> Response:
        """Known backups, newest first (master token only)."""
        return self.run("backup", {"action": "list"})

    @extend_schema(request=None, responses={201: BackupView})
    def create(self, request: Request) -> Response:
        """Create a backup of the whole store (master token only)."""
        return self.run("backup", {"action": "create"}, status=201)

    @extend_schema(request=BackupRestoreBody, responses=BackupRestored, operation_id="backups_restore")
    @action(detail=False, methods=["post"])
    def restore(self, request: Request) -> Response:
        """Replace the store with a backup from <data_dir>/backups ({"path": ...}; master token only)."""
        return self.run("backup", {**self.body(), "action": "restore"})
