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

A new process opens the last persisted snapshot (memories.indexes.snapshots) instead of reading every
row: the posting lists stay memory-mapped read-only (shared between processes, search/bm25/postings.py);
the per-row arrays are small and are copied. Only the feed after the snapshot's position is
replayed. The lifecycle (load, discard, feed, snapshots) is the one memories/indexes/base.py
gives both in-process indexes; per-term statistics live in search/bm25/statistics.py.
"""
from __future__ import annotations

import functools
import hashlib
import math
import threading
import uuid
from array import array
from collections.abc import Iterator
from datetime import datetime

import numpy as np
from django.db import connection

from memories.analyzer import ANALYZER_VERSION
from memories.indexes import snapshots
from memories.indexes.base import InProcessIndex
from memories.indexes.feed import raw_datetime, raw_uuid
from memories.indexes.partitions import Versions, partition_of, partitions, rows_in
from memories.indexes.row_ids import RowIds, id_order, opened_ids, rebase_ids
from memories.indexes.vectors import until_of
from search.bm25 import compiled
from search.bm25.postings import STORED_TFS, Postings, narrowed
from search.bm25.primer import Primer, avgdl_of
from search.bm25.statistics import TermStatistics
from search.bm25.topk import Bm25, TermList

_SELECT = {
    # SQLite: the analyzed text FTS5 stores; PostgreSQL: the token arrays of memory_search
    # (tags already repeated there, so their column is empty).
    "sqlite": (
        "SELECT f.memory_id, f.content, f.tags, f.context, m.namespace, m.collection, m.decay_eligible, m.expires_at, "
        "m.superseded_by FROM memories_fts f JOIN memories m ON m.id = f.memory_id WHERE m.archived = %s",
        "f.rowid",  # the FTS table's memory_id has no index: a feed tail's rows found by it scanned every row
    ),
    "postgresql": (
        "SELECT s.memory_id, array_to_string(s.tokens, ' '), '', array_to_string(s.context_tokens, ' '), "
        "m.namespace, m.collection, m.decay_eligible, m.expires_at, m.superseded_by "
        "FROM memory_search s JOIN memories m ON m.id = s.memory_id WHERE m.archived = %s",
        "s.memory_id",
    ),
}


def fts_rowid(memory_id: uuid.UUID | str) -> int:
    """A memory's rowid in the SQLite FTS table: a stable signed 64-bit number derived from its
    uuid (O(log n) lookups, updates and deletes)."""
    raw = memory_id.bytes if isinstance(memory_id, uuid.UUID) else uuid.UUID(str(memory_id)).bytes
    return int.from_bytes(raw[:8], "big", signed=True)


class TextIndex(Primer, InProcessIndex):
    """BM25 over the stored analyzed text, per namespace, in this process."""

    snapshot_kind, label = "text", "full-text index"
    snapshot_meta = ("codes", "dead")
    # The per-row arrays: (snapshot key, attribute, dtype); small, copied when opened (they grow).
    _COLUMNS = (("ns", "_ns", np.int32), ("coll", "_coll", np.int32), ("live", "_live", np.float64),
                ("dl", "_dl", np.float32), ("alive", "_alive", np.int8), ("sig", "_sig", np.int64))

    def __init__(self, k1: float, b: float, tag_weight: int, context_weight: float = 0.0) -> None:
        self.k1, self.b, self.tag_weight, self.context_weight = k1, b, tag_weight, context_weight
        super().__init__()
        self.primer: threading.Thread | None = None  # the last thread started by _prime_soon
        self._reset()

    def _reset(self) -> None:
        super()._reset()
        self._priming: object | None = None  # the primer's token: a new one (or None) stops the last one
        self._row_ids = RowIds()  # row <-> memory id (a dead row has none)
        self._ns, self._coll = array("i"), array("i")  # a row's partition and collection codes
        self._live, self._dl = array("d"), array("f")  # a row's expiry and length
        self._alive = array("b")
        self._sig = array("q")
        self._postings = Postings()
        self._codes: dict[str, int] = {}
        self._dead = 0
        self._deaths = array("i")  # rows masked since the load, in order (for the df caches)
        self._ns_docs: dict[int, list[float]] = {}  # namespace code -> [live rows, sum of their lengths]
        self._stats = TermStatistics(self.k1, self.b)

    def _code(self, key: str) -> int:
        return self._codes.setdefault(key, len(self._codes))

    # --- rows --------------------------------------------------------------------------------

    def _add(self, memory_id: str, content: str, tags: str, context: str, namespace: str, collection: str,
             until: float) -> None:
        signature = _signature(content, tags, context, namespace, collection)
        old = self._row_ids.row(memory_id)
        if old is not None and self._alive[old] and self._sig[old] == signature:
            self._eligible.set_expiry(self._live, old, until)  # nothing this index holds but the expiry may have moved
            return
        self._version += 1
        if old is not None and self._alive[old]:
            self._kill(old)
        row = len(self._row_ids)
        tokens = content.split() + tags.split() * self.tag_weight
        counts: dict[str, float] = {}
        for token in tokens:
            counts[token] = counts.get(token, 0.0) + 1.0
        context_tokens = context.split() if self.context_weight else []
        for token in context_tokens:  # BM25F: a context word adds a fraction of a term occurrence
            counts[token] = counts.get(token, 0.0) + self.context_weight
        for term, tf in counts.items():
            rows, tfs = self._postings.own(term)
            rows.append(row)
            tfs.append(tf)
        self._row_ids.set(row, memory_id)
        ns_code = self._code("n:" + namespace)
        self._ns.append(ns_code)
        self._coll.append(self._code("c:" + collection))
        self._live.append(until)
        self._dl.append(len(tokens) + self.context_weight * len(context_tokens))
        self._alive.append(1)
        self._sig.append(signature)
        docs = self._ns_docs.setdefault(ns_code, [0, 0.0])
        docs[0] += 1
        docs[1] += self._dl[row]

    def _kill(self, row: int) -> None:
        """Mask a row (replaced or dropped): it leaves its namespace's statistics."""
        self._alive[row] = 0
        self._row_ids.set(row, None)
        self._dead += 1
        self._deaths.append(row)
        docs = self._ns_docs[self._ns[row]]
        docs[0] -= 1
        docs[1] -= self._dl[row]

    def _drop(self, memory_id: str) -> None:
        row = self._row_ids.row(memory_id)
        self._version += 1
        if row is not None and self._alive[row]:
            self._kill(row)

    def _move_expiry(self, memory_id: str, until: float) -> None:
        row = self._row_ids.row(memory_id)
        if row is not None and self._alive[row]:
            self._eligible.set_expiry(self._live, row, until)

    def _ingest(self, rows: list[tuple]) -> None:  # a superseded row goes to its namespace's superseded partition
        for memory_id, content, tags, context, namespace, collection, decay, expires, successor in rows:
            self._add(memory_id, content, tags, context or "", partition_of(namespace, successor), collection,
                      until_of(decay, expires))

    # --- lifecycle hooks (memories/indexes/base.py) ----------------------------------------

    def _load_rows(self, chunk: int) -> Iterator[int]:
        read = 0
        for rows in _stored_rows(chunk):
            self._ingest(rows)
            read += len(rows)
            yield read

    def _ready(self) -> None:
        self._prime_soon()

    def _needs_rebuild(self) -> bool:
        return self._dead * 3 > max(len(self._row_ids), 3000)

    def _fetch(self, memory_ids: set[uuid.UUID]) -> list[tuple]:
        """The indexed rows of these memories (an archived or deleted one has none)."""
        if not memory_ids:
            return []
        placeholders = ", ".join(["%s"] * len(memory_ids))
        sql, id_column = _SELECT[connection.vendor]
        keys = [fts_rowid(m) for m in memory_ids] if connection.vendor == "sqlite" else [str(m) for m in memory_ids]
        with connection.cursor() as cursor:
            cursor.execute(sql + f" AND {id_column} IN ({placeholders})", [False, *keys])
            return _typed(cursor.fetchall())

    def _apply_fetched(self, memory_ids: set[uuid.UUID], fetched: list[tuple]) -> None:
        present = {row[0] for row in fetched}
        for memory_id in memory_ids:
            if str(memory_id) not in present:
                self._drop(str(memory_id))  # forgotten, archived or collection deleted
        self._ingest(fetched)

    # --- searching ---------------------------------------------------------------------------

    def search(self, terms: list[str], *, namespace: str, collection: str | None, now: datetime, limit: int,
               versions: Versions = "current") -> list[tuple[str, float]]:
        """The best ``limit`` rows of the namespace's current facts, superseded ones, or both (``versions``)."""
        self._while_rebuilding()  # before the lock: no wait for the rebuild's chunk under way
        with self._lock, self._discarded_on_failure():
            self._follow_feed()
            self._snapshot_when_due()
            return self._score(terms, partitions(namespace, versions), collection, now, limit)

    def _score(self, terms: list[str], namespaces: tuple[str, ...], collection: str | None, now: datetime,
               limit: int) -> list[tuple[str, float]]:
        """BM25 with the statistics of these partitions (a namespace's current facts, its superseded
        ones, or both; kept as rows change, not recounted per query), the top ``limit`` found by
        MaxScore (search/bm25/topk.py)."""
        codes, docs = _partition_totals(self._codes, self._ns_docs, namespaces)
        if not codes:
            return []
        n_docs, avgdl = int(docs[0]), avgdl_of(docs)
        stats, lists = self._stats, []
        for term in terms:
            parts = self._postings.parts(term)
            df = sum(stats.doc_frequency(code, key, rows, self._ns, self._alive, self._deaths)
                     for code in codes for key, rows, _ in parts)
            if df == 0:
                continue
            idf = math.log(1 + (n_docs - df + 0.5) / (df + 0.5))
            for key, rows, tfs in parts:
                max_tf, min_dl = stats.bound(key, rows, tfs, self._dl)
                lists.append(TermList(rows, tfs, idf, max_tf, min_dl, stats.impact(key, rows, tfs, avgdl, self._dl)))
        if not lists:
            return []
        bm25 = Bm25(self.k1, self.b, avgdl)
        coll_code = None if collection is None else self._codes.get("c:" + collection, -2)
        dl = np.frombuffer(self._dl, dtype=np.float32)
        best, scores = compiled.best(lists, bm25, dl, self._eligible_rows(codes, coll_code, now.timestamp()), limit)
        return [(self._row_ids.get(i) or "", float(score)) for i, score in zip(best.tolist(), scores.tolist(), strict=True)]

    def _eligible_rows(self, ns_codes: tuple[int, ...], coll_code: int | None, now: float) -> np.ndarray:
        """Rows a search may return (live, in the partitions and collection, unexpired at ``now``),
        reused until a row changes or one of them expires."""
        def select() -> np.ndarray:
            mask = (np.frombuffer(self._alive, dtype=np.int8) != 0) & rows_in(np.frombuffer(self._ns, dtype=np.int32), ns_codes)
            if coll_code is not None:
                mask &= np.frombuffer(self._coll, dtype=np.int32) == coll_code
            return mask

        return self._eligible.get((ns_codes, coll_code), self._version, now, np.frombuffer(self._live, dtype=np.float64),
                                  select).mask

    # --- snapshots -----------------------------------------------------------------------------

    def _snapshot_params(self) -> dict[str, object]:
        return {"index": "bm25", "analyzer": ANALYZER_VERSION, "vendor": connection.vendor, "k1": self.k1,
                "b": self.b, "tag_weight": self.tag_weight, "labels": "tags+key", "context_weight": self.context_weight,
                "partitions": "superseded"}

    def _adopt(self, snapshot: snapshots.Capture) -> bool:
        arrays, terms = snapshot.arrays, snapshot.texts.get("terms", [])
        ids = opened_ids(snapshot, arrays.get("alive"))
        offsets = arrays.get("post_offsets")
        if any(arrays.get(key) is None or len(arrays[key]) != len(ids.base) for key, _, _ in self._COLUMNS) or \
                offsets is None or len(offsets) != len(terms) + 1 or \
                not len(arrays.get("post_rows", ())) == len(arrays.get("post_tfs", ())) == int(offsets[-1]) or \
                arrays.get("post_tfs", offsets).dtype not in STORED_TFS:
            snapshots.logger.warning("text index: snapshot arrays disagree in length, loading from the database")
            return False
        self._reset()
        for key, attribute, _ in self._COLUMNS:
            getattr(self, attribute).frombytes(_raw(arrays[key]))  # small per-row arrays: copied, they grow
        self._row_ids = ids.row_ids()
        self._codes = {str(key): int(code) for key, code in snapshot.meta["codes"].items()}
        self._dead = int(snapshot.meta["dead"])
        self._postings.open(terms, arrays["post_rows"], arrays["post_tfs"], offsets)
        self._ns_docs = _namespace_totals(self._alive, self._ns, self._dl)
        return True

    def _capture(self) -> snapshots.Capture | None:
        """Rows and posting lists with their feed position, copied under the lock into a few
        large arrays (not one small copy per term: those would stay in the heap afterwards)."""
        with self._lock:
            if not self._capturable():
                return None
            columns = {key: np.frombuffer(getattr(self, attribute), dtype=dtype).copy()
                       for key, attribute, dtype in self._COLUMNS}
            # The views of the RAM lists are gone when this returns: no append can meet them.
            terms, post_rows, post_tfs, offsets = self._postings.merged()
            ids = self._row_ids.capture()
            token = self._row_ids.token
            meta: dict[str, object] = {**self._snapshot_params(), "codes": dict(self._codes), "dead": self._dead}
            position = self._feed_position()
        arrays = {**columns, "ids": ids, "post_rows": post_rows, "post_offsets": offsets}
        derived = {"id_order": functools.partial(id_order, ids), "post_tfs": functools.partial(narrowed, post_tfs)}
        return snapshots.Capture(arrays, {"terms": terms}, meta, position, derived=derived,
                                 written=functools.partial(rebase_ids, self._lock, self._row_ids, token))

    # --- seams for tests and benchmarks ------------------------------------------------------

    def row_count(self) -> int:
        """Rows held, dead ones included (a replaced row is masked, then compacted by a rebuild)."""
        with self._lock:
            return len(self._row_ids)

    def add_row(self, memory_id: str, content: str, *, namespace: str, collection: str = "general", tags: str = "",
                context: str = "", until: float = math.inf) -> None:
        """Index one row's analyzed text directly, as a load does (no database: benchmarks and tests
        fill large indexes this way, then ``mark_loaded``); a row of the same id is replaced."""
        with self._lock:
            self._add(memory_id, content, tags, context, namespace, collection, until)

    def drop_row(self, memory_id: str) -> None:
        """Mask the memory's row, as a forget does."""
        with self._lock:
            self._drop(memory_id)

    def mark_loaded(self) -> None:
        """Treat the rows added directly as loaded (the change feed is still read before a search)."""
        with self._lock:
            self._loaded = True

    def score(self, terms: list[str], *, namespace: str, collection: str | None, now: datetime,
              limit: int) -> list[tuple[str, float]]:
        """The BM25 ranking of the rows held now, without reading the change feed (a search
        catches up first, then scores)."""
        with self._lock:
            return self._score(terms, (namespace,), collection, now, limit)

    def posting(self, term: str) -> tuple[np.ndarray, np.ndarray] | None:
        """The term's whole posting list (rows, float32 tfs), copied: for brute-force references."""
        with self._lock:
            whole = self._postings.whole(term)
            return None if whole is None else (whole[0].copy(), whole[1].copy())

    def columns(self, namespace: str) -> dict[str, np.ndarray] | None:
        """Copies of the per-row arrays (``alive``, ``in_namespace``, ``dl``, ``live``, ``coll``) for
        brute-force references; None when the namespace was never seen."""
        with self._lock:
            code = self._codes.get("n:" + namespace)
            if code is None:
                return None
            return {"alive": np.frombuffer(self._alive, dtype=np.int8) != 0,
                    "in_namespace": np.frombuffer(self._ns, dtype=np.int32) == code,
                    "dl": np.frombuffer(self._dl, dtype=np.float32).copy(),
                    "live": np.frombuffer(self._live, dtype=np.float64).copy(),
                    "coll": np.frombuffer(self._coll, dtype=np.int32).copy()}

    def namespace_code(self, namespace: str) -> int | None:
        """The namespace's code in the per-row arrays and the statistics' keys (None: never seen)."""
        return self._codes.get("n:" + namespace)

    def memory_id(self, row: int) -> str | None:
        """The memory at ``row`` (None: a dead row)."""
        with self._lock:
            return self._row_ids.get(row)

    @property
    def row_ids(self) -> RowIds:
        """Row <-> memory id of the rows held (a dead row has none)."""
        return self._row_ids

    @property
    def statistics(self) -> TermStatistics:
        """The per-term statistics kept between searches (what the primer fills ahead)."""
        return self._stats

    @property
    def postings(self) -> Postings:
        """The posting lists (in RAM, and mapped from a snapshot), for tests to read."""
        return self._postings


