from __future__ import annotations

from django.apps import AppConfig


class RetentionConfig(AppConfig):
    name = "retention"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from memories.curation.console import lend
        from retention.archive import memory_archive

        lend(archive=memory_archive)  # the memory list's "Archive now" and the review queue's "Archive"
