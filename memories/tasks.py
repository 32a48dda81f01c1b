"""django-q2 tasks of the memories app (thin: one service call each)."""
from __future__ import annotations

from memories.services import memories_vector_sync


def vector_sync() -> dict[str, int]:
    """Scheduled retry: embed rows with vector_synced=false, then push the change feed to the index
    (an external index such as Qdrant catches up after an outage), and refill a Qdrant that lost
    points the feed had already delivered."""
    from memories.qdrant_index import QdrantVectorIndex
    from memories.vector_index import get_vector_index

    result = memories_vector_sync()
    index = get_vector_index()
    result["feed_rows_applied"] = index.sync() if index is not None else 0
    result["refilled"] = index.refill() if isinstance(index, QdrantVectorIndex) else 0
    return result
