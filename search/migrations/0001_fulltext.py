"""Full-text index tables: FTS5 on SQLite, tsvector + GIN on PostgreSQL; backfill existing rows."""
from __future__ import annotations

from django.db import migrations

SQLITE_CREATE = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS memories_fts USING fts5("
    "content, summary, tags, scope, memory_id UNINDEXED, tokenize = 'unicode61 remove_diacritics 2')"
)
PG_CREATE = [
    """CREATE TABLE IF NOT EXISTS memory_search (
        memory_id uuid PRIMARY KEY,
        tokens text[] NOT NULL,
        ntokens integer NOT NULL,
        document tsvector NOT NULL)""",
    "CREATE INDEX IF NOT EXISTS memory_search_document_gin ON memory_search USING GIN (document)",
]


def create(apps, schema_editor) -> None:  # noqa: ANN001
    statements = [SQLITE_CREATE] if schema_editor.connection.vendor == "sqlite" else PG_CREATE
    for sql in statements:
        schema_editor.execute(sql)
    Memory = apps.get_model("memories", "Memory")  # noqa: N806 - historical model
    for memory in Memory.objects.using(schema_editor.connection.alias).filter(archived=False).iterator():
        _backfill(schema_editor, memory)


def _backfill(schema_editor, memory) -> None:  # noqa: ANN001
    """This migration's own layout (0002 drops the columns never read); the analyzer is today's."""
    from memories.analyzer import analyze

    content = " ".join(analyze(memory.content))
    tags = " ".join(analyze(" ".join(t.replace("-", " ") for t in memory.tags)))
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute(
            "INSERT INTO memories_fts (rowid, content, summary, tags, scope, memory_id) VALUES (%s, %s, '', %s, '', %s)",
            [int.from_bytes(memory.id.bytes[:8], "big", signed=True), content, tags, memory.id.hex])
    else:
        tokens = content.split() + tags.split() * 2
        schema_editor.execute(
            "INSERT INTO memory_search (memory_id, tokens, ntokens, document) VALUES (%s, %s, %s, ''::tsvector)",
            [memory.id, tokens, len(tokens)])


def drop(apps, schema_editor) -> None:  # noqa: ANN001
    table = "memories_fts" if schema_editor.connection.vendor == "sqlite" else "memory_search"
    schema_editor.execute(f"DROP TABLE IF EXISTS {table}")


class Migration(migrations.Migration):
    dependencies = [("memories", "0001_initial")]
    operations = [migrations.RunPython(create, drop)]
