"""What every vector index is: the protocol its callers use, its hits and its stored points.

Implementations: memories/indexes/embedded.py (``embedded``, in-process numpy, the default; the
factory ``get_vector_index`` is there too) and memories/indexes/qdrant/__init__.py (``qdrant``).
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

if TYPE_CHECKING:
    from memories.indexes.partitions import Versions
    from memories.models import Memory


@dataclass(frozen=True)
class VectorHit:
    memory_id: str
    cosine: float


@dataclass(frozen=True)
class StoredPoint:
    """A point as a shared index stores it: what ``repair`` rebuilds a store from."""

    id: str
    payload: dict[str, Any]
    vector: list[float] | None


def live_until(memory: Memory) -> float:
    """One number that makes "alive" a single range test: expiry epoch, or +inf."""
    return until_of(memory.decay_eligible, memory.expires_at)


def until_of(decay_eligible: bool, expires_at: datetime | None) -> float:
    """``live_until`` from the two columns (rows read without a model)."""
    if not decay_eligible or expires_at is None:
        return math.inf
    return expires_at.timestamp()


class VectorIndex(Protocol):
    kind: str  # the config's vector_index value
    model_id: str
    dimensions: int
    shared: bool  # other devices write to it too: it can show their memories and rebuild a store

    def upsert(self, memory: Memory, *, change_id: int | None = None) -> None:
        """Index one memory now (``change_id``: its feed row, which need not be replayed)."""

    def delete(self, memory_id: str) -> None: ...

    def search(
        self, vector: np.ndarray, *, namespace: str, collection: str | None, limit: int, now: datetime,
        facts_only: bool = False, versions: Versions = "current",
    ) -> list[VectorHit]:
        """The best ``limit`` live vectors of the namespace (and collection), exact cosines;
        ``facts_only`` leaves out the messages of threads (semantic dedup never merges into one);
        ``versions``: current facts only (the default), the superseded ones, or both."""

    def sync(self) -> int:
        """Apply the change feed now; the number of feed rows applied."""

    def health(self) -> tuple[str, str]:
        """(status, detail) for /health."""

    def close(self) -> None:
        """Release what the index holds (Qdrant's local mode locks its folder)."""

    def remote_memories(self, memory_ids: list[str], namespace: str) -> list[Memory]:
        """Unsaved memories other devices wrote to a shared index that this store lacks."""

    def scan(self) -> Iterator[tuple[str, Iterator[StoredPoint]]]:
        """Every collection of a shared index with its points (nothing for an in-process one)."""
