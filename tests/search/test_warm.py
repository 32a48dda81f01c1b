"""Server start loads the model and both in-process indexes off the request path."""
from __future__ import annotations

import threading

import pytest

from memories import vector_index
from memories.access import tracker
from memories.models import Memory
from search import text_index
from search.services import indexes_warm
from tests.conftest import remember


@pytest.mark.django_db(transaction=True)
def test_warm_up_loads_both_indexes_and_counts_no_access(hash_embedder) -> None:
    first = remember("The staging cluster runs on three nodes in Frankfurt").id
    remember("Backups of the billing database run nightly at two")
    tracker.discard()  # start from an empty access batch

    warm = threading.Thread(target=indexes_warm)  # as at server start: its own thread and connection
    warm.start()
    warm.join(timeout=60)

    index = vector_index.get_vector_index()
    assert isinstance(index, vector_index.EmbeddedVectorIndex) and index.loaded and index.size() == 2
    assert text_index.text_index_loaded()
    assert tracker.pending() == 0  # nothing was returned, so nothing is counted
    assert Memory.objects.get(id=first).access_count == 0
