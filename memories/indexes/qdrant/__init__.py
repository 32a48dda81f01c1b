"""The Qdrant vector index (``vector_index: "qdrant"``): a server, a cluster, or local mode.

A memory's point (the original BHGBrain 1.3+ layout): memories/indexes/qdrant/points.py; the
client and the collections: memories/indexes/qdrant/collections.py.

Writes reach Qdrant through the change feed (``vector_changes``, written in the memory's
own transaction): :meth:`QdrantVectorIndex.sync` applies every row after this store's
cursor (``VectorIndexCursor``) — upserting the memories that exist and are indexable,
deleting the others — and advances the cursor. Every write calls it after commit; the
scheduled ``vector_sync`` calls it too, so a Qdrant outage delays changes but loses none, and
a deletion reaches Qdrant even if the process crashed right after its commit. A restore
deletes only the points of memories this store had and the backup has not: other devices'
points in a shared Qdrant are never touched.
"""
from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings
from django.db import connection, transaction

from bhgbrain_site.core.config import QdrantConfig
from memories.conversations import contexts
from memories.embeddings import from_bytes
from memories.indexes import sparse
from memories.indexes.feed import split_expiries
from memories.indexes.feed_cursor import has_news, read_after
from memories.indexes.partitions import Versions
from memories.indexes.qdrant.collections import QdrantCollections
from memories.indexes.qdrant.points import (
    collection_name,
    expiry_payload,
    memory_from_point,
    memory_sparse,
    point_payload,
    sparse_vector,
    stored_point,
)
from memories.indexes.vectors import StoredPoint, VectorHit
from memories.models import ChangeFeedEntry, Memory, VectorIndexCursor

logger = logging.getLogger("bhgbrain.qdrant")

SYNC_BATCH = 1000


class SparseVectorsMissing(LookupError):
    """A collection without the ``bm25`` sparse vector that the server could not upgrade: the
    caller answers full-text from the in-process index instead."""


