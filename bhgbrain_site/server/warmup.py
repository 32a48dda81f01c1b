"""The serving process's warm-up: the operations, the embedding model and both in-process
indexes loaded off the request path, then the heap frozen (``gc.freeze``)."""
from __future__ import annotations

import gc
import logging
import threading
import time

from django.db import connection

from bhgbrain_site import registry
from memories.indexes import rebuilds, snapshots
from search.selectors import memories_search

logger = logging.getLogger("bhgbrain.search")

WARM_WRITE_WAIT = 60.0  # seconds the warm-up waits for the vector snapshot's write before loading the text index


def indexes_warm() -> None:
    """Load the embedding model and both in-process indexes now, off the request path.

    Run in a daemon thread at server start: without it the first search after a start pays
    the load (≈3 s for each index on a 100k store). A search in an unused namespace touches
    every load path and returns nothing, so no memory is counted as accessed. A vector index
    loaded from the database starts writing its snapshot; the text index is loaded once that
    write is done, not beside it: a short session (an MCP stdio client's, which may end seconds
    after its first recall) then still leaves the next one a snapshot of the vectors.
    """
    started = time.monotonic()
    try:
        # semantic first: recall, what agents call most, needs only the model and the vectors
        memories_search(query="warm up", namespace="__warmup__", collection=None, mode="semantic", limit=1)
        rebuilds.wait()  # a large store without a snapshot rebuilds in the background: searches meanwhile degrade
        snapshots.finish_writes(WARM_WRITE_WAIT)
        memories_search(query="warm up", namespace="__warmup__", collection=None, mode="fulltext", limit=1)
        rebuilds.wait()
        logger.info("indexes warm in %.1f s", time.monotonic() - started)
    except Exception:  # noqa: BLE001 - a failed warm-up only means the first search loads lazily
        logger.exception("index warm-up failed; indexes load on first search")
    finally:
        connection.close()


def settle_heap() -> None:
    """Collect once, then hide every object alive now (modules, Django, settings, the warm
    indexes' structures) from the cyclic garbage collector (``gc.freeze``): a serving process
    keeps them for good, and without this each full collection walks them all again, stopping
    every request in the process meanwhile (docs/decisions: the frozen heap).
    Objects freed by their reference count still go; only cycles among the frozen ones would stay."""
    gc.collect()
    gc.freeze()


def _warm_and_settle() -> None:
    registry.operations()  # every app's operations imported now, not by the first call (80 ms here)
    indexes_warm()
    settle_heap()


def start_warming() -> threading.Thread:
    """A serving process's start: load the operations, warm the indexes, then :func:`settle_heap`, off
    the request path."""
    warm = threading.Thread(target=_warm_and_settle, name="bhgbrain-warm", daemon=True)
    warm.start()
    return warm

