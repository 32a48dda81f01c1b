"""A fact's key counts as a tag in its analyzed text (memories.indexes.sparse.labels): rewrite
the label tokens of the live memories that have a key. The in-process text index rebuilds from
these rows (its snapshot parameters name the new layout, so an older snapshot is not used)."""
from __future__ import annotations

from django.db import migrations


def _tokens(memory, with_key: bool) -> tuple[list[str], list[str]]:  # noqa: ANN001 - historical model
    """Today's analyzer, as search 0001 does: (content tokens, label tokens)."""
    from memories.indexes.sparse import field_tokens, labels

    content, tags, _context = field_tokens(memory.content, labels(memory.tags, memory.fact_key if with_key else None))
    return content, tags


def _rewrite(apps, schema_editor, with_key: bool) -> None:  # noqa: ANN001
    from memories.indexes.sparse import TAG_WEIGHT
    from search.bm25.text_index import fts_rowid

    Memory = apps.get_model("memories", "Memory")  # noqa: N806 - historical model
    rows = Memory.objects.using(schema_editor.connection.alias).filter(archived=False, fact_key__isnull=False)
    sqlite = schema_editor.connection.vendor == "sqlite"
    with schema_editor.connection.cursor() as cursor:
        for memory in rows.only("id", "content", "tags", "fact_key").iterator():
            content, tags = _tokens(memory, with_key)
            if sqlite:
                cursor.execute("UPDATE memories_fts SET tags = %s WHERE rowid = %s", [" ".join(tags), fts_rowid(memory.id)])
            else:
                cursor.execute("UPDATE memory_search SET tokens = %s WHERE memory_id = %s",
                               [content + tags * TAG_WEIGHT, memory.id])


def forward(apps, schema_editor) -> None:  # noqa: ANN001 - Django migration API
    _rewrite(apps, schema_editor, with_key=True)


def backward(apps, schema_editor) -> None:  # noqa: ANN001
    _rewrite(apps, schema_editor, with_key=False)


class Migration(migrations.Migration):
    dependencies = [("search", "0004_token_gin"), ("memories", "0017_memory_validity_and_fact_keys")]
    operations = [migrations.RunPython(forward, backward)]
