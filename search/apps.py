from __future__ import annotations

from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _drop_orphans(sender: AppConfig, using: str = "default", **kwargs: object) -> None:
    """`flush` (and test teardown) empties Django's tables, then emits post_migrate:
    drop index rows whose memory is gone, so the full-text index never outlives its data."""
    from django.db import connections

    connection = connections[using]
    table = "memories_fts" if connection.vendor == "sqlite" else "memory_search"
    if table not in connection.introspection.table_names():
        return
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {table} WHERE memory_id NOT IN (SELECT id FROM memories)")  # noqa: S608


class SearchConfig(AppConfig):
    name = "search"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.apps import apps

        from memories.curation.console import lend
        from memories.funnel import register_indexer
        from search.console import memory_ids_ranked
        from search.fulltext import FullTextIndexer

        register_indexer(FullTextIndexer())  # the analyzed text follows every memory write
        lend(search=memory_ids_ranked)  # the memory list's search box runs the product's hybrid search
        # post_migrate is only sent for apps with models: hang on to the memories app's.
        post_migrate.connect(_drop_orphans, sender=apps.get_app_config("memories"))
