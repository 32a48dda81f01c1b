"""The Qdrant side of the Qdrant index: the client (a server, a cluster, or local mode), the
``bhgbrain_*`` collections with their payload indexes, and the ``bm25`` sparse vector that
collections made before full-text moved into Qdrant are given (back-filled from this store's
rows, else from the payloads: nothing is embedded again). memories/indexes/qdrant/__init__.py writes and
reads the points through it.
"""
from __future__ import annotations

import logging
import os
import threading
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from django.conf import settings

from bhgbrain_site.core.config import QdrantConfig
from memories.conversations import contexts
from memories.indexes import sparse
from memories.indexes.qdrant.points import PREFIX, collection_name, memory_sparse, payload_sparse, sparse_config
from memories.models import Memory

logger = logging.getLogger("bhgbrain.qdrant")

LIST_TTL = 10.0  # seconds a listing of collections is reused
PAYLOAD_INDEXES = (("namespace", "KEYWORD"), ("collection", "KEYWORD"), ("type", "KEYWORD"), ("retention_tier", "KEYWORD"),
                   ("decay_eligible", "BOOL"), ("expires_at", "INTEGER"), ("device_id", "KEYWORD"), ("superseded", "BOOL"))


class QdrantCollections:
    """One Qdrant (its client opened on first use) and what this process knows of its collections."""

    def __init__(self, config: QdrantConfig, dimensions: int) -> None:
        self.dimensions = dimensions
        self._config = config
        self._client: Any = None
        self._lock = threading.Lock()
        self._ensured: set[str] = set()
        self._sparse_ready: set[str] = set()  # collections known to carry the bm25 sparse vector
        self._sparse_missing: set[str] = set()  # old collections the server could not give one
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

    def collections(self, *, fresh: bool = False) -> list[str]:
        """Every ``bhgbrain_*`` collection (listing cached for a few seconds unless ``fresh``)."""
        fetched, names = self._listing
        if fresh or time.monotonic() - fetched > LIST_TTL:
            names = sorted(c.name for c in self.client().get_collections().collections if c.name.startswith(PREFIX))
            self._listing = (time.monotonic(), names)
        return names

    def names_for(self, namespace: str, collection: str | None) -> list[str]:
        """The collections a search of ``namespace`` (and ``collection``, when given) reads."""
        if collection is not None:
            return [collection_name(namespace, collection)]
        prefix = collection_name(namespace, "")
        return [n for n in self.collections() if n.startswith(prefix)]

    def forget(self) -> None:
        """Forget what is known of the collections: one that vanished is created again."""
        self._ensured.clear()
        self._listing = (0.0, [])

    def ensure(self, name: str) -> None:
        """The collection exists, with its payload indexes and (if the server can) its sparse vector."""
        if name in self._ensured:
            return
        from qdrant_client import models

        client = self.client()
        if not client.collection_exists(name):
            client.create_collection(
                name, vectors_config=models.VectorParams(size=self.dimensions, distance=models.Distance.COSINE),
                sparse_vectors_config={sparse.VECTOR_NAME: sparse_config()},
            )
            self._sparse_ready.add(name)
            for field, schema in PAYLOAD_INDEXES:
                with warnings.catch_warnings():  # local mode ignores payload indexes (and says so)
                    warnings.simplefilter("ignore", UserWarning)
                    client.create_payload_index(name, field_name=field, field_schema=models.PayloadSchemaType[schema])
            self._listing = (0.0, [])
        self.ensure_sparse(name)
        self._ensured.add(name)

    # ------------------------------------------------------------------ sparse vectors (BM25)

    def sparse_missing(self, name: str) -> bool:
        """An old collection on a server that could not give it the sparse vector."""
        return name in self._sparse_missing

    def any_sparse_missing(self) -> bool:
        return bool(self._sparse_missing)

    def ensure_sparse(self, name: str) -> bool:
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

    def upgrade(self) -> list[str]:
        """Back-fill the sparse vectors of every ``bhgbrain_*`` collection that lacks them (a no-op
        once done). Returns the collections back-filled."""
        return [name for name in self.collections(fresh=True) if self.ensure_sparse(name)]

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
            vector = memory_sparse(row, context.get(str(row.id), "")) if row is not None else payload_sparse(dict(point.payload or {}))
            vectors.append(models.PointVectors(id=point.id, vector={sparse.VECTOR_NAME: vector}))
        self.client().update_vectors(name, points=vectors, wait=True)

    # ------------------------------------------------------------------ upkeep

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
