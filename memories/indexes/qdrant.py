"""The Qdrant vector index (``vector_index: "qdrant"``): a server, a cluster, or local mode.

Layout of the original BHGBrain 1.3+, so devices and existing deployments share it: one
Qdrant collection per namespace + collection, ``bhgbrain_{namespace}_{collection}`` (a ``/``
in a namespace, which Qdrant refuses in names, becomes ``__``), cosine distance, point id =
memory uuid, payload ``namespace type tags collection content summary category source
importance retention_tier decay_eligible expires_at (Unix seconds or null) device_id
created_at``, keyword/bool/integer payload indexes on the filter fields. Names may collide
(``a_b`` + ``c`` and ``a`` + ``b_c``); every search also filters on the payload's namespace
and collection, so a collision never mixes results.

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
import os
import threading
import time
import uuid
import warnings
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from bhgbrain_site.core.config import QdrantConfig
from memories import incoming
from memories.conversations import contexts
from memories.embeddings import from_bytes, to_bytes
from memories.indexes import sparse
from memories.indexes.feed import split_expiries
from memories.indexes.vectors import StoredPoint, VectorHit
from memories.models import ChangeFeedEntry, Memory, MemorySource, MemoryType, Operation, RetentionTier, VectorIndexCursor
from memories.pipeline import normalize

logger = logging.getLogger("bhgbrain.qdrant")

PREFIX = "bhgbrain_"
SYNC_BATCH = 1000
LIST_TTL = 10.0  # seconds a listing of collections is reused


def collection_name(namespace: str, collection: str) -> str:
    return f"{PREFIX}{namespace.replace('/', '__')}_{collection}"


def _unix(value: datetime | None) -> int | None:
    return int(value.timestamp()) if value is not None else None


def expiry_payload(decay_eligible: bool, expires_at: datetime | None) -> dict[str, Any]:
    """The payload keys an expiry-only change moves (the feed's ``expiry`` rows)."""
    return {"decay_eligible": decay_eligible, "expires_at": _unix(expires_at) if decay_eligible else None}


def point_payload(memory: Memory) -> dict[str, Any]:
    return {
        "namespace": memory.namespace, "collection": memory.collection, "type": memory.type, "tags": list(memory.tags),
        "content": memory.content, "summary": memory.summary, "category": memory.category, "source": memory.source,
        "importance": memory.importance, "retention_tier": memory.retention_tier,
        **expiry_payload(memory.decay_eligible, memory.expires_at),
        "device_id": memory.device_id, "created_at": memory.created_at.isoformat(),
        # beyond the original's layout (it ignores unknown keys): conversation and event fields
        "thread": memory.thread, "speaker": memory.speaker, "message_id": memory.message_id,
        "occurred_at": _iso_or_none(memory.occurred_at), "event_at": _iso_or_none(memory.event_at),
        "valid_until": _iso_or_none(memory.valid_until), "status": memory.status,
    }


def _iso_or_none(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def memory_from_point(point: StoredPoint, model_id: str, dimensions: int) -> Memory:
    """An (unsaved) Memory from a point's payload, the inverse of :func:`point_payload`: its
    metadata, expiry, device id (the local one when the payload has none) and vector, so nothing
    is embedded again. Raises ValueError on a payload it cannot trust."""
    payload = point.payload
    content = normalize.normalize_content(str(payload.get("content") or ""))
    namespace = str(payload.get("namespace") or "")
    if not namespace or not content:
        raise ValueError("payload without namespace or content")
    tier = incoming.choice_or(payload.get("retention_tier"), RetentionTier.values, RetentionTier.T2)
    decay = bool(payload.get("decay_eligible", tier != "T0"))
    synced = point.vector is not None and len(point.vector) == dimensions
    now = timezone.now()
    return Memory(
        id=uuid.UUID(point.id), namespace=incoming.namespace(namespace), collection=incoming.collection(payload.get("collection")),
        type=incoming.choice_or(payload.get("type"), MemoryType.values, MemoryType.SEMANTIC),
        category=payload.get("category"), content=content,
        summary=str(payload.get("summary") or normalize.make_summary(content))[: normalize.SUMMARY_MAX],
        tags=incoming.tags(payload.get("tags")), source=incoming.choice_or(payload.get("source"), MemorySource.values, MemorySource.AGENT),
        checksum=normalize.checksum(content), importance=incoming.unit_interval(payload.get("importance", 0.5)),
        retention_tier=tier, decay_eligible=decay, expires_at=incoming.when(payload.get("expires_at")) if decay else None,
        device_id=payload.get("device_id") or settings.BHGBRAIN_DEVICE_ID, last_operation=Operation.ADD,
        embedding=to_bytes(np.asarray(point.vector, dtype=np.float32)) if synced else None,
        embedding_model=model_id if synced else "", vector_synced=synced,
        created_at=incoming.when(payload.get("created_at")) or now, updated_at=now,
        **incoming.conversation(payload.get),
    )


def _stored(point: Any) -> StoredPoint:
    vector = point.vector.get("") if isinstance(point.vector, dict) else point.vector  # "": the unnamed dense vector
    return StoredPoint(id=str(point.id), payload=dict(point.payload or {}), vector=vector if isinstance(vector, list) else None)


def _sparse_vector(weights: dict[int, float]) -> Any:
    from qdrant_client import models

    keys = sorted(weights)
    return models.SparseVector(indices=keys, values=[float(weights[k]) for k in keys])


def _sparse_config() -> Any:
    from qdrant_client import models

    return models.SparseVectorParams(modifier=models.Modifier.IDF)


def _memory_sparse(memory: Memory, context: str) -> Any:
    return _sparse_vector(sparse.memory_weights(memory.content, memory.tags, context))


def _payload_sparse(payload: dict[str, Any]) -> Any:
    """Another device's point (no row here): its payload's content and tags; no context."""
    tags = payload.get("tags") if isinstance(payload.get("tags"), list) else []
    return _sparse_vector(sparse.memory_weights(str(payload.get("content") or ""), [str(t) for t in tags]))


class SparseVectorsMissing(LookupError):
    """A collection without the ``bm25`` sparse vector that the server could not upgrade: the
    caller answers full-text from the in-process index instead."""


class QdrantVectorIndex:
    kind = "qdrant"  # the config's vector_index value
    shared = True

    def __init__(self, config: QdrantConfig, model_id: str, dimensions: int) -> None:
        self.model_id = model_id
        self.dimensions = dimensions
        self._config = config
        self._client: Any = None
        self._lock = threading.RLock()
        self._ensured: set[str] = set()
        self._sparse_ready: set[str] = set()  # collections known to carry the bm25 sparse vector
        self._sparse_missing: set[str] = set()  # old collections the server could not give one
        self._upgraded = False
        self._listing: tuple[float, list[str]] = (0.0, [])

    # ------------------------------------------------------------------ connection

    @property
    def location(self) -> str:
        if self._config.mode == "external":
            return str(self._config.external_url)
        return str(self._local_path())

    def _local_path(self) -> Path:
        path = Path(self._config.embedded_path).expanduser()
        return path if path.is_absolute() else Path(settings.BHGBRAIN_DATA_DIR) / path

    def client(self) -> Any:
        with self._lock:
            if self._client is None:
                from qdrant_client import QdrantClient

                if self._config.mode == "external":
                    key = os.environ.get(self._config.api_key_env) if self._config.api_key_env else None
                    self._client = QdrantClient(url=self._config.external_url, api_key=key, timeout=10)
                else:  # local mode: one process at a time may open the folder
                    self._client = QdrantClient(path=str(self._local_path()))
            return self._client

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    # ------------------------------------------------------------------ collections

    def _ensure(self, name: str) -> None:
        if name in self._ensured:
            return
        from qdrant_client import models

        client = self.client()
        if not client.collection_exists(name):
            client.create_collection(
                name, vectors_config=models.VectorParams(size=self.dimensions, distance=models.Distance.COSINE),
                sparse_vectors_config={sparse.VECTOR_NAME: _sparse_config()},
            )
            self._sparse_ready.add(name)
            for field, schema in (("namespace", models.PayloadSchemaType.KEYWORD), ("collection", models.PayloadSchemaType.KEYWORD),
                                  ("type", models.PayloadSchemaType.KEYWORD), ("retention_tier", models.PayloadSchemaType.KEYWORD),
                                  ("decay_eligible", models.PayloadSchemaType.BOOL), ("expires_at", models.PayloadSchemaType.INTEGER),
                                  ("device_id", models.PayloadSchemaType.KEYWORD)):
                with warnings.catch_warnings():  # local mode ignores payload indexes (and says so)
                    warnings.simplefilter("ignore", UserWarning)
                    client.create_payload_index(name, field_name=field, field_schema=schema)
            self._listing = (0.0, [])
        self._ensure_sparse(name)
        self._ensured.add(name)

    # ------------------------------------------------------------------ sparse vectors (BM25)

    def _ensure_sparse(self, name: str) -> bool:
        """Give a collection created before full-text moved into Qdrant its ``bm25`` sparse vector,
        and every point its sparse vector (from this store's rows, else from the payload: nothing
        is embedded again). Returns whether it back-filled."""
        if name in self._sparse_ready or name in self._sparse_missing:
            return False
        from qdrant_client import models
        from qdrant_client.http.exceptions import UnexpectedResponse

        client = self.client()
        if sparse.VECTOR_NAME in (client.get_collection(name).config.params.sparse_vectors or {}):
            self._sparse_ready.add(name)
            return False
        try:
            client.create_vector_name(name, sparse.VECTOR_NAME, models.SparseVectorNameConfig(
                sparse=models.SparseVectorConfig(modifier=models.Modifier.IDF)))
        except UnexpectedResponse:  # a server without the create-vector-name API (before Qdrant 1.18)
            logger.exception("qdrant: %s has no sparse vector and the server cannot add one: its full-text "
                             "searches use this process's own index until Qdrant is upgraded", name)
            self._sparse_missing.add(name)
            return False
        filled = 0
        for batch in self._batches(name):
            self._backfill(name, batch)
            filled += len(batch)
        logger.info("qdrant: %s back-filled with %d sparse (BM25) vectors", name, filled)
        self._sparse_ready.add(name)
        return True

    def _batches(self, name: str, size: int = 256) -> Iterator[list[Any]]:
        offset = None
        while True:
            points, offset = self.client().scroll(name, limit=size, offset=offset, with_payload=True, with_vectors=False)
            if points:
                yield points
            if offset is None:
                return

    def _backfill(self, name: str, points: list[Any]) -> None:
        from qdrant_client import models

        rows = Memory.objects.in_bulk([uuid.UUID(str(p.id)) for p in points])
        context = contexts(rows.values())
        vectors = []
        for point in points:
            row = rows.get(uuid.UUID(str(point.id)))
            vector = _memory_sparse(row, context.get(str(row.id), "")) if row is not None else _payload_sparse(dict(point.payload or {}))
            vectors.append(models.PointVectors(id=point.id, vector={sparse.VECTOR_NAME: vector}))
        self.client().update_vectors(name, points=vectors, wait=True)

    def upgrade(self) -> list[str]:
        """Back-fill the sparse vectors of every ``bhgbrain_*`` collection that lacks them (sync and
        repair call it; a no-op once done). Returns the collections back-filled."""
        return [name for name in self.collections(fresh=True) if self._ensure_sparse(name)]

    def collections(self, *, fresh: bool = False) -> list[str]:
        """Every ``bhgbrain_*`` collection (listing cached for a few seconds unless ``fresh``)."""
        fetched, names = self._listing
        if fresh or time.monotonic() - fetched > LIST_TTL:
            names = sorted(c.name for c in self.client().get_collections().collections if c.name.startswith(PREFIX))
            self._listing = (time.monotonic(), names)
        return names

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

    def _push(self, memory_ids: set[uuid.UUID], reset: bool) -> None:
        from qdrant_client import models

        rows = {m.id: m for m in Memory.objects.filter(id__in=memory_ids)} if memory_ids else {}
        if reset:  # the whole store was replaced: every memory it now holds
            rows.update({m.id: m for m in Memory.objects.filter(archived=False)})
        points: dict[str, list[Any]] = {}
        context = contexts(m for m in rows.values() if self._indexable(m))
        for memory in rows.values():
            if self._indexable(memory):
                name = collection_name(memory.namespace, memory.collection)
                self._ensure(name)  # first: an old collection may turn out unable to hold a sparse vector
                vector: dict[str, Any] = {}
                if name not in self._sparse_missing:
                    vector[sparse.VECTOR_NAME] = _memory_sparse(memory, context.get(str(memory.id), ""))
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
        for name in self.collections(fresh=bool(gone)):  # a deletion must not miss a brand-new collection
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
        if self._sparse_missing:  # an old server: a memory without a dense vector gets no point there
            rows = rows.filter(embedding_model=self.model_id, embedding__isnull=False)
        live = rows.count()
        if not live:
            return 0
        client = self.client()
        held = sum(client.count(name, exact=True).count for name in self.collections(fresh=True))
        if held >= live:
            return 0
        logger.warning("qdrant: %d points for %d live memories: pushing every live memory again", held, live)
        with self._lock, _sync_lock(self.location):
            self._ensured.clear()  # a collection that vanished is created again
            self._listing = (0.0, [])
            self._push(set(), reset=True)
        return live

    def _pending(self) -> bool:
        """Feed rows this store has not pushed yet (one indexed query)."""
        done = VectorIndexCursor.objects.filter(name=f"qdrant:{self.location}").values_list("last_change", flat=True).first()
        return ChangeFeedEntry.objects.filter(id__gt=done or 0).exists()

    def sync(self) -> int:
        """Apply the change feed after this store's cursor; returns the rows applied."""
        applied = 0
        with self._lock, _sync_lock(self.location):
            if not self._upgraded:
                self.upgrade()  # once a process: collections older than the sparse vectors get them
                self._upgraded = True
            cursor, _ = VectorIndexCursor.objects.get_or_create(name=f"qdrant:{self.location}")
            while True:
                changes = list(ChangeFeedEntry.objects.filter(id__gt=cursor.last_change).order_by("id")
                               .values_list("id", "memory_id", "op")[:SYNC_BATCH])
                if not changes:
                    return applied
                reset = any(op == ChangeFeedEntry.Op.RESET for _, _, op in changes)
                whole, expiries = split_expiries([change for change in changes if change[2] != ChangeFeedEntry.Op.RESET])
                if reset:
                    whole, expiries = whole | expiries, set()
                whole |= self._push_expiries(expiries)
                if whole or reset:
                    self._push(whole, reset)
                cursor.last_change = changes[-1][0]
                cursor.save(update_fields=["last_change", "updated_at"])
                applied += len(changes)

    # ------------------------------------------------------------------ reads

    def search(
        self, vector: np.ndarray, *, namespace: str, collection: str | None, limit: int, now: datetime,
        facts_only: bool = False,
    ) -> list[VectorHit]:
        dense, _ = self.query(vector, None, namespace=namespace, collection=collection, limit=limit, now=now,
                              facts_only=facts_only)
        return dense

    def query(
        self, vector: np.ndarray | None, terms: dict[int, float] | None, *, namespace: str, collection: str | None,
        limit: int, now: datetime, facts_only: bool = False,
    ) -> tuple[list[VectorHit], list[tuple[str, float]]]:
        """Dense (cosine) and full-text (BM25 over the ``bm25`` sparse vectors, IDF by Qdrant) hits,
        best first, either side optional (``terms``: :func:`memories.indexes.sparse.query_weights`). One
        Query API call a collection (``query_batch_points``: both searches, each with the namespace,
        collection and expiry filter inside Qdrant), so the caller fuses the two lists itself."""
        from qdrant_client import models

        if self._pending() or not self._upgraded:
            self.sync()  # changes another process recorded but could not push (e.g. the scheduler's cleanup)
        query_filter = self._filter(namespace=namespace, collection=collection, now=now, facts_only=facts_only)
        requests: list[Any] = []
        if vector is not None:
            requests.append(models.QueryRequest(query=np.asarray(vector, dtype=np.float32).tolist(), filter=query_filter,
                                                limit=limit, with_payload=False))
        if terms:
            requests.append(models.QueryRequest(query=_sparse_vector(terms), using=sparse.VECTOR_NAME, filter=query_filter,
                                                limit=limit, with_payload=False))
        dense: list[VectorHit] = []
        text: list[tuple[str, float]] = []
        client = self.client()
        for name in self._names(namespace, collection) if requests else []:
            if not client.collection_exists(name):
                continue
            if terms:
                self._ensure_sparse(name)  # a collection another (older) process created since
                if name in self._sparse_missing:
                    raise SparseVectorsMissing(name)
            answers = iter(client.query_batch_points(name, requests=requests))
            if vector is not None:
                dense.extend(VectorHit(str(p.id), float(p.score)) for p in next(answers).points)
            if terms:
                text.extend((str(p.id), float(p.score)) for p in next(answers).points if p.score > 0)
        dense.sort(key=lambda h: h.cosine, reverse=True)
        text.sort(key=lambda h: h[1], reverse=True)
        return dense[:limit], text[:limit]

    def _names(self, namespace: str, collection: str | None) -> list[str]:
        if collection is not None:
            return [collection_name(namespace, collection)]
        prefix = collection_name(namespace, "")
        return [n for n in self.collections() if n.startswith(prefix)]

    @staticmethod
    def _filter(*, namespace: str, collection: str | None, now: datetime, facts_only: bool) -> Any:
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
        return models.Filter(must=[*must, alive])

    def remote_memories(self, memory_ids: list[str], namespace: str) -> list[Memory]:
        """Unsaved Memory objects built from the payloads of points this store has no row for.

        Only other devices' points: a point of this device without a row is a deletion not yet
        applied (or a lost store, which ``repair`` restores), never a memory to show."""
        found: list[Memory] = []
        prefix = collection_name(namespace, "")
        for name in (n for n in self.collections() if n.startswith(prefix)):
            for record in self.client().retrieve(name, ids=memory_ids, with_payload=True, with_vectors=False):
                point = _stored(record)
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
            self.upgrade()
        for name in self.collections(fresh=True):
            yield name, self._scroll(name)

    def _scroll(self, name: str, batch: int = 256) -> Iterator[StoredPoint]:
        offset = None
        while True:
            points, offset = self.client().scroll(name, limit=batch, offset=offset, with_payload=True, with_vectors=True)
            yield from (_stored(point) for point in points)
            if offset is None:
                return

    def optimize(self, *, deleted_threshold: float) -> int:
        """Start Qdrant's optimizers (its vacuum drops deleted points) on every bhgbrain collection:
        any collection update triggers them (Qdrant docs, "grey collection status"); the diff also
        sets the collection's ``deleted_threshold``. Returns how many collections were asked."""
        from qdrant_client import models

        names = self.collections(fresh=True)
        for name in names:
            self.client().update_collection(
                name, optimizers_config=models.OptimizersConfigDiff(deleted_threshold=deleted_threshold))
        return len(names)

    def health(self) -> tuple[str, str]:
        try:
            count = len(self.collections(fresh=True))  # a real round trip: the cached listing proves nothing
        except Exception as exc:  # noqa: BLE001 - any client error means the index is unreachable
            return "unhealthy", f"qdrant at {self.location} unreachable: {type(exc).__name__}"
        return "healthy", f"qdrant at {self.location} ({count} bhgbrain collections)"


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
