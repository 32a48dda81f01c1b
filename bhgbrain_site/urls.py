from __future__ import annotations

from django.contrib import admin
from django.urls import path

from bhgbrain_site import http

urlpatterns = [
    path("health", http.health, name="health"),
    path("tool/<str:name>", http.tool_call, name="tool"),
    path("resource", http.resource, name="resource"),
    path("metrics", http.metrics_view, name="metrics"),
    path("admin/", admin.site.urls),
]
