"""In-process BM25 index over the analyzed text the database already stores (SQLite's FTS5
table, PostgreSQL's memory_search token arrays).

FTS5 scores and sorts *every* match of an OR query (≈27k of 100k memories for a natural
question), which costs hundreds of ms. This index keeps compact posting lists
(``array('i')``: rows and term frequencies) per term and scores a query with numpy in a few
ms, with the namespace's own BM25 statistics. Like the embedded vector index it loads
lazily and replays the ``vector_changes`` feed before every search, so several processes
stay current; replaced or deleted rows are masked and the index is rebuilt when more than
a third of its rows are dead.

Any failure while catching up or scoring throws the whole index away (the next search reloads
it from the database): a half-applied change would leave the posting lists and the per-row
arrays out of step, and a numpy view still held by a failed search's traceback would make
every later ``array.append`` raise ``BufferError``, so one transient error would otherwise
turn into a permanently failing full-text search.
"""
from __future__ import annotations

import math
import threading
import uuid
from array import array
from datetime import UTC, datetime

import numpy as np
from django.db import DatabaseError, connection
from django.utils.dateparse import parse_datetime
from django.utils.timezone import make_aware

from memories.feed import FeedReader, discarded_on_failure

_INF = math.inf
_SELECT = {
    # SQLite: the analyzed text FTS5 stores; PostgreSQL: the token arrays of memory_search
    # (tags already repeated there, so their column is empty).
    "sqlite": (
        "SELECT f.memory_id, f.content, f.tags, f.context, m.namespace, m.collection, m.decay_eligible, m.expires_at "
        "FROM memories_fts f JOIN memories m ON m.id = f.memory_id WHERE m.archived = %s",
        "f.memory_id",
    ),
    "postgresql": (
        "SELECT s.memory_id, array_to_string(s.tokens, ' '), '', array_to_string(s.context_tokens, ' '), "
        "m.namespace, m.collection, m.decay_eligible, m.expires_at "
        "FROM memory_search s JOIN memories m ON m.id = s.memory_id WHERE m.archived = %s",
        "s.memory_id",
    ),
}


