from __future__ import annotations

from django.apps import AppConfig


class MemoriesConfig(AppConfig):
    name = "memories"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.backends.signals import connection_created
        from django.db.models.signals import post_migrate

        from bhgbrain_site.core.log_format import register_secret_finder
        from bhgbrain_site.core.sqlite_upkeep import on_connection_created
        from memories.funnel import register_indexer
        from memories.indexes.tag_index import TagIndexer
        from memories.pipeline.normalize import find_secret

        connection_created.connect(on_connection_created, dispatch_uid="bhgbrain-wal-checkpoint")
        register_indexer(TagIndexer())  # tag completion reads the tags from an index
        register_secret_finder(find_secret)  # log messages shown to MCP clients never carry a credential
        post_migrate.connect(_usage_triggers_kept, sender=self, dispatch_uid="bhgbrain-usage-triggers")


def _usage_triggers_kept(using: str, **kwargs: object) -> None:
    """After every ``migrate``: the namespace usage triggers are there (SQLite drops a table's
    triggers when a migration rebuilds the table; they are created again and the counts redone)."""
    from django.db import connections

    from memories.quotas.usage import install_triggers

    connection = connections[using]
    if "namespace_usage" in connection.introspection.table_names():  # not after migrating back below 0015
        install_triggers(connection)
