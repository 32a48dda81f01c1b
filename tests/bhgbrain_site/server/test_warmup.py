"""Server start loads the model and both in-process indexes off the request path."""
from __future__ import annotations

import gc
import shutil
import threading

import pytest

from bhgbrain_site import registry
from bhgbrain_site.server.warmup import indexes_warm, start_warming
from memories.access import tracker
from memories.indexes import embedded
from memories.models import Memory
from search.bm25 import text_index
from tests.conftest import remember


@pytest.mark.django_db(transaction=True)
def test_warm_up_loads_both_indexes_and_counts_no_access(hash_embedder) -> None:
    first = remember("The staging cluster runs on three nodes in Frankfurt").id
    remember("Backups of the billing database run nightly at two")
    tracker.discard()  # start from an empty access batch

    warm = threading.Thread(target=indexes_warm)  # as at server start: its own thread and connection
    warm.start()
    warm.join(timeout=60)

    index = embedded.get_vector_index()
    assert isinstance(index, embedded.EmbeddedVectorIndex) and index.loaded and index.size() == 2
    assert text_index.text_index_loaded()
    assert tracker.pending() == 0  # nothing was returned, so nothing is counted
    assert Memory.objects.get(id=first).access_count == 0


@pytest.mark.django_db(transaction=True)
def test_a_serving_process_hides_what_it_keeps_from_the_collector_once_warm(hash_embedder, monkeypatch) -> None:  # noqa: ANN001
    """After the start-up warm-up, a full collection walks only what came later: the modules,
    settings and warm indexes are frozen (a collection of them all paused every request 50-110 ms).
    The warm-up loads every app's operations first, so the first call does not import them (80 ms)."""
    remember("The staging cluster runs on three nodes in Frankfurt")
    loaded: list[int] = []
    operations = registry.operations
    monkeypatch.setattr(registry, "operations", lambda: loaded.append(gc.get_freeze_count()) or operations())
    held = [[index] for index in range(20_000)]  # long-lived objects of the process, like its modules'
    assert len(gc.get_objects()) > 20_000
    try:
        start_warming().join(timeout=60)
        assert gc.get_freeze_count() > 20_000
        assert len(gc.get_objects()) < 20_000  # what the warm thread's end and this test made since
        assert held[-1] == [19_999]  # frozen, not freed
        assert embedded.get_vector_index().loaded and text_index.text_index_loaded()
        assert loaded == [0]  # loaded once, before the heap was frozen
    finally:
        gc.unfreeze()  # the rest of the test run collects as usual


@pytest.mark.django_db(transaction=True)
def test_warm_up_loads_the_text_index_once_the_vector_snapshot_is_written(hash_embedder, bhg_config, settings,  # noqa: ANN001
                                                                          tmp_path, monkeypatch) -> None:
    """A short session (an MCP stdio client may leave seconds after its first recall) still leaves
    the next one a snapshot of the vectors: it is not written beside the text index's load."""
    bhg_config.index_snapshots = True
    settings.BHGBRAIN_DATA_DIR = tmp_path
    remember("The staging cluster runs on three nodes in Frankfurt")
    embedded.reset_vector_index()
    text_index.reset_text_index()
    shutil.rmtree(tmp_path / "index-snapshots", ignore_errors=True)
    seen: list[bool] = []
    load = text_index.TextIndex._load  # noqa: SLF001

    def text_load(self: text_index.TextIndex) -> None:
        seen.append(any((tmp_path / "index-snapshots").glob("vector-*.json")))
        load(self)

    monkeypatch.setattr(text_index.TextIndex, "_load", text_load)
    indexes_warm()
    assert seen == [True]
    embedded.reset_vector_index()
    text_index.reset_text_index()