class TextIndex:
    def __init__(self, k1: float, b: float, tag_weight: int, context_weight: float = 0.0) -> None:
        self.k1, self.b, self.tag_weight, self.context_weight = k1, b, tag_weight, context_weight
        self._lock = threading.RLock()
        self._loaded = False
        self._feed = FeedReader()
        self._reset()

    def _reset(self) -> None:
        self._ids: list[str] = []
        self._row_of: dict[str, int] = {}
        self._ns = array("i")
        self._coll = array("i")
        self._live = array("d")
        self._dl = array("f")
        self._alive = array("b")
        self._sig: list[int] = []
        self._postings: dict[str, tuple[array, array]] = {}
        self._codes: dict[str, int] = {}
        self._dead = 0

    def _code(self, key: str) -> int:
        return self._codes.setdefault(key, len(self._codes))

    @property
    def loaded(self) -> bool:
        return self._loaded

    def row_count(self) -> int:
        """Rows held, dead ones included (a replaced row is masked, then compacted by a rebuild)."""
        with self._lock:
            return len(self._ids)

    def _add(self, memory_id: str, content: str, tags: str, context: str, namespace: str, collection: str,
             until: float) -> None:
        signature = hash((content, tags, context, namespace, collection))
        old = self._row_of.get(memory_id)
        if old is not None and self._alive[old] and self._sig[old] == signature:
            self._live[old] = until  # only the expiry moved (access tracking): update in place
            return
        if old is not None and self._alive[old]:
            self._alive[old] = 0
            self._dead += 1
        row = len(self._ids)
        tokens = content.split() + tags.split() * self.tag_weight
        counts: dict[str, float] = {}
        for token in tokens:
            counts[token] = counts.get(token, 0.0) + 1.0
        context_tokens = context.split() if self.context_weight else []
        for token in context_tokens:  # BM25F: a context word adds a fraction of a term occurrence
            counts[token] = counts.get(token, 0.0) + self.context_weight
        for term, tf in counts.items():
            rows, tfs = self._postings.setdefault(term, (array("i"), array("f")))
            rows.append(row)
            tfs.append(tf)
        self._ids.append(memory_id)
        self._row_of[memory_id] = row
        self._ns.append(self._code("n:" + namespace))
        self._coll.append(self._code("c:" + collection))
        self._live.append(until)
        self._dl.append(len(tokens) + self.context_weight * len(context_tokens))
        self._alive.append(1)
        self._sig.append(signature)

    def _drop(self, memory_id: str) -> None:
        row = self._row_of.pop(memory_id, None)
        if row is not None and self._alive[row]:
            self._alive[row] = 0
            self._dead += 1

    def _ingest(self, rows: list[tuple]) -> None:
        for memory_id, content, tags, context, namespace, collection, decay, expires in rows:
            until = expires.timestamp() if decay and expires is not None else _INF
            self._add(memory_id, content, tags, context or "", namespace, collection, until)

    def _load(self) -> None:
        self._loaded = False
        self._reset()
        self._feed.start()
        with connection.cursor() as cursor:
            cursor.execute(_SELECT[connection.vendor][0], [False])
            self._ingest(_typed(cursor.fetchall()))
        self._loaded = True

    def _discard(self) -> None:
        """After a failure: fresh arrays (nothing shares a buffer with a dead search), reload next time."""
        self._loaded = False
        self._reset()

    def _catch_up(self) -> None:
        if not self._loaded or self._dead * 3 > max(len(self._ids), 3000):
            self._load()
            return
        changes = self._feed.read()
        if changes is None:
            self._load()
            return
        if not changes:
            return
        ids = {memory_id for _, memory_id, _ in changes}
        placeholders = ", ".join(["%s"] * len(ids))
        sql, id_column = _SELECT[connection.vendor]
        keys = [m.hex for m in ids] if connection.vendor == "sqlite" else [str(m) for m in ids]
        try:
            with connection.cursor() as cursor:
                cursor.execute(sql + f" AND {id_column} IN ({placeholders})", [False, *keys])
                rows = _typed(cursor.fetchall())
        except DatabaseError:
            self._feed.rewind(changes)
            raise
        present = {row[0] for row in rows}
        for memory_id in ids:
            if str(memory_id) not in present:
                self._drop(str(memory_id))  # forgotten, archived or collection deleted
        self._ingest(rows)

    def search(self, terms: list[str], *, namespace: str, collection: str | None, now: datetime, limit: int) -> list[tuple[str, float]]:
        with self._lock:
            with discarded_on_failure(self._discard, "full-text index"):
                self._catch_up()
                return self._score(terms, namespace, collection, now, limit)

    def _score(self, terms: list[str], namespace: str, collection: str | None, now: datetime,
               limit: int) -> list[tuple[str, float]]:
        ns_code = self._codes.get("n:" + namespace)
        if ns_code is None:
            return []
        ns = np.frombuffer(self._ns, dtype=np.int32)
        alive = np.frombuffer(self._alive, dtype=np.int8).astype(bool)
        in_ns = alive & (ns == ns_code)
        n_docs = int(in_ns.sum())
        if n_docs == 0:
            return []
        dl = np.frombuffer(self._dl, dtype=np.float32)
        avgdl = max(float(dl[in_ns].mean()), 1.0)
        eligible = in_ns & (np.frombuffer(self._live, dtype=np.float64) > now.timestamp())
        if collection is not None:
            eligible &= np.frombuffer(self._coll, dtype=np.int32) == self._codes.get("c:" + collection, -2)
        scores = np.zeros(len(self._ids), dtype=np.float32)
        for term in terms:
            posting = self._postings.get(term)
            if posting is None:
                continue
            rows = np.frombuffer(posting[0], dtype=np.int32)
            tfs = np.frombuffer(posting[1], dtype=np.float32)
            df = int(in_ns[rows].sum())
            if df == 0:
                continue
            keep = eligible[rows]
            rows, tfs = rows[keep], tfs[keep]
            idf = math.log(1 + (n_docs - df + 0.5) / (df + 0.5))
            norm = self.k1 * (1 - self.b + self.b * dl[rows] / avgdl)
            scores[rows] += idf * tfs * (self.k1 + 1) / (tfs + norm)
        hits = np.flatnonzero(scores > 0)
        if hits.size == 0:
            return []
        top = min(limit, hits.size)
        best = hits[np.argpartition(-scores[hits], top - 1)[:top]]
        best = best[np.argsort(-scores[best], kind="stable")]
        return [(self._ids[i], float(scores[i])) for i in best]


def _typed(rows: list[tuple]) -> list[tuple]:
    """SQLite returns datetimes as text and booleans as ints through a raw cursor."""
    out = []
    for raw_id, content, tags, context, namespace, collection, decay, expires in rows:
        if isinstance(expires, str):
            parsed = parse_datetime(expires)
            expires = parsed if parsed is None or parsed.tzinfo else make_aware(parsed, UTC)
        memory_id = str(raw_id) if isinstance(raw_id, uuid.UUID) else str(uuid.UUID(raw_id))
        out.append((memory_id, content, tags, context, namespace, collection, bool(decay), expires))
    return out


_index: TextIndex | None = None
_index_lock = threading.Lock()


def get_text_index(k1: float, b: float, tag_weight: int, context_weight: float = 0.0) -> TextIndex:
    global _index
    with _index_lock:
        if _index is None:
            _index = TextIndex(k1, b, tag_weight, context_weight)
        return _index


def text_index_loaded() -> bool:
    """Whether this process's text index has read the stored text (it does on the first search)."""
    with _index_lock:
        return _index is not None and _index.loaded


def reset_text_index() -> None:
    global _index
    with _index_lock:
        _index = None
