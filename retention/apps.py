from __future__ import annotations

from django.apps import AppConfig


class RetentionConfig(AppConfig):
    name = "retention"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from memories.curation.console import lend
        from memories.quotas.admission import register_trimmer
        from retention.archive import memory_archive
        from retention.chains import archived_versions
        from retention.cleanup import namespace_trim

        lend(archive=memory_archive)  # the memory list's "Archive now" and the review queue's "Archive"
        lend(archived_versions=archived_versions)  # a fact's timeline shows its archived versions
        register_trimmer(namespace_trim)  # a namespace quota's policy "trim": the cleanup's trim, one namespace
