from __future__ import annotations

from django.apps import AppConfig


class CategoriesConfig(AppConfig):
    name = "categories"
    default_auto_field = "django.db.models.BigAutoField"
