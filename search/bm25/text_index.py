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
row: the posting lists stay memory-mapped read-only (shared between processes) and a term's
list is copied into RAM only when a new row adds to it; the per-row arrays are small and are
copied. Only the feed after the snapshot's position is replayed.
"""
from __future__ import annotations

import functools
import hashlib
import math
import threading
import uuid
from array import array
from datetime import datetime

import numpy as np
from django.db import DatabaseError, connection

from memories.analyzer import ANALYZER_VERSION
from memories.indexes import snapshots
from memories.indexes.eligible import EligibleRows
from memories.indexes.feed import (
    FeedReader,
    discarded_on_failure,
    expiries_of,
    let_waiters_in,
    raw_datetime,
    raw_uuid,
    split_expiries,
)
from memories.indexes.row_ids import RowIds, id_order, opened_ids, rebase_ids
from memories.indexes.vectors import until_of
from search.bm25 import compiled
from search.bm25.topk import Bm25, TermList, tf_scale

# A list this long keeps its largest impact (search/bm25/topk.py: a tight bound prunes earlier),
# computed at this much above the current average row length, so it holds while that grows.
IMPACT_MIN_POSTINGS = 4096
IMPACT_AVGDL_HEADROOM = 1.05
# After a load or an open, the statistics a term's first search would compute (a pass over its
# list each) are computed ahead on a daemon thread for every list this long, for the namespaces
# holding at least this share of the rows (at most PRIME_NAMESPACES of them).
PRIME_MIN_POSTINGS = IMPACT_MIN_POSTINGS
PRIME_MIN_SHARE = 0.05
PRIME_NAMESPACES = 8
# The dtypes a snapshot's posting tfs are read in (bm25_topk.tf_scale: what each stored value
# means). float16 is what snapshots before uint8 held: still read, rewritten at the next snapshot.
_STORED_TFS = frozenset(np.dtype(t) for t in (np.float32, np.float16, np.uint8, np.uint16))
_NARROW_CHUNK = 1 << 22  # postings checked and converted at a time (bounded temporaries at capture)
_TAIL = "\x00+"  # the statistics key of a term's postings added in RAM beside its snapshot list (no term holds NUL)
_SELECT = {
    # SQLite: the analyzed text FTS5 stores; PostgreSQL: the token arrays of memory_search
    # (tags already repeated there, so their column is empty).
    "sqlite": (
        "SELECT f.memory_id, f.content, f.tags, f.context, m.namespace, m.collection, m.decay_eligible, m.expires_at "
        "FROM memories_fts f JOIN memories m ON m.id = f.memory_id WHERE m.archived = %s",
        "f.rowid",  # the FTS table's memory_id has no index: a feed tail's rows found by it scanned every row
    ),
    "postgresql": (
        "SELECT s.memory_id, array_to_string(s.tokens, ' '), '', array_to_string(s.context_tokens, ' '), "
        "m.namespace, m.collection, m.decay_eligible, m.expires_at "
        "FROM memory_search s JOIN memories m ON m.id = s.memory_id WHERE m.archived = %s",
        "s.memory_id",
    ),
}


def fts_rowid(memory_id: uuid.UUID | str) -> int:
    """A memory's rowid in the SQLite FTS table: a stable signed 64-bit number derived from its
    uuid (O(log n) lookups, updates and deletes)."""
    raw = memory_id.bytes if isinstance(memory_id, uuid.UUID) else uuid.UUID(str(memory_id)).bytes
    return int.from_bytes(raw[:8], "big", signed=True)


def _avgdl(docs: list[float]) -> float:
    """A namespace's average row length, from its [live rows, their total length] (at least 1)."""
    return max(docs[1] / docs[0], 1.0)


