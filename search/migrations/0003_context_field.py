"""A context field beside each memory's analyzed text: for a threaded memory, its neighbouring
turns and the date it was said (memories/conversations.py); empty for plain memories."""
from __future__ import annotations

from django.db import migrations

TOKENIZE = "tokenize = 'unicode61 remove_diacritics 2'"


def forward(apps, schema_editor) -> None:  # noqa: ANN001 - Django migration API
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute("CREATE VIRTUAL TABLE memories_fts_new USING fts5("
                              f"content, tags, context, memory_id UNINDEXED, {TOKENIZE})")
        schema_editor.execute("INSERT INTO memories_fts_new (rowid, content, tags, context, memory_id) "
                              "SELECT rowid, content, tags, '', memory_id FROM memories_fts")
        schema_editor.execute("DROP TABLE memories_fts")
        schema_editor.execute("ALTER TABLE memories_fts_new RENAME TO memories_fts")
    else:
        schema_editor.execute("ALTER TABLE memory_search ADD COLUMN IF NOT EXISTS context_tokens text[] NOT NULL DEFAULT '{}'")


def backward(apps, schema_editor) -> None:  # noqa: ANN001
    if schema_editor.connection.vendor == "sqlite":
        schema_editor.execute(f"CREATE VIRTUAL TABLE memories_fts_new USING fts5(content, tags, memory_id UNINDEXED, {TOKENIZE})")
        schema_editor.execute("INSERT INTO memories_fts_new (rowid, content, tags, memory_id) "
                              "SELECT rowid, content, tags, memory_id FROM memories_fts")
        schema_editor.execute("DROP TABLE memories_fts")
        schema_editor.execute("ALTER TABLE memories_fts_new RENAME TO memories_fts")
    else:
        schema_editor.execute("ALTER TABLE memory_search DROP COLUMN IF EXISTS context_tokens")


class Migration(migrations.Migration):
    dependencies = [("search", "0002_drop_write_only_columns")]
    operations = [migrations.RunPython(forward, backward)]