class QdrantVectorIndex:
    """The vector index on Qdrant: writes pushed from the change feed, dense and BM25 reads."""

    kind = "qdrant"  # the config's vector_index value
    shared = True

    def __init__(self, config: QdrantConfig, model_id: str, dimensions: int) -> None:
        self.model_id = model_id
        self.dimensions = dimensions
        self.store = QdrantCollections(config, dimensions)
        self._lock = threading.RLock()
        self._upgraded = False

    # ------------------------------------------------------------------ the Qdrant it talks to

    @property
    def location(self) -> str:
        return self.store.location

    def client(self) -> Any:
        return self.store.client()

    def close(self) -> None:
        self.store.close()

    def collections(self, *, fresh: bool = False) -> list[str]:
        """Every ``bhgbrain_*`` collection (listing cached for a few seconds unless ``fresh``)."""
        return self.store.collections(fresh=fresh)

    def upgrade(self) -> list[str]:
        """Back-fill the sparse vectors of collections that lack them (sync and repair call it)."""
        return self.store.upgrade()

    def optimize(self, *, deleted_threshold: float) -> int:
        """Start Qdrant's optimizers on every bhgbrain collection (compaction)."""
        return self.store.optimize(deleted_threshold=deleted_threshold)

    # ------------------------------------------------------------------ writes (via the feed)

    def upsert(self, memory: Memory, *, change_id: int | None = None) -> None:
        self.sync()

    def delete(self, memory_id: str) -> None:
        self.sync()

    def _indexable(self, memory: Memory) -> bool:
        """Every live memory gets a point (its BM25 sparse vector at least)..."""
        return not memory.archived

    def _dense(self, memory: Memory) -> list[float] | None:
        """...and the dense vector when it has one of this model (else it is full-text only)."""
        if memory.embedding is None or memory.embedding_model != self.model_id:
            return None
        vector = from_bytes(memory.embedding)
        return vector.tolist() if vector.shape[0] == self.dimensions else None

    def push(self, memory_ids: set[uuid.UUID], reset: bool) -> None:
        """Upsert these memories' points (every live memory's too when ``reset``) and delete the
        points of those gone, archived or moved."""
        from qdrant_client import models

        rows = {m.id: m for m in Memory.objects.filter(id__in=memory_ids)} if memory_ids else {}
        if reset:  # the whole store was replaced: every memory it now holds
            rows.update({m.id: m for m in Memory.objects.filter(archived=False)})
        points: dict[str, list[Any]] = {}
        context = contexts(m for m in rows.values() if self._indexable(m))
        for memory in rows.values():
            if self._indexable(memory):
                name = collection_name(memory.namespace, memory.collection)
                self.store.ensure(name)  # first: an old collection may turn out unable to hold a sparse vector
                vector: dict[str, Any] = {}
                if not self.store.sparse_missing(name):
                    vector[sparse.VECTOR_NAME] = memory_sparse(memory, context.get(str(memory.id), ""))
                dense = self._dense(memory)
                if dense is not None:
                    vector[""] = dense
                if not vector:
                    continue  # an old collection on an old server: nothing it can hold
                points.setdefault(name, []).append(
                    models.PointStruct(id=str(memory.id), vector=vector, payload=point_payload(memory)))
        # Drop the old points of what changed: deleted, archived or moved memories, and upserted
        # ones wherever they no longer belong. A live memory's points can only be in its own
        # namespace's collections; a deleted one's namespace is unknown, so every collection.
        gone = [str(i) for i in memory_ids if i not in rows]
        client = self.client()
        for name in self.store.collections(fresh=bool(gone)):  # a deletion must not miss a brand-new collection
            wanted = {p.id for p in points.get(name, [])}
            doomed = [i for i in gone if i not in wanted]
            doomed += [str(m.id) for m in rows.values()
                       if str(m.id) not in wanted and name.startswith(collection_name(m.namespace, ""))]
            if doomed:
                client.delete(name, points_selector=models.PointIdsList(points=doomed), wait=True)
        for name, batch in points.items():
            for start in range(0, len(batch), 256):
                client.upsert(name, points=batch[start:start + 256], wait=True)

    def _push_expiries(self, memory_ids: set[uuid.UUID]) -> set[uuid.UUID]:
        """Memories whose only change is their expiry: those two payload keys set on their point,
        one batch request per collection (no row, vector or sparse vector rebuilt). Returns the
        memories to push whole instead: gone or archived ones (their points are deleted there),
        those that no longer expire, and those of a batch that failed (a point missing)."""
        from qdrant_client import models

        if not memory_ids:
            return set()
        rows = Memory.objects.filter(id__in=memory_ids, archived=False).values_list(
            "id", "namespace", "collection", "decay_eligible", "expires_at")
        batches: dict[str, dict[uuid.UUID, Any]] = {}
        for memory_id, namespace, collection, decay_eligible, expires_at in rows:
            payload = expiry_payload(decay_eligible, expires_at)
            if payload["expires_at"] is None:
                continue  # set to null, a key is removed (Qdrant's merge): the layout keeps it, so push whole
            batches.setdefault(collection_name(namespace, collection), {})[memory_id] = models.SetPayloadOperation(
                set_payload=models.SetPayload(payload=payload, points=[str(memory_id)]))
        whole = memory_ids - {memory_id for batch in batches.values() for memory_id in batch}
        for name, batch in batches.items():
            try:
                self.client().batch_update_points(name, update_operations=list(batch.values()), wait=True)
            except Exception:  # noqa: BLE001 - a point or collection missing: an upsert of the whole point mends it
                logger.info("qdrant: expiry-only update of %d points in %s failed; pushing them whole", len(batch), name)
                whole |= batch.keys()
        return whole

    def refill(self) -> int:
        """Push every live memory again when Qdrant holds fewer points than this store has live
        memories: a Qdrant that lost its data (a wiped volume, a collection deleted by hand) while
        this store's feed cursor says everything was pushed. Upserts are idempotent, so nothing
        is duplicated; vectors come from the database (nothing is embedded). Returns the memories
        pushed, 0 when nothing is missing."""
        rows = Memory.objects.filter(archived=False)
        if self.store.any_sparse_missing():  # an old server: a memory without a dense vector gets no point there
            rows = rows.filter(embedding_model=self.model_id, embedding__isnull=False)
        live = rows.count()
        if not live:
            return 0
        client = self.client()
        held = sum(client.count(name, exact=True).count for name in self.store.collections(fresh=True))
        if held >= live:
            return 0
        logger.warning("qdrant: %d points for %d live memories: pushing every live memory again", held, live)
        with self._lock, _sync_lock(self.location):
            self.store.forget()  # a collection that vanished is created again
            self.push(set(), reset=True)
        return live

    def _pending(self) -> bool:
        """Feed rows this store has not pushed yet (one indexed query)."""
        cursor = VectorIndexCursor.objects.filter(name=f"qdrant:{self.location}").values_list("last_change", "pending").first()
        last, pending = cursor if cursor is not None else (0, [])
        return has_news(last or 0, frozenset(pending or ()))[0]

    def sync(self) -> int:
        """Apply the change feed after this store's cursor (and the rows that committed late below
        it: memories/indexes/feed_cursor.py); returns the rows applied."""
        applied = 0
        with self._lock, _sync_lock(self.location):
            if not self._upgraded:
                self.store.upgrade()  # once a process: collections older than the sparse vectors get them
                self._upgraded = True
            cursor, _ = VectorIndexCursor.objects.get_or_create(name=f"qdrant:{self.location}")
            while True:
                before = cursor.last_change
                read = read_after(before, frozenset(cursor.pending or ()), SYNC_BATCH)
                changes = read.rows
                if changes:
                    self._apply(changes)
                if changes or sorted(read.pending) != sorted(cursor.pending or ()):
                    cursor.last_change, cursor.pending = read.position_after(before), sorted(read.pending)
                    cursor.save(update_fields=["last_change", "pending", "updated_at"])
                applied += len(changes)
                if sum(1 for change in changes if change[0] > before) < SYNC_BATCH:  # the last batch
                    return applied

    def _apply(self, changes: list[tuple[int, uuid.UUID, str]]) -> None:
        """Push what a batch of feed rows changed (a reset: every live memory again)."""
        reset = any(op == ChangeFeedEntry.Op.RESET for _, _, op in changes)
        whole, expiries = split_expiries([change for change in changes if change[2] != ChangeFeedEntry.Op.RESET])
        if reset:
            whole, expiries = whole | expiries, set()
        whole |= self._push_expiries(expiries)
        if whole or reset:
            self.push(whole, reset)

    # ------------------------------------------------------------------ reads

    def search(
        self, vector: np.ndarray, *, namespace: str, collection: str | None, limit: int, now: datetime,
        facts_only: bool = False, versions: Versions = "current",
    ) -> list[VectorHit]:
        dense, _ = self.query(vector, None, namespace=namespace, collection=collection, limit=limit, now=now,
                              facts_only=facts_only, versions=versions)
        return dense

    def query(
        self, vector: np.ndarray | None, terms: dict[int, float] | None, *, namespace: str, collection: str | None,
        limit: int, now: datetime, facts_only: bool = False, versions: Versions = "current",
    ) -> tuple[list[VectorHit], list[tuple[str, float]]]:
        """Dense (cosine) and full-text (BM25 over the ``bm25`` sparse vectors, IDF by Qdrant) hits,
        best first, either side optional (``terms``: :func:`memories.indexes.sparse.query_weights`). One
        Query API call a collection (``query_batch_points``: both searches, each with the namespace,
        collection and expiry filter inside Qdrant), so the caller fuses the two lists itself.
        ``versions``: current facts, superseded ones or both (the payload's ``superseded`` flag)."""
        from qdrant_client import models

        if self._pending() or not self._upgraded:
            self.sync()  # changes another process recorded but could not push (e.g. the scheduler's cleanup)
        query_filter = self._filter(namespace=namespace, collection=collection, now=now, facts_only=facts_only,
                                    versions=versions)
        requests: list[Any] = []
        if vector is not None:
            requests.append(models.QueryRequest(query=np.asarray(vector, dtype=np.float32).tolist(), filter=query_filter,
                                                limit=limit, with_payload=False))
        if terms:
            requests.append(models.QueryRequest(query=sparse_vector(terms), using=sparse.VECTOR_NAME, filter=query_filter,
                                                limit=limit, with_payload=False))
        dense: list[VectorHit] = []
        text: list[tuple[str, float]] = []
        client = self.client()
        for name in self.store.names_for(namespace, collection) if requests else []:
            if not client.collection_exists(name):
                continue
            if terms:
                self.store.ensure_sparse(name)  # a collection another (older) process created since
                if self.store.sparse_missing(name):
                    raise SparseVectorsMissing(name)
            answers = iter(client.query_batch_points(name, requests=requests))
            if vector is not None:
                dense.extend(VectorHit(str(p.id), float(p.score)) for p in next(answers).points)
            if terms:
                text.extend((str(p.id), float(p.score)) for p in next(answers).points if p.score > 0)
        dense.sort(key=lambda h: h.cosine, reverse=True)
        text.sort(key=lambda h: h[1], reverse=True)
        return dense[:limit], text[:limit]

    @staticmethod
    def _filter(*, namespace: str, collection: str | None, now: datetime, facts_only: bool, versions: Versions) -> Any:
        from qdrant_client import models

        must: list[Any] = [models.FieldCondition(key="namespace", match=models.MatchValue(value=namespace))]
        if collection is not None:
            must.append(models.FieldCondition(key="collection", match=models.MatchValue(value=collection)))
        alive = models.Filter(should=[
            models.FieldCondition(key="decay_eligible", match=models.MatchValue(value=False)),
            models.FieldCondition(key="expires_at", range=models.Range(gt=int(now.timestamp()))),
        ])
        if facts_only:  # a point without the key (written before threads existed) is a fact
            must.append(models.IsEmptyCondition(is_empty=models.PayloadField(key="thread")))
        # A point without the key (written before facts had successors) is current.
        flag = models.FieldCondition(key="superseded", match=models.MatchValue(value=True))
        if versions == "superseded":
            return models.Filter(must=[*must, alive, flag])
        return models.Filter(must=[*must, alive], must_not=[flag] if versions == "current" else None)

    def remote_memories(self, memory_ids: list[str], namespace: str) -> list[Memory]:
        """Unsaved Memory objects built from the payloads of points this store has no row for.

        Only other devices' points: a point of this device without a row is a deletion not yet
        applied (or a lost store, which ``repair`` restores), never a memory to show."""
        found: list[Memory] = []
        for name in self.store.names_for(namespace, None):
            for record in self.client().retrieve(name, ids=memory_ids, with_payload=True, with_vectors=False):
                point = stored_point(record)
                own = point.payload.get("device_id") == settings.BHGBRAIN_DEVICE_ID
                if point.payload.get("namespace") == namespace and point.payload.get("content") and not own:
                    with contextlib.suppress(KeyError, TypeError, ValueError):
                        found.append(memory_from_point(point, self.model_id, self.dimensions))
        return found

    def scan(self) -> Iterator[tuple[str, Iterator[StoredPoint]]]:
        """Every ``bhgbrain_*`` collection with its points, payloads and vectors (for repair). A
        collection made before the sparse vectors first gets them (derived index data, so a dry
        run does it too: no memory is written)."""
        with self._lock, _sync_lock(self.location):
            self.store.upgrade()
        for name in self.store.collections(fresh=True):
            yield name, self._scroll(name)

    def health(self) -> tuple[str, str]:
        try:
            count = len(self.store.collections(fresh=True))  # a real round trip: the cached listing proves nothing
        except Exception as exc:  # noqa: BLE001 - any client error means the index is unreachable
            return "unhealthy", f"qdrant at {self.location} unreachable: {type(exc).__name__}"
        return "healthy", f"qdrant at {self.location} ({count} bhgbrain collections)"

    def _scroll(self, name: str, batch: int = 256) -> Iterator[StoredPoint]:
        offset = None
        while True:
            points, offset = self.client().scroll(name, limit=batch, offset=offset, with_payload=True, with_vectors=True)
            yield from (stored_point(point) for point in points)
            if offset is None:
                return


_thread_lock = threading.Lock()


@contextlib.contextmanager
def _sync_lock(location: str) -> Iterator[None]:
    """One feed pusher per store: a PostgreSQL advisory lock, or a lock file beside SQLite."""
    if connection.vendor == "postgresql":
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"bhgbrain-qdrant:{location}"])
            yield
        return
    with _thread_lock:
        try:
            import fcntl
        except ImportError:  # not POSIX: the thread lock is all there is
            yield
            return
        with (Path(settings.BHGBRAIN_DATA_DIR) / ".qdrant-sync.lock").open("w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield
