"""django-q2 tasks of the memories app (thin: one service call each)."""
from __future__ import annotations

from memories.services import memories_vector_sync


def vector_sync() -> dict[str, int]:
    """Scheduled retry of vector indexing for rows with vector_synced=false."""
    return memories_vector_sync()
