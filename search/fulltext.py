"""Ranked full-text (BM25) on SQLite FTS5 and on PostgreSQL (tsvector + GIN).

Both backends index the output of :func:`search.text.analyze` (CJK segmented, stemmed,
stopwords dropped), so the query side applies the same analyzer and every query term is a
plain word quoted into the backend's syntax: user strings cannot break or inject a query.
The index is written inside the caller's transaction (memories.services), so it never
disagrees with the memories table.
"""
from __future__ import annotations

import hashlib
import math
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime

from django.db import connection

from memories.models import Memory
from search.text import analyze, analyze_query

# BM25 field weights (content, summary, tags): chosen on the retrieval benchmark.
W_CONTENT, W_SUMMARY, W_TAGS = 1.0, 0.0, 2.0
K1, B = 0.9, 0.4
POOL = 100  # FTS5 candidates re-ranked with namespace statistics (at least 4 × limit)


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


def _sqlite_stats_delta(cursor, ns_token: str, tokens: list[str], sign: int) -> None:  # noqa: ANN001
    """Keep per-namespace BM25 statistics (doc count, token count, document frequencies)."""
    cursor.execute(
        "INSERT INTO fulltext_stats (scope, n_docs, n_tokens) VALUES (%s, %s, %s) "
        "ON CONFLICT(scope) DO UPDATE SET n_docs = n_docs + excluded.n_docs, n_tokens = n_tokens + excluded.n_tokens",
        [ns_token, sign, sign * len(tokens)],
    )
    terms = sorted(set(tokens))
    if terms:
        cursor.executemany(
            "INSERT INTO fulltext_terms (scope, term, df) VALUES (%s, %s, %s) "
            "ON CONFLICT(scope, term) DO UPDATE SET df = df + excluded.df",
            [(ns_token, term, sign) for term in terms],
        )
        if sign < 0:
            cursor.execute("DELETE FROM fulltext_terms WHERE scope = %s AND df <= 0", [ns_token])


def _sqlite_unindex(cursor, rowid: int) -> None:  # noqa: ANN001
    cursor.execute("SELECT content, tags, scope FROM memories_fts WHERE rowid = %s", [rowid])
    row = cursor.fetchone()
    if row is None:
        return
    cursor.execute("DELETE FROM memories_fts WHERE rowid = %s", [rowid])
    _sqlite_stats_delta(cursor, row[2].split()[0], _doc_tokens(row[0], row[1]), -1)


def _sqlite_index(memory: Memory) -> None:
    content, summary, tags = _fields(memory)
    rowid = fts_rowid(memory.id)
    with connection.cursor() as cursor:
        _sqlite_unindex(cursor, rowid)
        cursor.execute(
            "INSERT INTO memories_fts (rowid, content, summary, tags, scope, memory_id) VALUES (%s, %s, %s, %s, %s, %s)",
            [rowid, content, summary, tags, _scope(memory), memory.id.hex],
        )
        _sqlite_stats_delta(cursor, scope_token("ns", memory.namespace), _doc_tokens(content, tags), +1)


def _pg_index(memory: Memory) -> None:
    content, summary, tags = _fields(memory)
    # Field weights by repetition: tags count twice, the summary (first line) is not re-counted.
    tokens = content.split() + tags.split() * int(W_TAGS)
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
            _sqlite_unindex(cursor, fts_rowid(memory_id))
        else:
            cursor.execute("DELETE FROM memory_search WHERE memory_id = %s", [str(memory_id)])


def _alive_sql(alias: str) -> str:
    return f"{alias}.archived = %s AND ({alias}.decay_eligible = %s OR {alias}.expires_at > %s)"


def _alive_params(now: datetime) -> list[object]:
    return [False, False, connection.ops.adapt_datetimefield_value(now)]


def _fts5_query(terms: list[str], namespace: str, collection: str | None) -> str:
    scope = f'scope : "{scope_token("ns", namespace)}"'
    if collection is not None:
        scope += f' AND scope : "{scope_token("co", collection)}"'
    words = " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)
    return f"{scope} AND {{content summary tags}} : ({words})"


def _bm25(tokens: list[str], terms: list[str], idf: dict[str, float], avgdl: float) -> float:
    counts: dict[str, int] = {}
    for token in tokens:
        if token in idf:
            counts[token] = counts.get(token, 0) + 1
    norm = K1 * (1 - B + B * len(tokens) / avgdl)
    return sum(idf[t] * n * (K1 + 1) / (n + norm) for t, n in counts.items())


def _sqlite_namespace_idf(cursor, ns_token: str, terms: list[str]) -> tuple[dict[str, float], float]:  # noqa: ANN001
    cursor.execute("SELECT n_docs, n_tokens FROM fulltext_stats WHERE scope = %s", [ns_token])
    n_docs, n_tokens = cursor.fetchone() or (0, 0)
    placeholders = ", ".join(["%s"] * len(terms))
    cursor.execute(f"SELECT term, df FROM fulltext_terms WHERE scope = %s AND term IN ({placeholders})", [ns_token, *terms])
    df = dict(cursor.fetchall())
    n_docs = max(n_docs, 1, *df.values())
    idf = {t: math.log(1 + (n_docs - df.get(t, 0) + 0.5) / (df.get(t, 0) + 0.5)) for t in terms}
    return idf, max(n_tokens / n_docs, 1.0)


