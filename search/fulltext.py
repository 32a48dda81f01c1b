"""Full-text storage and BM25 search.

The database keeps each live memory's analyzed text (:func:`memories.analyzer.analyze`: CJK
segmented, stemmed, stopwords dropped) — SQLite in the FTS5 table ``memories_fts``
(content, tags, context), PostgreSQL in ``memory_search`` (a token array with the tags
repeated, and the context tokens); a fact's key counts as a tag (memories.indexes.sparse.labels) — written
by :class:`FullTextIndexer` inside every write's transaction (it registers itself with the
write funnel from ``search/apps.py``), so it never disagrees with the memories table.
Queries are answered by the in-process BM25 index (search.bm25.text_index) built from that text;
query terms come from the same analyzer, so user strings are only ever words.

A threaded memory (a message of a conversation) also gets a *context* field: its neighbouring
turns and the date it was said in words (memories.conversations), counted with ``CONTEXT_WEIGHT``
so that a turn such as "Yeah, I went there last Friday" is found by what the turns around it
say. Plain memories have no context: their scores are what they always were.
"""
from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection

from memories.analyzer import analyze_query
from memories.conversations import contexts
from memories.indexes.partitions import Versions
from memories.indexes.rebuilds import Rebuilding, answering_around
from memories.indexes.sparse import CONTEXT_WEIGHT, K1, TAG_WEIGHT, B, field_tokens, labels
from memories.models import Memory
from search import fulltext_db
from search.bm25.text_index import fts_rowid, get_text_index

# TAG_WEIGHT, CONTEXT_WEIGHT, K1 and B live in memories.indexes.sparse: Qdrant's sparse vectors use them too.
TEXT_FIELDS = frozenset({"content", "tags", "fact_key", "archived", "context", "occurred_at"})  # what the stored rows are made of


@dataclass(frozen=True)
class TextHit:
    memory_id: str
    score: float  # BM25, higher is better


def _fields(memory: Any, context: str) -> tuple[str, str, str]:
    content, tags, context_words = field_tokens(memory.content, labels(memory.tags, memory.fact_key), context)
    return " ".join(content), " ".join(tags), " ".join(context_words)


def _sqlite_index(memory: Any, context: str) -> None:
    content, tags, context_words = _fields(memory, context)
    with connection.cursor() as cursor:  # one statement: FTS5 replaces a row's terms with the row
        cursor.execute("INSERT OR REPLACE INTO memories_fts (rowid, content, tags, context, memory_id) "
                       "VALUES (%s, %s, %s, %s, %s)", [fts_rowid(memory.id), content, tags, context_words, memory.id.hex])


def _pg_index(memory: Any, context: str) -> None:
    content, tags, context_words = _fields(memory, context)
    tokens = content.split() + tags.split() * TAG_WEIGHT  # the text index reads them with weight 1
    with connection.cursor() as cursor:
        cursor.execute(
            """INSERT INTO memory_search (memory_id, tokens, context_tokens) VALUES (%s, %s, %s)
               ON CONFLICT (memory_id) DO UPDATE SET tokens = EXCLUDED.tokens, context_tokens = EXCLUDED.context_tokens""",
            [memory.id, tokens, context_words.split()],
        )


def index_memory(memory: Any, context: str = "") -> None:
    """(Re)index one memory (``context``: its neighbours' text, for a threaded one); call inside
    the write's transaction (the funnel does)."""
    if memory.archived:
        remove_memory(memory.id)
    elif connection.vendor == "sqlite":
        _sqlite_index(memory, context)
    else:
        _pg_index(memory, context)


def remove_memory(memory_id: uuid.UUID | str) -> None:
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("DELETE FROM memories_fts WHERE rowid = %s", [fts_rowid(memory_id)])
        else:
            cursor.execute("DELETE FROM memory_search WHERE memory_id = %s", [str(memory_id)])


def clear_all() -> None:
    """Drop every memory's analyzed text (a restore replaces the whole store)."""
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM memories_fts" if connection.vendor == "sqlite" else "DELETE FROM memory_search")


class FullTextIndexer:
    """The write funnel's hook (memories.funnel.Indexer): the analyzed text follows every write."""

    def written(self, memories: Sequence[Memory], fields: frozenset[str] | None) -> None:
        if fields is not None and not fields & TEXT_FIELDS:
            return  # access counts, expiry, vectors: the stored text is unchanged
        context = contexts(memories)
        for memory in memories:
            index_memory(memory, context.get(str(memory.id), ""))

    def removed(self, memory_ids: Sequence[uuid.UUID]) -> None:
        for memory_id in memory_ids:
            remove_memory(memory_id)

    def cleared(self) -> None:
        clear_all()


def search(query: str, *, namespace: str, collection: str | None, now: datetime, limit: int,
           versions: Versions = "current") -> list[TextHit]:
    """BM25-ranked live memories of the namespace matching any query term, best first: its
    current facts, or (``versions``) its superseded ones, or both."""
    terms = analyze_query(query)
    if not terms:
        return []
    # SQLite stores tags apart (weighted when loaded); PostgreSQL's token arrays repeat them already.
    tag_weight = TAG_WEIGHT if connection.vendor == "sqlite" else 1
    index = get_text_index(K1, B, tag_weight, CONTEXT_WEIGHT)
    try:
        hits = index.search(terms, namespace=namespace, collection=collection, now=now, limit=limit, versions=versions)
    except Rebuilding as rebuilding:  # the index reads every row in the background: the database answers
        rebuilding.note(fulltext_db.PATH)
        with answering_around():  # the rebuild pauses meanwhile
            hits = fulltext_db.search(terms, namespace=namespace, collection=collection, now=now, limit=limit,
                                      versions=versions)
    return [TextHit(memory_id, score) for memory_id, score in hits]
