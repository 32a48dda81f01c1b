"""Full-text storage and BM25 search.

The database keeps the analyzed text (:func:`search.text.analyze`: CJK segmented, stemmed,
stopwords dropped) — SQLite in an FTS5 table, PostgreSQL in ``memory_search`` (token array + tsvector/GIN) — written inside the caller's
transaction, so it never disagrees with the memories table. Queries are answered by the
in-process BM25 index (search.text_index) built from that text; query terms come from the
same analyzer, so user strings are only ever words.
"""
from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from datetime import datetime

from django.db import connection

from memories.models import Memory
from search.text import analyze, analyze_query

# BM25 field weights (content, summary, tags): chosen on the retrieval benchmark.
W_CONTENT, W_SUMMARY, W_TAGS = 1.0, 0.0, 2.0
K1, B = 0.9, 0.4


@dataclass(frozen=True)
class TextHit:
    memory_id: str
    score: float  # BM25, higher is better


def fts_rowid(memory_id: uuid.UUID | str) -> int:
    """A stable signed 64-bit rowid derived from the uuid (O(log n) updates and deletes)."""
    raw = memory_id.bytes if isinstance(memory_id, uuid.UUID) else uuid.UUID(str(memory_id)).bytes
    return int.from_bytes(raw[:8], "big", signed=True)


def scope_token(kind: str, value: str) -> str:
    """One opaque word per namespace / collection, indexed beside the text so the full-text
    engine itself restricts a query to a namespace (no per-match join needed)."""
    return kind + hashlib.sha256(value.encode()).hexdigest()[:20]


def _scope(memory: Memory) -> str:
    return f"{scope_token('ns', memory.namespace)} {scope_token('co', memory.collection)}"


def _fields(memory: Memory) -> tuple[str, str, str]:
    tags = " ".join(t.replace("-", " ") for t in memory.tags)
    return " ".join(analyze(memory.content)), " ".join(analyze(memory.summary)), " ".join(analyze(tags))


def _doc_tokens(content: str, tags: str) -> list[str]:
    """The tokens BM25 counts: content once, tags twice (the summary repeats the first line)."""
    return content.split() + tags.split() * int(W_TAGS)


def _sqlite_index(memory: Memory) -> None:
    content, summary, tags = _fields(memory)
    rowid = fts_rowid(memory.id)
    with connection.cursor() as cursor:
        cursor.execute("DELETE FROM memories_fts WHERE rowid = %s", [rowid])
        cursor.execute(
            "INSERT INTO memories_fts (rowid, content, summary, tags, scope, memory_id) VALUES (%s, %s, %s, %s, %s, %s)",
            [rowid, content, summary, tags, _scope(memory), memory.id.hex],
        )


def _pg_index(memory: Memory) -> None:
    content, _summary, tags = _fields(memory)
    tokens = _doc_tokens(content, tags)  # tags repeated here; the text index reads them with weight 1
    with connection.cursor() as cursor:
        cursor.execute(
            """INSERT INTO memory_search (memory_id, tokens, ntokens, document)
               VALUES (%s, %s, %s, to_tsvector('simple', %s))
               ON CONFLICT (memory_id) DO UPDATE
               SET tokens = EXCLUDED.tokens, ntokens = EXCLUDED.ntokens, document = EXCLUDED.document""",
            [memory.id, tokens, len(tokens), " ".join(tokens) + " " + _scope(memory)],
        )


def index_memory(memory: Memory) -> None:
    """(Re)index one memory; call inside the write's transaction."""
    if memory.archived:
        remove_memory(memory.id)
    elif connection.vendor == "sqlite":
        _sqlite_index(memory)
    else:
        _pg_index(memory)


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


def search(query: str, *, namespace: str, collection: str | None, now: datetime, limit: int) -> list[TextHit]:
    """BM25-ranked live memories of the namespace matching any query term, best first."""
    terms = analyze_query(query)
    if not terms:
        return []
    from search.text_index import get_text_index

    # SQLite stores fields separately (tags weighted at scoring); PostgreSQL's tokens repeat tags already.
    tag_weight = int(W_TAGS) if connection.vendor == "sqlite" else 1
    index = get_text_index(K1, B, tag_weight)
    hits = index.search(terms, namespace=namespace, collection=collection, now=now, limit=limit)
    return [TextHit(memory_id, score) for memory_id, score in hits]
