"""Full-text answered by the database alone, while the in-process text index is rebuilt from it
(memories/indexes/rebuilds.py): every live row of the namespace is searched, ranked by BM25 as
the database can compute it, so a search meanwhile answers in well under its usual cost of a
full load.

- SQLite: the FTS5 table's own index (``MATCH``) and its ``bm25()`` (FTS5's k1 1.2, b 0.75, the
  table's global statistics; tags and context weighted per column).
- PostgreSQL: the analyzed token arrays of ``memory_search`` scanned with ``&&`` and scored in SQL
  with the in-process index's k1, b and context weight, the namespace's row count for the idf
  and the matched rows' mean length for the average (no index on the arrays: a sequential scan).

The ranking differs a little from the in-process index's (other statistics); the response says
the answer is degraded (``meta.degraded``).
"""
from __future__ import annotations

from datetime import datetime

from django.db import connection

from memories.indexes.feed import raw_uuid
from memories.indexes.sparse import CONTEXT_WEIGHT, K1, TAG_WEIGHT, B

PATH = "database full-text"

_SQLITE = (
    "SELECT memories_fts.memory_id, bm25(memories_fts, 1.0, %s, %s) AS rank FROM memories_fts "
    "JOIN memories m ON m.id = memories_fts.memory_id "
    "WHERE memories_fts MATCH %s AND m.archived = 0 AND m.namespace = %s{collection} "
    "AND (m.decay_eligible = 0 OR m.expires_at IS NULL OR m.expires_at > %s) "
    "ORDER BY rank LIMIT %s"
)

_POSTGRESQL = """
WITH matched AS (
    SELECT s.memory_id, s.tokens, s.context_tokens
    FROM memory_search s JOIN memories m ON m.id = s.memory_id
    WHERE m.archived = false AND m.namespace = %(namespace)s{collection}
      AND (m.decay_eligible = false OR m.expires_at IS NULL OR m.expires_at > %(now)s)
      AND (s.tokens && %(terms)s::text[] OR s.context_tokens && %(terms)s::text[])
), counted AS (
    SELECT memory_id, q.term,
           cardinality(array_positions(tokens, q.term))
             + %(context_weight)s * cardinality(array_positions(context_tokens, q.term)) AS tf,
           cardinality(tokens) + %(context_weight)s * cardinality(context_tokens) AS dl
    FROM matched CROSS JOIN unnest(%(terms)s::text[]) AS q(term)
), terms AS (
    SELECT term, count(*) FILTER (WHERE tf > 0) AS df FROM counted GROUP BY term
), lengths AS (
    SELECT greatest(avg(dl), 1) AS avgdl FROM counted
), namespace AS (
    SELECT count(*) AS n FROM memories WHERE namespace = %(namespace)s AND archived = false
)
SELECT c.memory_id,
       sum(ln(1 + (namespace.n - t.df + 0.5) / (t.df + 0.5))
           * c.tf * (%(k1)s + 1) / (c.tf + %(k1)s * (1 - %(b)s + %(b)s * c.dl / lengths.avgdl))) AS score
FROM counted c JOIN terms t USING (term) CROSS JOIN lengths CROSS JOIN namespace
WHERE c.tf > 0
GROUP BY c.memory_id ORDER BY score DESC LIMIT %(limit)s
"""


def search(terms: list[str], *, namespace: str, collection: str | None, now: datetime,
           limit: int) -> list[tuple[str, float]]:
    """(memory id, BM25 score) of the best ``limit`` live rows of the namespace matching any term."""
    if connection.vendor == "sqlite":
        return _sqlite(terms, namespace, collection, now, limit)
    return _postgresql(terms, namespace, collection, now, limit)


def _match(terms: list[str]) -> str:
    """An FTS5 query of the terms, each a quoted string (a user's quotes or operators stay words)."""
    return " OR ".join('"' + term.replace('"', '""') + '"' for term in terms)


def _sqlite(terms: list[str], namespace: str, collection: str | None, now: datetime,
            limit: int) -> list[tuple[str, float]]:
    sql = _SQLITE.format(collection=" AND m.collection = %s" if collection is not None else "")
    stamp = connection.ops.adapt_datetimefield_value(now)
    params: list[object] = [float(TAG_WEIGHT), float(CONTEXT_WEIGHT), _match(terms), namespace]
    params += [collection] if collection is not None else []
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, stamp, limit])
        return [(str(raw_uuid(memory_id)), -float(rank)) for memory_id, rank in cursor.fetchall()]


def _postgresql(terms: list[str], namespace: str, collection: str | None, now: datetime,
                limit: int) -> list[tuple[str, float]]:
    sql = _POSTGRESQL.format(collection=" AND m.collection = %(collection)s" if collection is not None else "")
    params = {"namespace": namespace, "collection": collection, "now": now, "terms": list(dict.fromkeys(terms)),
              "context_weight": float(CONTEXT_WEIGHT), "k1": float(K1), "b": float(B), "limit": limit}
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [(str(memory_id), float(score)) for memory_id, score in cursor.fetchall()]
