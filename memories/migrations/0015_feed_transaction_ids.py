"""Change-feed rows carry their transaction's id, so readers never skip a row that commits after
a later id (memories/indexes/feed_cursor.py).

PostgreSQL only: a ``tx xid8`` column filled by the database (``pg_current_xact_id()``), with an
index for the readers' "rows of these transactions" probe. The model does not declare it, so
Django never writes it. SQLite has one writer at a time: ids commit in order there, nothing to add.
The Qdrant sync's cursor keeps its pending transactions (``pending``) beside its position.
"""
from django.db import migrations, models

FORWARD = [
    "ALTER TABLE vector_changes ADD COLUMN tx xid8 NOT NULL DEFAULT pg_current_xact_id()",
    "CREATE INDEX vector_changes_tx ON vector_changes (tx)",
]
BACKWARD = ["DROP INDEX IF EXISTS vector_changes_tx", "ALTER TABLE vector_changes DROP COLUMN IF EXISTS tx"]


def _run(statements: list[str]):  # noqa: ANN202 - a RunPython callable
    def run(apps, schema_editor) -> None:  # noqa: ANN001, ARG001
        if schema_editor.connection.vendor != "postgresql":
            return
        for statement in statements:
            schema_editor.execute(statement)
    return run


class Migration(migrations.Migration):

    dependencies = [
        ("memories", "0014_rename_vectorchange_changefeedentry"),
    ]

    operations = [
        migrations.RunPython(_run(FORWARD), _run(BACKWARD)),
        migrations.AddField(
            model_name="vectorindexcursor",
            name="pending",
            field=models.JSONField(blank=True, default=list),
        ),
    ]
