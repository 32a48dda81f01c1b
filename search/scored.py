"""One search result while it is ranked: its memory id, scores, and the row once loaded."""
from __future__ import annotations

from dataclasses import dataclass, field

from memories.models import Memory


@dataclass
class Scored:
    memory_id: str
    score: float = 0.0
    semantic: float | None = None  # calibrated cosine, 0..1
    fulltext: float | None = None  # BM25 / best BM25 of the query, 0..1
    memory: Memory | None = field(default=None, repr=False)