def _sqlite_search(terms: list[str], namespace: str, collection: str | None, now: datetime, limit: int) -> list[TextHit]:
    """FTS5 finds and pre-ranks the namespace's matches; BM25 with the *namespace's own*
    statistics re-ranks the pool, so no other namespace can influence a ranking or a score."""
    match = _fts5_query(terms, namespace, collection)
    depth = max(4 * limit, POOL)
    with connection.cursor() as cursor:
        while True:
            cursor.execute(
                "SELECT f.memory_id, f.content, f.tags FROM (SELECT memory_id, content, tags, "
                "bm25(memories_fts, %s, %s, %s, 0.0) AS rank FROM memories_fts WHERE memories_fts MATCH %s "
                f"ORDER BY rank LIMIT %s) f JOIN memories m ON m.id = f.memory_id WHERE {_alive_sql('m')}",
                [W_CONTENT, W_SUMMARY, W_TAGS, match, depth, *_alive_params(now)],
            )
            rows = cursor.fetchall()
            if len(rows) >= limit or depth >= 1_000_000:
                break
            cursor.execute("SELECT COUNT(*) FROM memories_fts WHERE memories_fts MATCH %s", [match])
            if cursor.fetchone()[0] <= depth:
                break
            depth *= 8
        idf, avgdl = _sqlite_namespace_idf(cursor, scope_token("ns", namespace), terms)
    scored = [(_bm25(_doc_tokens(content, tags), terms, idf, avgdl), memory_id) for memory_id, content, tags in rows]
    scored.sort(key=lambda pair: pair[0], reverse=True)
    return [TextHit(str(uuid.UUID(memory_id)), score) for score, memory_id in scored[:limit] if score > 0]


class _AvgLengthCache:
    """avgdl per namespace for PostgreSQL BM25, refreshed at most every 60 s."""

    def __init__(self) -> None:
        self._values: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def get(self, namespace: str) -> float:
        with self._lock:
            cached = self._values.get(namespace)
        if cached and time.monotonic() - cached[1] < 60:
            return cached[0]
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT COALESCE(AVG(s.ntokens), 1), COUNT(*) FROM memory_search s JOIN memories m ON m.id = s.memory_id "
                "WHERE m.namespace = %s",
                [namespace],
            )
            avg, _count = cursor.fetchone()
        with self._lock:
            self._values[namespace] = (float(avg) or 1.0, time.monotonic())
        return float(avg) or 1.0


_avgdl = _AvgLengthCache()


def _pg_search(terms: list[str], namespace: str, collection: str | None, now: datetime, limit: int) -> list[TextHit]:
    filters = f"m.namespace = %s AND {_alive_sql('m')}"
    params: list[object] = [namespace, *_alive_params(now)]
    if collection is not None:
        filters += " AND m.collection = %s"
        params.append(collection)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT t.term, (SELECT COUNT(*) FROM memory_search s JOIN memories m ON m.id = s.memory_id "
            "WHERE s.document @@ to_tsquery('simple', %s || ' & ' || quote_literal(t.term)) AND m.archived = %s) "
            "FROM unnest(%s::text[]) AS t(term)",
            [scope_token("ns", namespace), False, terms],
        )
        df = dict(cursor.fetchall())
        cursor.execute("SELECT COUNT(*) FROM memories m WHERE m.namespace = %s AND m.archived = %s", [namespace, False])
        n_docs = max(int(cursor.fetchone()[0]), 1, *df.values())
        idf = [math.log(1 + (n_docs - df.get(t, 0) + 0.5) / (df.get(t, 0) + 0.5)) for t in terms]  # always > 0
        words = " | ".join("'" + t.replace("'", "''") + "'" for t in terms)
        scope = scope_token("ns", namespace) + (f" & {scope_token('co', collection)}" if collection else "")
        tsquery = f"{scope} & ({words})"
        cursor.execute(
            f"""WITH q(term, idf) AS (SELECT * FROM unnest(%s::text[], %s::float8[])),
            cand AS (SELECT s.memory_id, s.tokens, s.ntokens FROM memory_search s JOIN memories m ON m.id = s.memory_id
                     WHERE s.document @@ to_tsquery('simple', %s) AND {filters})
            SELECT cand.memory_id, SUM(q.idf * tf.n * (%s + 1) / (tf.n + %s * (1 - %s + %s * cand.ntokens / %s))) AS score
            FROM cand CROSS JOIN q
            CROSS JOIN LATERAL (SELECT COALESCE(cardinality(array_positions(cand.tokens, q.term)), 0)::float8 AS n) tf
            WHERE tf.n > 0 GROUP BY cand.memory_id ORDER BY score DESC LIMIT %s""",
            [terms, idf, tsquery, *params, K1, K1, B, B, _avgdl.get(namespace), limit],
        )
        return [TextHit(str(row[0]), float(row[1])) for row in cursor.fetchall()]


def search(query: str, *, namespace: str, collection: str | None, now: datetime, limit: int) -> list[TextHit]:
    """BM25-ranked live memories of the namespace matching any query term, best first."""
    terms = analyze_query(query)
    if not terms:
        return []
    if connection.vendor == "sqlite":
        from search.text_index import get_text_index

        index = get_text_index(K1, B, int(W_TAGS))
        hits = index.search(terms, namespace=namespace, collection=collection, now=now, limit=limit)
        return [TextHit(memory_id, score) for memory_id, score in hits]
    return _pg_search(terms, namespace, collection, now, limit)
