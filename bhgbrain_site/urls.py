from __future__ import annotations

from django.contrib import admin
from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from bhgbrain_site import http
from categories import api as categories_api
from memories import api as memories_api
from search import api as search_api

api = [
    path("api/memories/", memories_api.MemoryListView.as_view(), name="api-memories"),
    path("api/memories/<str:memory_id>/", memories_api.MemoryDetailView.as_view(), name="api-memory"),
    path("api/memories/<str:memory_id>/tags/", memories_api.MemoryTagsView.as_view(), name="api-memory-tags"),
    path("api/collections/", memories_api.CollectionListView.as_view(), name="api-collections"),
    path("api/collections/<str:name>/", memories_api.CollectionDetailView.as_view(), name="api-collection"),
    path("api/audit/", memories_api.AuditListView.as_view(), name="api-audit"),
    path("api/archive/", memories_api.ArchiveListView.as_view(), name="api-archive"),
    path("api/archive/<str:memory_id>/restore/", memories_api.ArchiveRestoreView.as_view(), name="api-archive-restore"),
    path("api/backups/", memories_api.BackupListView.as_view(), name="api-backups"),
    path("api/backups/restore/", memories_api.BackupRestoreView.as_view(), name="api-backups-restore"),
    path("api/search/", search_api.SearchView.as_view(), name="api-search"),
    path("api/recall/", search_api.RecallView.as_view(), name="api-recall"),
    path("api/categories/", categories_api.CategoryListView.as_view(), name="api-categories"),
    path("api/categories/<str:name>/", categories_api.CategoryDetailView.as_view(), name="api-category"),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
]

urlpatterns = [
    path("health", http.health, name="health"),
    path("tool/<str:name>", http.tool_call, name="tool"),
    path("resource", http.resource, name="resource"),
    path("metrics", http.metrics_view, name="metrics"),
    *api,
    path("admin/", admin.site.urls),
]

handler404 = "bhgbrain_site.http.not_found"
handler500 = "bhgbrain_site.http.server_error"