class TextIndex:
    def __init__(self, k1: float, b: float, tag_weight: int, context_weight: float = 0.0) -> None:
        self.k1, self.b, self.tag_weight, self.context_weight = k1, b, tag_weight, context_weight
        self._lock = threading.RLock()
        self._loaded = False
        self._feed = FeedReader()
        self._keeper = snapshots.Keeper("text")
        self.loaded_from: str | None = None  # "database" or "snapshot", once loaded
        self.primer: threading.Thread | None = None  # the last thread started by _prime_soon
        self._reset()

    def _reset(self) -> None:
        self._priming: object | None = None  # the primer's token: a new one (or None) stops the last one
        self._row_ids = RowIds()  # row <-> memory id (a dead row has none)
        self._ns = array("i")
        self._coll = array("i")
        self._live = array("d")
        self._dl = array("f")
        self._alive = array("b")
        self._sig = array("q")
        self._postings: dict[str, tuple[array, array]] = {}  # in RAM: every term of a load from the DB
        # Opened from a snapshot: term -> its slice of the mapped posting arrays (until _postings has it).
        self._snap_terms: dict[str, int] = {}
        self._snap_rows = np.zeros(0, dtype=np.int32)
        self._snap_tfs = np.zeros(0, dtype=np.float32)
        self._snap_offsets = np.zeros(1, dtype=np.int64)
        self._codes: dict[str, int] = {}
        self._dead = 0
        self._deaths = array("i")  # rows masked since the load, in order (for the df caches)
        self._ns_docs: dict[int, list[float]] = {}  # namespace code -> [live rows, sum of their lengths]
        self._term_stats: dict[str, tuple[int, float, float]] = {}  # term -> (postings seen, max tf, min dl)
        self._impacts: dict[str, tuple[int, float, float]] = {}  # term -> (postings seen, avgdl, largest impact)
        self._df: dict[tuple[int, str], tuple[int, int, int]] = {}  # (ns, term) -> (df, postings seen, deaths seen)
        self._eligible = EligibleRows()
        self._version = 0  # bumped by every change of a row: the eligible masks depend on it

    def _code(self, key: str) -> int:
        return self._codes.setdefault(key, len(self._codes))

    @property
    def loaded(self) -> bool:
        return self._loaded

    def row_count(self) -> int:
        """Rows held, dead ones included (a replaced row is masked, then compacted by a rebuild)."""
        with self._lock:
            return len(self._row_ids)

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
            rows, tfs = self._own_posting(term)
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

    def _own_posting(self, term: str) -> tuple[array, array]:
        """The term's postings in RAM, where rows are appended: the whole list, or, for a term the
        snapshot has a list of, only the postings added since it was opened (that list is never
        copied: a feed tail touching the common terms copied most of them, seconds and hundreds
        of MB at a million rows)."""
        posting = self._postings.get(term)
        if posting is None:
            posting = self._postings[term] = (array("i"), array("f"))
        return posting

    def _parts(self, term: str) -> list[tuple[str, np.ndarray, np.ndarray]]:
        """The term's posting lists as (statistics key, rows, stored tfs) views: the snapshot's list
        and the RAM one. A row is in one of them only (rows are appended, never re-numbered), so they
        are scored as two lists of the same term; the RAM list of a term the snapshot also has
        keeps its statistics under its own key. Index lock held; views end with the caller's hold
        (an in-RAM list cannot grow while a view of it lives)."""
        parts: list[tuple[str, np.ndarray, np.ndarray]] = []
        index = self._snap_terms.get(term)
        if index is not None:
            start, stop = int(self._snap_offsets[index]), int(self._snap_offsets[index + 1])
            parts.append((term, self._snap_rows[start:stop], self._snap_tfs[start:stop]))
        posting = self._postings.get(term)
        if posting is not None and len(posting[0]):
            parts.append((term + _TAIL if parts else term, np.frombuffer(posting[0], dtype=np.int32),
                          np.frombuffer(posting[1], dtype=np.float32)))
        return parts

    def _posting(self, term: str) -> tuple[np.ndarray, np.ndarray] | None:
        """The term's whole posting list, its parts joined (a copy when it has two): for the
        brute-force references of tests and benchmarks, not for searches. Index lock held."""
        parts = self._parts(term)
        if not parts:
            return None
        if len(parts) == 1:
            return parts[0][1], _tfs(parts[0][2])
        return np.concatenate([rows for _, rows, _ in parts]), np.concatenate([_tfs(tfs) for _, _, tfs in parts])

    def _drop(self, memory_id: str) -> None:
        row = self._row_ids.row(memory_id)
        self._version += 1
        if row is not None and self._alive[row]:
            self._kill(row)

    def _ingest(self, rows: list[tuple]) -> None:
        for memory_id, content, tags, context, namespace, collection, decay, expires in rows:
            self._add(memory_id, content, tags, context or "", namespace, collection, until_of(decay, expires))

    def _load(self) -> None:
        self._loaded = False
        self._reset()
        self._feed.start()
        with connection.cursor() as cursor:
            cursor.execute(_SELECT[connection.vendor][0], [False])
            self._ingest(_typed(cursor.fetchall()))
        self._loaded, self.loaded_from = True, "database"
        self._keeper.loaded()
        self._prime_soon()

    def _discard(self) -> None:
        """After a failure: fresh arrays (nothing shares a buffer with a dead search), reload next time."""
        self._loaded = False
        self._reset()

    def _catch_up(self) -> None:
        if self._loaded and self._dead * 3 > max(len(self._row_ids), 3000):
            self._load()
            return
        if not self._loaded and not self._open_snapshot():
            self._load()
            return
        changes = self._feed.read()
        if changes is None:
            self._load()
            return
        if not changes:
            return
        ids, expiries = split_expiries(changes)
        try:
            rows = self._rows_of(ids)
            moved = expiries_of(expiries)
        except DatabaseError:
            self._feed.rewind(changes)
            raise
        present = {row[0] for row in rows}
        for memory_id in ids:
            if str(memory_id) not in present:
                self._drop(str(memory_id))  # forgotten, archived or collection deleted
        self._ingest(rows)
        for memory_id in expiries:
            if memory_id not in moved:
                self._drop(str(memory_id))
                continue
            row = self._row_ids.row(str(memory_id))
            if row is not None and self._alive[row]:
                self._eligible.set_expiry(self._live, row, moved[memory_id])
        self._keeper.note(len(ids) + len(expiries))

    def _rows_of(self, ids: set[uuid.UUID]) -> list[tuple]:
        """The indexed rows of these memories (an archived or deleted one has none)."""
        if not ids:
            return []
        placeholders = ", ".join(["%s"] * len(ids))
        sql, id_column = _SELECT[connection.vendor]
        keys = [fts_rowid(m) for m in ids] if connection.vendor == "sqlite" else [str(m) for m in ids]
        with connection.cursor() as cursor:
            cursor.execute(sql + f" AND {id_column} IN ({placeholders})", [False, *keys])
            return _typed(cursor.fetchall())

    def search(self, terms: list[str], *, namespace: str, collection: str | None, now: datetime, limit: int) -> list[tuple[str, float]]:
        with self._lock:
            with discarded_on_failure(self._discard, "full-text index"):
                self._catch_up()
                self._keeper.maybe_start(self._capture)
                return self._score(terms, namespace, collection, now, limit)

    def _score(self, terms: list[str], namespace: str, collection: str | None, now: datetime,
               limit: int) -> list[tuple[str, float]]:
        """BM25 with the namespace's own statistics (kept as rows change, not recounted per
        query), the top ``limit`` found by MaxScore (search/bm25/topk.py)."""
        ns_code = self._codes.get("n:" + namespace)
        docs = self._ns_docs.get(ns_code) if ns_code is not None else None
        if ns_code is None or docs is None or docs[0] <= 0:
            return []
        n_docs, avgdl = int(docs[0]), _avgdl(docs)
        lists: list[TermList] = []
        for term in terms:
            parts = self._parts(term)
            df = sum(self._doc_frequency(ns_code, key, rows) for key, rows, _ in parts)
            if df == 0:
                continue
            idf = math.log(1 + (n_docs - df + 0.5) / (df + 0.5))
            for key, rows, tfs in parts:
                max_tf, min_dl = self._list_stats(key, rows, tfs)
                lists.append(TermList(rows, tfs, idf, max_tf, min_dl, self._list_impact(key, rows, tfs, avgdl)))
        if not lists:
            return []
        bm25 = Bm25(self.k1, self.b, avgdl)
        coll_code = None if collection is None else self._codes.get("c:" + collection, -2)
        dl = np.frombuffer(self._dl, dtype=np.float32)
        best, scores = compiled.best(lists, bm25, dl, self._eligible_rows(ns_code, coll_code, now.timestamp()), limit)
        return [(self._row_ids.get(i) or "", float(score)) for i, score in zip(best.tolist(), scores.tolist(), strict=True)]

    def _doc_frequency(self, ns_code: int, term: str, rows: np.ndarray) -> int:
        """Live rows of the namespace holding the term: counted once, then brought up to date
        with the postings appended and the rows masked since (lists only grow; rows die once)."""
        cached = self._df.get((ns_code, term))
        df, seen, deaths_seen = cached if cached is not None else (0, 0, 0)
        if cached is not None and seen == rows.size and deaths_seen == len(self._deaths):
            return df
        ns = np.frombuffer(self._ns, dtype=np.int32)
        alive = np.frombuffer(self._alive, dtype=np.int8)
        new = rows[seen:]
        df += int(np.count_nonzero((ns[new] == ns_code) & (alive[new] != 0)))
        if seen and deaths_seen < len(self._deaths):
            died = np.frombuffer(self._deaths, dtype=np.int32)[deaths_seen:]
            died = died[ns[died] == ns_code]
            old = rows[:seen]
            at = np.minimum(np.searchsorted(old, died), old.size - 1)
            df -= int(np.count_nonzero(old[at] == died))
        self._df[(ns_code, term)] = (df, rows.size, len(self._deaths))
        return df

    def _list_stats(self, term: str, rows: np.ndarray, tfs: np.ndarray) -> tuple[float, float]:
        """The list's largest tf and shortest row (for the term's score bound), kept as it grows."""
        seen, max_tf, min_dl = self._term_stats.get(term, (0, 0.0, math.inf))
        if seen < rows.size:
            dl = np.frombuffer(self._dl, dtype=np.float32)
            max_tf = max(max_tf, float(tfs[seen:].max()) * tf_scale(tfs))
            min_dl = min(min_dl, float(dl[rows[seen:]].min()))
            self._term_stats[term] = (rows.size, max_tf, min_dl)
        return max_tf, min_dl

    def _list_impact(self, term: str, rows: np.ndarray, tfs: np.ndarray, avgdl: float) -> tuple[float, float] | None:
        """The term's largest impact over its postings at an avgdl a little above ``avgdl``
        (search/bm25/topk.py): kept as the list grows, recomputed when avgdl passes it. Short
        lists go without (their loose bound costs little)."""
        if rows.size < IMPACT_MIN_POSTINGS:
            return None
        cached = self._impacts.get(term)
        dl = np.frombuffer(self._dl, dtype=np.float32)
        if cached is None or cached[1] < avgdl:
            at = avgdl * IMPACT_AVGDL_HEADROOM
            seen, best = 0, 0.0
        else:
            seen, at, best = cached
        if seen < rows.size:
            reference = Bm25(self.k1, self.b, at)
            best = max(best, float(reference.impacts(tfs[seen:], np.take(dl, rows[seen:])).max()))
            self._impacts[term] = (rows.size, at, best)
        return at, best

    def _eligible_rows(self, ns_code: int, coll_code: int | None, now: float) -> np.ndarray:
        """Rows a search may return (live, in the namespace and collection, unexpired at ``now``),
        reused until a row changes or one of them expires."""
        def select() -> np.ndarray:
            mask = (np.frombuffer(self._alive, dtype=np.int8) != 0) & (np.frombuffer(self._ns, dtype=np.int32) == ns_code)
            if coll_code is not None:
                mask &= np.frombuffer(self._coll, dtype=np.int32) == coll_code
            return mask

        return self._eligible.get((ns_code, coll_code), self._version, now, np.frombuffer(self._live, dtype=np.float64),
                                  select).mask

    # --- snapshots -----------------------------------------------------------------------------

    _COLUMNS = (("ns", "_ns", np.int32), ("coll", "_coll", np.int32), ("live", "_live", np.float64),
                ("dl", "_dl", np.float32), ("alive", "_alive", np.int8), ("sig", "_sig", np.int64))

    def _snapshot_params(self) -> dict[str, object]:
        return {"index": "bm25", "analyzer": ANALYZER_VERSION, "vendor": connection.vendor, "k1": self.k1,
                "b": self.b, "tag_weight": self.tag_weight, "context_weight": self.context_weight}

    def _open_snapshot(self) -> bool:
        """Take the rows and posting lists from this store's snapshot (the feed after it is replayed next)."""
        snapshot = snapshots.read("text", self._snapshot_params(), ("codes", "dead"))
        if snapshot is None:
            return False
        arrays, terms = snapshot.arrays, snapshot.texts.get("terms", [])
        ids = opened_ids(snapshot, arrays.get("alive"))
        offsets = arrays.get("post_offsets")
        if any(arrays.get(key) is None or len(arrays[key]) != len(ids.base) for key, _, _ in self._COLUMNS) or \
                offsets is None or len(offsets) != len(terms) + 1 or \
                not len(arrays.get("post_rows", ())) == len(arrays.get("post_tfs", ())) == int(offsets[-1]) or \
                arrays.get("post_tfs", offsets).dtype not in _STORED_TFS:
            snapshots.logger.warning("text index: snapshot arrays disagree in length, loading from the database")
            return False
        self._reset()
        for key, attribute, _ in self._COLUMNS:
            getattr(self, attribute).frombytes(_raw(arrays[key]))  # small per-row arrays: copied, they grow
        self._row_ids = ids.row_ids()
        self._codes = {str(key): int(code) for key, code in snapshot.meta["codes"].items()}
        self._dead = int(snapshot.meta["dead"])
        self._snap_terms = dict(zip(terms, range(len(terms)), strict=True))
        self._snap_rows, self._snap_tfs, self._snap_offsets = arrays["post_rows"], arrays["post_tfs"], offsets
        self._count_namespaces()
        self._feed.resume(snapshot.position.change_id, snapshot.position.memory_id)
        self._loaded, self.loaded_from = True, "snapshot"
        self._keeper.opened(0)
        self._prime_soon()
        return True

    # --- statistics computed ahead ---------------------------------------------------------------

    def _prime_soon(self) -> None:
        """Start computing, on a daemon thread, what the first search of each long list would: its
        largest tf and shortest row, its largest impact, and its documents in the large namespaces
        (a pass over the list each: at a million rows a term's first search took a few ms more
        than the next ones). One term per hold of the lock, so searches go on in between; a load,
        an open or a discard started meanwhile stops it. Then, for a large index, the compiled
        scorer's load is started (search/bm25/compiled.py). Index lock held."""
        self._priming = token = object()
        self.primer = threading.Thread(target=self._prime, args=(token,), daemon=True, name="bhgbrain-text-prime")
        self.primer.start()

    def _prime(self, token: object) -> None:
        with self._lock:
            if self._priming is not token:
                return
            terms = self._long_terms()
            namespaces = self._large_namespaces()
        for term in terms:
            with self._lock:
                if self._priming is not token:
                    return
                self._prime_term(term, namespaces)
            let_waiters_in()
        with self._lock:
            if self._priming is token:  # last, so numba's import does not slow a new process's first searches
                self._prepare_compiled()

    def _prepare_compiled(self) -> None:
        """Have the compiled scorer (search/bm25/compiled.py) loaded in the background when this
        index is large enough to use it, for the kinds of lists it holds: in RAM, and mapped from
        the snapshot. Index lock held."""
        empty = np.zeros(0, dtype=np.int32)
        lists = [TermList(empty, np.zeros(0, dtype=np.float32), 0.0, 0.0, 0.0)]
        if self._snap_terms:
            lists.append(TermList(self._snap_rows[:0], self._snap_tfs[:0], 0.0, 0.0, 0.0))
        compiled.prepare(len(self._row_ids), lists, np.frombuffer(self._dl, dtype=np.float32),
                              np.zeros(0, dtype=np.bool_))

    def _long_terms(self) -> list[str]:
        """Terms with at least PRIME_MIN_POSTINGS postings, the longest first."""
        sizes = {term: len(posting[0]) for term, posting in self._postings.items()}
        offsets = self._snap_offsets
        for term, index in self._snap_terms.items():
            sizes[term] = sizes.get(term, 0) + int(offsets[index + 1] - offsets[index])
        return sorted((t for t, n in sizes.items() if n >= PRIME_MIN_POSTINGS), key=lambda t: -sizes[t])

    def _large_namespaces(self) -> list[tuple[int, float]]:
        """(code, avgdl) of the namespaces holding at least PRIME_MIN_SHARE of the live rows."""
        total = sum(docs[0] for docs in self._ns_docs.values())
        large = sorted(((int(docs[0]), code, _avgdl(docs)) for code, docs in self._ns_docs.items()
                        if docs[0] > 0 and docs[0] >= PRIME_MIN_SHARE * total), reverse=True)
        return [(code, avgdl) for _, code, avgdl in large[:PRIME_NAMESPACES]]

    def _prime_term(self, term: str, namespaces: list[tuple[int, float]]) -> None:
        """One term's statistics (its views of the posting arrays end with this call). Index lock held."""
        for key, rows, tfs in self._parts(term):
            self._list_stats(key, rows, tfs)
            if namespaces:
                self._list_impact(key, rows, tfs, max(avgdl for _, avgdl in namespaces))
            for code, _ in namespaces:
                self._doc_frequency(code, key, rows)

    def _merged_postings(self) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
        """Every term's posting list, one after another (its parts joined: a mapped list, then the
        postings added to it in RAM, so it stays sorted), with the offsets. Index lock held."""
        terms = list(dict.fromkeys([*self._snap_terms, *self._postings]))
        rows: list[np.ndarray] = []
        tfs: list[np.ndarray] = []
        offsets = np.zeros(len(terms) + 1, dtype=np.int64)
        for position, term in enumerate(terms, start=1):
            parts = self._parts(term)
            rows.extend(part_rows for _, part_rows, _ in parts)
            tfs.extend(_tfs(part_tfs) for _, _, part_tfs in parts)
            offsets[position] = offsets[position - 1] + sum(len(part_rows) for _, part_rows, _ in parts)
        if not rows:
            return terms, np.zeros(0, np.int32), np.zeros(0, np.float32), offsets
        merged = terms, np.concatenate(rows), np.concatenate(tfs), offsets
        rows.clear()  # drop the views of the RAM lists now (see _parts)
        tfs.clear()
        return merged

    def _count_namespaces(self) -> None:
        """Each namespace's live rows and their total length, from the per-row arrays."""
        alive = np.frombuffer(self._alive, dtype=np.int8) != 0
        ns = np.frombuffer(self._ns, dtype=np.int32)[alive]
        counts = np.bincount(ns)
        lengths = np.bincount(ns, weights=np.frombuffer(self._dl, dtype=np.float32)[alive].astype(np.float64))
        self._ns_docs = {code: [int(counts[code]), float(lengths[code])] for code in np.flatnonzero(counts).tolist()}

    def _capture(self) -> snapshots.Capture | None:
        """Rows and posting lists with their feed position, copied under the lock into a few
        large arrays (not one small copy per term: those would stay in the heap afterwards)."""
        with self._lock:
            if not self._loaded or (self._feed.last_change and self._feed.last_memory_id is None):
                return None
            columns = {key: np.frombuffer(getattr(self, attribute), dtype=dtype).copy()
                       for key, attribute, dtype in self._COLUMNS}
            # The views of the RAM lists are gone when this returns: no append can meet them.
            terms, post_rows, post_tfs, offsets = self._merged_postings()
            ids = self._row_ids.capture()
            token = self._row_ids.token
            meta: dict[str, object] = {**self._snapshot_params(), "codes": dict(self._codes), "dead": self._dead}
            position = snapshots.FeedPosition(self._feed.last_change, self._feed.last_memory_id)
        arrays = {**columns, "ids": ids, "post_rows": post_rows, "post_offsets": offsets}
        derived = {"id_order": functools.partial(id_order, ids), "post_tfs": functools.partial(_narrowed, post_tfs)}
        return snapshots.Capture(arrays, {"terms": terms}, meta, position, derived=derived,
                                 written=functools.partial(rebase_ids, self._lock, self._row_ids, token))

    def save_snapshot(self) -> bool:
        """Write the snapshot now, on this thread (the background writer does the same)."""
        return self._keeper.save_now(self._capture)

    @property
    def snapshot_keeper(self) -> snapshots.Keeper:
        """When this index writes its snapshot (its background thread, for tests to wait on)."""
        return self._keeper


