"""Full-text answered by the database alone, while the in-process text index is rebuilt from it
(memories/indexes/rebuilds.py): every live row of the namespace is searched, ranked by BM25 as
the database can compute it, so a search meanwhile answers in well under its usual cost of a
full load.

- SQLite: the FTS5 table's own index (``MATCH``) and its ``bm25()`` (FTS5's k1 1.2, b 0.75, the
  table's global statistics; tags and context weighted per column), over the query's rarest terms
  up to ``POSTINGS_BUDGET`` postings (the common words left out cost the most and weigh the least).
  ``bm25()`` reads each match's row sizes, so when even the rarest term has more than ``WINDOW``
  matches (a query of common words only, at a million rows: 137k matches for its rarest term in
  the benchmark, 0.3-10 s a search), the rows holding *all* the query's words are ranked first,
  then all but the most common, and so on; the rest is filled from a window of ``WINDOW`` matches
  of the rarest terms (in rowid order, which is the memory id's hash: an arbitrary sample),
  widened while too few of them are live rows of the namespace.
- PostgreSQL: the analyzed token arrays of ``memory_search`` matched through their GIN indexes
  (search migration 0004) and scored in SQL with the in-process index's k1, b and context weight,
  the namespace's live rows (the quota counters) for the idf and the matched rows' mean length for
  the average. How common a term is comes from the statistics of the arrays' elements (``ANALYZE``;
  counting a common word's rows read a third of the table at a million rows), a term they do not
  list is counted. When the rarest terms match at most ``WINDOW`` rows, every row holding any of
  them is scored (document frequencies counted among them); else the rows holding *all* the words
  (``@>``: GIN intersects the terms' posting lists before reading a row), then all but the most
  common..., then ``WINDOW`` rows holding any of the rarest, scored alike with the estimated
  frequencies. At a million rows (bench corpus, 40 questions): p50 / p95 113 / 447 ms instead of
  3.1 / 4.7 s, top 10 shared with the in-process BM25 8.25 instead of 0.68.

The ranking differs a little from the in-process index's (other statistics); the response says
the answer is degraded (``meta.degraded``).
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import connection

from memories.indexes.feed import raw_uuid
from memories.indexes.partitions import Versions
from memories.indexes.sparse import CONTEXT_WEIGHT, K1, TAG_WEIGHT, B
from memories.quotas.usage import counts_of

PATH = "database full-text"

POSTINGS_BUDGET = 50_000  # the rarest terms are matched up to about this many postings
RANKED_FIRST = 1_000  # SQLite: the best this many matches are ranked first, then filtered (if too few pass: all)
WINDOW = 20_000  # SQLite: bm25() over at most this many matches first, widened 8x while too few pass
WIDEN = 8

# Ranked in a subquery, then joined: a join per match inside the ranking cost 3x as much (100k rows).
# The ranking reads rowids only: a match's memory_id lives in FTS5's content row beside its text, and
# reading it for every match of the window read 20,000 rows' text (3.3-4.3 s on a cold page cache at
# 1M); it is read for the ranked rows alone, by rowid.
_SQLITE = (
    "SELECT x.memory_id, f.rank FROM (SELECT rowid AS fts_rowid, bm25(memories_fts, 1.0, %s, %s) AS rank "
    "FROM memories_fts WHERE memories_fts MATCH %s{window} ORDER BY rank{ranked}) f "
    "JOIN memories_fts x ON x.rowid = f.fts_rowid JOIN memories m ON m.id = x.memory_id "
    "WHERE m.archived = 0 AND m.namespace = %s{collection} "
    "AND (m.decay_eligible = 0 OR m.expires_at IS NULL OR m.expires_at > %s){current} "
    "ORDER BY f.rank LIMIT %s"
)

_POSTGRESQL = """
WITH matched AS (
    SELECT s.memory_id, s.tokens, s.context_tokens
    FROM memory_search s JOIN memories m ON m.id = s.memory_id
    WHERE m.archived = false AND m.namespace = %(namespace)s{collection}
      AND (m.decay_eligible = false OR m.expires_at IS NULL OR m.expires_at > %(now)s){current}
      AND {match}{window}
), counted AS (
    SELECT memory_id, q.term,
           cardinality(array_positions(tokens, q.term))
             + %(context_weight)s * cardinality(array_positions(context_tokens, q.term)) AS tf,
           cardinality(tokens) + %(context_weight)s * cardinality(context_tokens) AS dl
    FROM matched CROSS JOIN unnest(%(terms)s::text[]) AS q(term)
), terms AS MATERIALIZED (
    {df}
), lengths AS MATERIALIZED (  -- computed once: inlined, a misestimated plan re-ran it for every row
    SELECT greatest(avg(dl), 1) AS avgdl FROM counted
), namespace AS (
    SELECT %(n)s::bigint AS n
)
SELECT c.memory_id,
       sum(ln(1 + (greatest(namespace.n - t.df, 0) + 0.5) / (t.df + 0.5))
           * c.tf * (%(k1)s + 1) / (c.tf + %(k1)s * (1 - %(b)s + %(b)s * c.dl / lengths.avgdl))) AS score
