"""Searches answered around an in-process index that is being rebuilt from the database
(memories/indexes/rebuilds.py): the vector side from the rows read so far, scanned exactly. The
full-text side's degraded path is the database's own (search/fulltext_db.py, used by
search/fulltext.py)."""
from __future__ import annotations

from typing import Any

import numpy as np

from memories.indexes import rebuilds
from memories.indexes.vectors import VectorHit, VectorIndex

PARTIAL_SCAN = "exact scan of the vectors loaded so far"


def vector_hits(index: VectorIndex, vector: np.ndarray, **where: Any) -> list[VectorHit]:
    """``index.search(vector, **where)``; while the index is rebuilt, the best of the rows it has
    read so far (an exact scan), noted in the response's ``meta.degraded``."""
    try:
        return index.search(vector, **where)
    except rebuilds.Rebuilding as rebuilding:
        rebuilding.note(PARTIAL_SCAN)
        with rebuilds.partial_answers(), rebuilds.answering_around():  # exact: no sketch or graph over a half-read matrix
            return index.search(vector, exact=True, **where)  # type: ignore[call-arg]