def _partition_totals(codes: dict[str, int], ns_docs: dict[int, list[float]],
                      names: tuple[str, ...]) -> tuple[tuple[int, ...], list[float]]:
    """The codes of the named partitions that hold live rows, and their rows and total length together."""
    found = tuple(code for code in (codes.get("n:" + name) for name in names) if code is not None and ns_docs.get(code, [0])[0] > 0)
    return found, [sum(ns_docs[code][i] for code in found) for i in (0, 1)]


def _namespace_totals(alive_flags: array, ns_codes: array, lengths: array) -> dict[int, list[float]]:
    """Each namespace's live rows and their total length, from the per-row arrays (an opened snapshot's)."""
    alive = np.frombuffer(alive_flags, dtype=np.int8) != 0
    ns = np.frombuffer(ns_codes, dtype=np.int32)[alive]
    counts = np.bincount(ns)
    totals = np.bincount(ns, weights=np.frombuffer(lengths, dtype=np.float32)[alive].astype(np.float64))
    return {code: [int(counts[code]), float(totals[code])] for code in np.flatnonzero(counts).tolist()}


def _stored_rows(chunk: int) -> Iterator[list[tuple]]:
    """Every live memory's stored analyzed text and place, ``chunk`` rows at a time."""
    with connection.cursor() as cursor:
        cursor.execute(_SELECT[connection.vendor][0], [False])
        while rows := cursor.fetchmany(chunk):
            yield _typed(rows)


def _raw(values: np.ndarray) -> memoryview:
    """A numpy array's bytes without a copy (``array.frombytes`` wants a byte-format buffer)."""
    return memoryview(values).cast("B")


def _signature(*fields: str) -> int:
    """A row's text and place, stable across processes (``hash`` of a str is salted per process)."""
    digest = hashlib.blake2b("\x1f".join(fields).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


def _typed(rows: list[tuple]) -> list[tuple]:
    """SQLite returns datetimes as text and booleans as ints through a raw cursor."""
    out = []
    for raw_id, content, tags, context, namespace, collection, decay, expires, successor in rows:
        out.append((str(raw_uuid(raw_id)), content, tags, context, namespace, collection, bool(decay),
                    raw_datetime(expires), None if successor is None else raw_uuid(successor)))
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
        if _index is not None:
            _index.stop_rebuild()
        _index = None
