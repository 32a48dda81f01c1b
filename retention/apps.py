from __future__ import annotations

from django.apps import AppConfig


class RetentionConfig(AppConfig):
    name = "retention"
    default_auto_field = "django.db.models.BigAutoField"
