"""Drop full-text columns nothing ever read: FTS5 ``summary``/``scope`` (SQLite) and the
``ntokens``/``document`` tsvector with its GIN index (PostgreSQL). Queries are answered by the
in-process BM25 index from ``content``/``tags`` (SQLite) and ``tokens`` (PostgreSQL)."""
from __future__ import annotations

from django.db import migrations

TOKENIZE = "tokenize = 'unicode61 remove_diacritics 2'"


def forward(apps, schema_editor) -> None:  # noqa: ANN001 - Django migration API
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute(f"CREATE VIRTUAL TABLE memories_fts_new USING fts5(content, tags, memory_id UNINDEXED, {TOKENIZE})")
        schema_editor.execute("INSERT INTO memories_fts_new (rowid, content, tags, memory_id) "
                              "SELECT rowid, content, tags, memory_id FROM memories_fts")
        schema_editor.execute("DROP TABLE memories_fts")
        schema_editor.execute("ALTER TABLE memories_fts_new RENAME TO memories_fts")
    else:
        schema_editor.execute("ALTER TABLE memory_search DROP COLUMN IF EXISTS document, DROP COLUMN IF EXISTS ntokens")


def backward(apps, schema_editor) -> None:  # noqa: ANN001
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute("CREATE VIRTUAL TABLE memories_fts_old USING fts5("
                              f"content, summary, tags, scope, memory_id UNINDEXED, {TOKENIZE})")
        schema_editor.execute("INSERT INTO memories_fts_old (rowid, content, summary, tags, scope, memory_id) "
                              "SELECT rowid, content, '', tags, '', memory_id FROM memories_fts")
        schema_editor.execute("DROP TABLE memories_fts")
        schema_editor.execute("ALTER TABLE memories_fts_old RENAME TO memories_fts")
    else:
        schema_editor.execute("ALTER TABLE memory_search ADD COLUMN ntokens integer NOT NULL DEFAULT 0, "
                              "ADD COLUMN document tsvector NOT NULL DEFAULT ''::tsvector")
        schema_editor.execute("CREATE INDEX IF NOT EXISTS memory_search_document_gin ON memory_search USING GIN (document)")


class Migration(migrations.Migration):
    dependencies = [("search", "0001_fulltext")]
    operations = [migrations.RunPython(forward, backward)]