def _tfs(stored: np.ndarray) -> np.ndarray:
    """Stored tfs as float32 tfs (a copy when they are stored scaled or narrower)."""
    if stored.dtype == np.float32:
        return stored
    return stored.astype(np.float32) * np.float32(tf_scale(stored))


def _narrowed(tfs: np.ndarray) -> np.ndarray:
    """The tfs to save: twice each as uint8 (or uint16) when every one is a multiple of 0.5 that
    fits (the default weights give multiples of 0.5), else as they are. A quarter (a half) of the
    mapped bytes a serving process reads, the same scores (bm25_topk.Bm25 scales exactly), and
    float32 arithmetic as fast as on float32 tfs: float16, saved before, made the FTS step of a
    million-row search ~1.5 ms slower (numpy converts float16 in software, ~2 ns a posting)."""
    for dtype in (np.uint8, np.uint16):
        narrow = np.empty(len(tfs), dtype=dtype)
        limit = np.iinfo(dtype).max
        for start in range(0, len(tfs), _NARROW_CHUNK):
            doubled = tfs[start:start + _NARROW_CHUNK] * np.float32(2)
            if doubled.size and (doubled.min() < 0 or doubled.max() > limit or np.any(doubled != np.rint(doubled))):
                break
            narrow[start:start + _NARROW_CHUNK] = doubled
        else:
            return narrow
    return tfs


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
    for raw_id, content, tags, context, namespace, collection, decay, expires in rows:
        out.append((str(raw_uuid(raw_id)), content, tags, context, namespace, collection, bool(decay),
                    raw_datetime(expires)))
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
