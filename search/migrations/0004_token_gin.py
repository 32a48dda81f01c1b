"""PostgreSQL: GIN indexes on ``memory_search``'s token arrays, so the database full-text that
answers while the in-process text index is rebuilt (search/fulltext_db.py) finds a term's rows
through an index instead of scanning the table (a sequential scan grows past 2 s at a million
rows). Built ``CONCURRENTLY``: an existing store keeps taking writes meanwhile. SQLite: nothing
(its FTS5 table is the index)."""
from __future__ import annotations

from django.db import migrations

INDEXES = {"memory_search_tokens_gin": "tokens", "memory_search_context_tokens_gin": "context_tokens"}


def forward(apps, schema_editor) -> None:  # noqa: ANN001 - Django migration API
    if schema_editor.connection.vendor != "postgresql":
        return
    for name, column in INDEXES.items():
        schema_editor.execute(f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON memory_search USING GIN ({column})")


def backward(apps, schema_editor) -> None:  # noqa: ANN001
    if schema_editor.connection.vendor != "postgresql":
        return
    for name in INDEXES:
        schema_editor.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")


class Migration(migrations.Migration):
    atomic = False  # CREATE INDEX CONCURRENTLY cannot run inside a transaction
    dependencies = [("search", "0003_context_field")]
    operations = [migrations.RunPython(forward, backward)]
