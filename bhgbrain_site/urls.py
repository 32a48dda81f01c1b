"""URLs: the plain HTTP endpoints, the REST API (one DRF router over every app's viewsets),
OpenAPI and Swagger UI, the admin."""
from __future__ import annotations

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView
from rest_framework.routers import SimpleRouter

from bhgbrain_site.server import views
from categories.api import CategoryViewSet
from memories.api import AuditViewSet, CollectionViewSet, MemoryViewSet, ThreadViewSet
from retention.api import ArchiveViewSet, BackupViewSet
from search.api import RecallViewSet, SearchViewSet

admin.autodiscover()  # done at start unless the process said it serves no admin (bhgbrain_site/admin_app.py)
admin.site.site_header = admin.site.site_title = "BHGBrain"
admin.site.index_title = "Dashboard"

router = SimpleRouter()
router.register("memories", MemoryViewSet, basename="memories")
router.register("collections", CollectionViewSet, basename="collections")
router.register("audit", AuditViewSet, basename="audit")
router.register("threads", ThreadViewSet, basename="threads")
router.register("archive", ArchiveViewSet, basename="archive")
router.register("backups", BackupViewSet, basename="backups")
router.register("search", SearchViewSet, basename="search")
router.register("recall", RecallViewSet, basename="recall")
router.register("categories", CategoryViewSet, basename="categories")

urlpatterns = [
    path("health", views.health, name="health"),
    path("tool/<str:name>", views.tool_call, name="tool"),
    path("resource", views.resource, name="resource"),
    path("metrics", views.metrics_view, name="metrics"),
    path("api/", include(router.urls)),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("admin/", admin.site.urls),
]

handler404 = "bhgbrain_site.server.views.not_found"
handler500 = "bhgbrain_site.server.views.server_error"