FROM counted c JOIN terms t USING (term) CROSS JOIN lengths CROSS JOIN namespace
WHERE c.tf > 0
GROUP BY c.memory_id ORDER BY score DESC LIMIT %(limit)s
"""


def search(terms: list[str], *, namespace: str, collection: str | None, now: datetime, limit: int,
           versions: Versions = "current") -> list[tuple[str, float]]:
    """(memory id, BM25 score) of the best ``limit`` live rows of the namespace matching any term:
    its current facts, its superseded ones, or both (``versions``, memories/indexes/partitions.py)."""
    where = _Where(namespace, collection, now, versions)
    if connection.vendor != "sqlite":
        return _postgresql_search(terms, where, limit)
    counted = _counted(terms)
    chosen = _rarest(counted)
    if not chosen:
        return []
    present = [(count, term) for count, term in counted if count]
    if present[0][0] > WINDOW:  # even the rarest word is common: the rows holding most of the words first
        return _sqlite_common_words(present, chosen, where, limit)
    return _sqlite_windowed(_any_of(chosen), where, limit)


@dataclass(frozen=True)
class _Where:
    namespace: str
    collection: str | None
    now: datetime
    versions: Versions

    @property
    def current(self) -> str:
        if self.versions == "all":
            return ""
        return f" AND m.superseded_by IS {'NOT ' if self.versions == 'superseded' else ''}NULL"


def _quoted(term: str) -> str:
    """A term as an FTS5 string (a user's quotes or operators stay words)."""
    return '"' + term.replace('"', '""') + '"'


def _postings(cursor, term: str) -> int:  # noqa: ANN001 - a DB-API cursor
    """How many rows hold a term; PostgreSQL's count stops past the budget (a common word's exact
    count costs more than it tells)."""
    if connection.vendor == "sqlite":
        cursor.execute("SELECT count(*) FROM memories_fts WHERE memories_fts MATCH %s", [_quoted(term)])
    else:
        cursor.execute("SELECT count(*) FROM (SELECT 1 FROM memory_search WHERE tokens @> ARRAY[%s]::text[] "
                       "OR context_tokens @> ARRAY[%s]::text[] LIMIT %s) s", [term, term, POSTINGS_BUDGET + 1])
    return int(cursor.fetchone()[0])


def _counted(terms: list[str]) -> list[tuple[int, str]]:
    """(postings, term) of each distinct term, rarest first."""
    with connection.cursor() as cursor:
        return sorted((_postings(cursor, term), term) for term in dict.fromkeys(terms))


def _rarest(counted: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """(postings, term) of the query's rarest terms, up to ``POSTINGS_BUDGET`` postings in all (at
    least one): ranking every match of a common word costs seconds at a million rows, and it adds
    little to BM25."""
    chosen, postings = [], 0
    for count, term in counted:
        if count and (not chosen or postings + count <= POSTINGS_BUDGET):
            chosen.append((count, term))
            postings += count
    return chosen


@dataclass(frozen=True)
class _Match:
    """An FTS5 match expression and how many rows it can match at most (from the terms' postings)."""

    expression: str
    at_most: int


def _any_of(counted: list[tuple[int, str]]) -> _Match:
    return _Match(" OR ".join(_quoted(term) for _count, term in counted), sum(count for count, _term in counted))


def _all_of(counted: list[tuple[int, str]]) -> _Match:
    return _Match(" AND ".join(_quoted(term) for _count, term in counted), min(count for count, _term in counted))


def _sqlite_common_words(present: list[tuple[int, str]], chosen: list[tuple[int, str]], where: _Where,
                         limit: int) -> list[tuple[str, float]]:
    """Every term has more than ``WINDOW`` matches: the rows holding all of ``present`` (rarest
    first), then all but the most common..., then the windowed matches of ``chosen``."""
    hits: dict[str, float] = {}
    for size in range(len(present), 1, -1):
        for memory_id, score in _sqlite_windowed(_all_of(present[:size]), where, limit):
            hits.setdefault(memory_id, score)
        if len(hits) >= limit:
            break
    else:
        for memory_id, score in _sqlite_windowed(_any_of(chosen), where, limit):
            hits.setdefault(memory_id, score)
    return sorted(hits.items(), key=lambda hit: -hit[1])[:limit]


def _sqlite_windowed(match: _Match, where: _Where, limit: int) -> list[tuple[str, float]]:
    """The best ``limit`` live rows of the namespace among ``match``'s first ``WINDOW`` matches (by
    rowid, from the highest), widened while fewer pass; no window when it could hold every match."""
    window = WINDOW
    while True:
        floor = _window_floor(match.expression, window) if match.at_most > window else None
        hits = _sqlite_ranked(match.expression, where, limit, floor, f" LIMIT {max(RANKED_FIRST, limit)}")
        if len(hits) < limit:  # the best matches were mostly other namespaces' (or not live): rank every one
            hits = _sqlite_ranked(match.expression, where, limit, floor, "")
        if len(hits) >= limit or floor is None:
            return hits
        window *= WIDEN


def _window_floor(match: str, window: int) -> int | None:
    """The rowid of the ``window``-th match from the highest rowid, or None when there are fewer
    matches (FTS5 walks its doclist in rowid order for this, without ranking)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT rowid FROM memories_fts WHERE memories_fts MATCH %s ORDER BY rowid DESC LIMIT 1 OFFSET %s",
                       [match, window - 1])
        row = cursor.fetchone()
    return None if row is None else int(row[0])


def _sqlite_ranked(match: str, where: _Where, limit: int, floor: int | None, ranked: str) -> list[tuple[str, float]]:
    sql = _SQLITE.format(ranked=ranked, window="" if floor is None else " AND rowid >= %s",
                         collection=" AND m.collection = %s" if where.collection is not None else "",
                         current=where.current)
    params: list[object] = [float(TAG_WEIGHT), float(CONTEXT_WEIGHT), match, *([] if floor is None else [floor]),
                            where.namespace]
    params += [where.collection] if where.collection is not None else []
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, connection.ops.adapt_datetimefield_value(where.now), limit])
        return [(str(raw_uuid(memory_id)), -float(rank)) for memory_id, rank in cursor.fetchall()]


# PostgreSQL: the rows matching any of the rarest terms (their document frequencies counted among them).
_ANY_OF = "(s.tokens && %(match)s::text[] OR s.context_tokens && %(match)s::text[])"
_COUNTED_DF = "SELECT term, count(*) FILTER (WHERE tf > 0) AS df FROM counted GROUP BY term"
# PostgreSQL: the rows whose words hold all the required terms (one GIN lookup intersects their
# posting lists before any row is read), scored over every query term with the frequencies estimated
# for the whole table, scaled to the namespace.
_ALL_OF = "s.tokens @> %(required)s::text[]"
_GIVEN_DF = "SELECT term, df FROM unnest(%(terms)s::text[], %(dfs)s::float8[]) AS g(term, df)"


def _pg_common_terms(cursor, terms: list[str]) -> dict[str, float]:  # noqa: ANN001 - a DB-API cursor
    """The share of rows holding each of these terms that PostgreSQL's statistics list among the
    token arrays' most common elements (``ANALYZE``, which autovacuum runs); a term not listed is
    rarer than every listed one. Empty when the table has no statistics yet."""
    cursor.execute("SELECT most_common_elems::text::text[], most_common_elem_freqs FROM pg_stats "
                   "WHERE schemaname = current_schema() AND tablename = 'memory_search' AND attname = 'tokens'")
    row = cursor.fetchone()
    if row is None or row[0] is None:
        return {}
    shares = dict(zip(row[0], row[1], strict=False))  # the frequencies list ends with 3 summary numbers
    return {term: float(shares[term]) for term in terms if term in shares}


def _pg_counted(terms: list[str]) -> tuple[list[tuple[int, str]], int]:
    """(postings, term) of each distinct term, rarest first, and the table's rows. A common term's
    postings are estimated from the statistics (counting them read a third of the table at a
    million rows: 0.1-0.5 s a term); the others are counted through the GIN index, up to the budget."""
    distinct = list(dict.fromkeys(terms))
    with connection.cursor() as cursor:
        shares = _pg_common_terms(cursor, distinct)
        cursor.execute("SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = 'memory_search'::regclass")
        rows = int(cursor.fetchone()[0])
        counted = [(round(shares[term] * rows) if term in shares and rows else _postings(cursor, term), term)
                   for term in distinct]
    return sorted(counted), rows


def _namespace_rows(where: _Where) -> int:
    """The namespace's live memories for the idf: the counters the database keeps for quotas (one
    indexed read; counting the rows read the whole table at a million), else counted."""
    kept = sum(counts_of([where.namespace]).get(where.namespace, {}).values())
    if kept > 0:
        return kept
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM memories WHERE namespace = %s AND archived = false", [where.namespace])
        return int(cursor.fetchone()[0])


def _postgresql_search(terms: list[str], where: _Where, limit: int) -> list[tuple[str, float]]:
    """The rows matching any of the rarest terms, when they are at most ``WINDOW``; else the rows
    holding all of the words first, then all but the most common..., then a window of ``WINDOW``
    rows matching the rarest terms (scoring a row here costs ~35 us: 50,000 of them 1.7 s at 1M)."""
    counted, table_rows = _pg_counted(terms)
    chosen = _rarest(counted)
    if not chosen:
        return []
    present = [(count, term) for count, term in counted if count]
    rarest = [term for _count, term in chosen]
    n = _namespace_rows(where)
    if sum(count for count, _term in chosen) <= WINDOW:
        return _postgresql(where, limit, n, _ANY_OF, rarest, match=rarest)
    scale = n / table_rows if table_rows else 1.0  # the table's frequencies as the namespace's
    scored = [term for _count, term in present]
    dfs = [max(1.0, count * scale) for count, _term in present]
    hits: dict[str, float] = {}
    for size in range(len(present), 1, -1):
        required = [term for _count, term in present[:size]]
        for memory_id, score in _postgresql(where, limit, n, _ALL_OF, scored, dfs=dfs, required=required):
            hits.setdefault(memory_id, score)
        if len(hits) >= limit:
            break
    else:
        window = max(WINDOW, limit)  # rows of the namespace already (not a window over every namespace's, as SQLite's)
        for memory_id, score in _postgresql(where, limit, n, _ANY_OF, scored, dfs=dfs, match=rarest, window=window):
            hits.setdefault(memory_id, score)
    return sorted(hits.items(), key=lambda hit: -hit[1])[:limit]


def _postgresql(where: _Where, limit: int, n: int, condition: str, terms: list[str], *, dfs: list[float] | None = None,
                match: list[str] | None = None, required: list[str] | None = None,
                window: int | None = None) -> list[tuple[str, float]]:
    """The best ``limit`` rows meeting ``condition`` (any of ``match``, or all of ``required``),
    scored over ``terms`` with their frequencies among the matched rows, or ``dfs`` when given."""
    sql = _POSTGRESQL.format(collection=" AND m.collection = %(collection)s" if where.collection is not None else "",
                             current=where.current, match=condition, window="" if window is None else " LIMIT %(window)s",
                             df=_COUNTED_DF if dfs is None else _GIVEN_DF)
    params = {"namespace": where.namespace, "collection": where.collection, "now": where.now,
              "terms": terms, "dfs": dfs, "match": match, "required": required, "window": window, "n": n,
              "context_weight": float(CONTEXT_WEIGHT), "k1": float(K1), "b": float(B), "limit": limit}
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return [(str(memory_id), float(score)) for memory_id, score in cursor.fetchall()]
