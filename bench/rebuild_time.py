"""How long one in-process index takes to read every row from the database (no snapshot), in a new
process on an existing store (named, as for bench/cold_start.py, by ``BHGBRAIN_CONFIG`` /
``DATABASE_URL``). The first ``catch_up()`` starts the load; on a store of at least
``rebuilds.policy.background_min_rows`` rows it runs in the background (the call returns at once)
and is waited for; on an older commit the call itself loads. Prints one line::

    BHGBRAIN_CONFIG=/work/store100k/config.json DJANGO_SETTINGS_MODULE=bhgbrain_site.settings \\
      .venv/bin/python bench/rebuild_time.py text|vector

Alternate it with the same script run from another commit's checkout to compare the two.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import bhgbrain_site  # noqa: E402,F401 - sets the BLAS thread count before numpy loads, as the server does

# isort: split
from machine import load_average  # noqa: E402


def index_for(kind: str) -> object:
    """A new, empty index of ``kind`` (``text`` or ``vector``), as a new process holds it."""
    if kind == "text":
        from django.db import connection

        from memories.indexes.sparse import CONTEXT_WEIGHT, K1, TAG_WEIGHT, B
        from search.bm25.text_index import TextIndex

        return TextIndex(K1, B, TAG_WEIGHT if connection.vendor == "sqlite" else 1, CONTEXT_WEIGHT)
    from memories.embeddings import get_embedder
    from memories.indexes.embedded import EmbeddedVectorIndex

    embedder = get_embedder()
    assert embedder is not None, "the vector index needs the embedding model"
    return EmbeddedVectorIndex(embedder.model_id, embedder.dimensions)


def timed_load(index: object) -> tuple[float, str]:
    """Seconds until every row is in, and how the load ran."""
    started = time.perf_counter()
    try:
        index.catch_up()  # type: ignore[attr-defined]
        return time.perf_counter() - started, "on the call"
    except Exception as exc:
        if type(exc).__name__ != "Rebuilding":  # an older commit has no background rebuild
            raise
        from memories.indexes import rebuilds

        returned = time.perf_counter() - started
        rebuilds.wait()
        return time.perf_counter() - started, f"in the background (the call returned in {returned * 1e3:.0f} ms)"


def main() -> int:
    import django

    django.setup()
    from django.conf import settings

    settings.BHGBRAIN.index_snapshots = False
    kind = sys.argv[1] if len(sys.argv) > 1 else "text"
    load = load_average()
    seconds, how = timed_load(index_for(kind))
    print(f"{kind} index: {seconds:.2f} s {how}, load average {load} at start")
    return 0


if __name__ == "__main__":
    sys.exit(main())
