from __future__ import annotations

from django.apps import AppConfig


class MemoriesConfig(AppConfig):
    name = "memories"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.backends.signals import connection_created

        from bhgbrain_site.core.log_format import register_secret_finder
        from bhgbrain_site.core.sqlite_upkeep import on_connection_created
        from memories.funnel import register_indexer
        from memories.indexes.tag_index import TagIndexer
        from memories.pipeline.normalize import find_secret

        connection_created.connect(on_connection_created, dispatch_uid="bhgbrain-wal-checkpoint")
        register_indexer(TagIndexer())  # tag completion reads the tags from an index
        register_secret_finder(find_secret)  # log messages shown to MCP clients never carry a credential
