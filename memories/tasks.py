"""django-q2 tasks of the memories app (thin: one service call each)."""
from __future__ import annotations

from memories.services import memories_index_catch_up


def vector_sync() -> dict[str, int]:
    """Every 5 minutes: embed what is missing, push the change feed, refill a Qdrant that lost points."""
    return memories_index_catch_up()
