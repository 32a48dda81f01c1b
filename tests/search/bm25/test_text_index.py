"""The in-process BM25 text index (search/bm25/text_index.py): rows updated in place, failures
that never stick, and the statistics its primer computes ahead."""
from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.utils import timezone

from memories.analyzer import analyze_query
from memories.services import memory_forget
from tests.conftest import remember
from tests.search.test_fulltext import add_fillers

pytestmark = pytest.mark.django_db


def test_text_index_updates_expiry_in_place_and_replaces_edited_rows(hash_embedder) -> None:
    """Access tracking moves expires_at on every returned result: that must not grow the index."""
    from django.utils import timezone

    from memories import funnel
    from search.bm25.text_index import TextIndex

    index = TextIndex(0.9, 0.4, 2)
    mid = remember("The billing service runs on Kubernetes", retention_tier="T3").id
    now = timezone.now()
    assert [h[0] for h in index.search(["kubernet"], namespace="global", collection=None, now=now, limit=5)] == [mid]
    rows_before, version = index.row_count(), index.version
    funnel.update_memories([mid], {"expires_at": now + timedelta(days=400)}, audit=None, at=now)
    later = now + timedelta(days=200)
    assert [h[0] for h in index.search(["kubernet"], namespace="global", collection=None, now=later, limit=5)] == [mid]
    assert index.row_count() == rows_before  # updated in place
    assert index.version == version  # the cached eligible rows were adjusted, not dropped
    funnel.update_memories([mid], {"expires_at": now + timedelta(days=1)}, audit=None, at=now)  # shortened
    assert index.search(["kubernet"], namespace="global", collection=None, now=now + timedelta(days=2), limit=5) == []
    assert [h[0] for h in index.search(["kubernet"], namespace="global", collection=None, now=now, limit=5)] == [mid]
    memory_forget(memory_id=mid, namespace=None, actor="test")
    assert index.search(["kubernet"], namespace="global", collection=None, now=now, limit=5) == []


# --------------------------------------------------------------------------- failures never stick


def _index_search(index, query: str) -> list[str]:  # noqa: ANN001 - a TextIndex
    terms = analyze_query(query)
    return [h[0] for h in index.search(terms, namespace="global", collection=None, now=timezone.now(), limit=20)]


def test_a_search_that_fails_while_scoring_leaves_no_broken_index(hash_embedder, monkeypatch) -> None:
    """A failed search's traceback keeps its numpy views of the index's arrays alive; appending to
    an array with a live view raises BufferError half-way through a row. The index must not
    carry that on: the next searches see every memory, old and new."""
    import numpy as np

    from search.bm25.text_index import TextIndex

    index = TextIndex(0.9, 0.4, 2)
    first = remember("The billing service runs on Kubernetes").id
    assert _index_search(index, "kubernetes") == [first]
    real = np.argpartition
    calls = {"n": 0}

    def fail_once(*args: object, **kwargs: object) -> object:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("injected scoring failure")
        return real(*args, **kwargs)

    monkeypatch.setattr(np, "argpartition", fail_once)
    with pytest.raises(RuntimeError) as failure:
        _index_search(index, "kubernetes")
    kept = failure.value  # noqa: F841 - its traceback (and the frame's views) stays alive
    second = remember("The billing dashboard also runs on Kubernetes").id
    third = remember("Kubernetes upgrades happen on Tuesdays").id
    assert set(_index_search(index, "kubernetes")) == {first, second, third}
    assert set(_index_search(index, "billing")) == {first, second}


def test_a_database_error_while_catching_up_loses_no_change(hash_embedder, monkeypatch) -> None:
    """The feed position moved before the changed rows were fetched: a failed fetch must not skip them."""
    from django.db import OperationalError

    from memories.indexes import base
    from search.bm25 import text_index

    index = text_index.TextIndex(0.9, 0.4, 2)
    first = remember("The billing service runs on Kubernetes").id
    assert _index_search(index, "kubernetes") == [first]
    second = remember("Kubernetes upgrades happen on Tuesdays").id
    real = base.expiries_of  # read right after the changed rows: replaced to fail once, then restored

    def locked(memory_ids: set) -> dict:
        raise OperationalError("database is locked")

    monkeypatch.setattr(base, "expiries_of", locked)
    with pytest.raises(OperationalError):
        _index_search(index, "kubernetes")
    monkeypatch.setattr(base, "expiries_of", real)
    assert set(_index_search(index, "kubernetes")) == {first, second}
    assert index.row_count() == 2  # caught up from the feed, not reloaded


# --------------------------------------------------------------------------- statistics computed ahead


def test_long_lists_get_their_statistics_ahead_and_the_ranking_is_unchanged(hash_embedder, monkeypatch) -> None:
    """After a load, a daemon thread computes each long list's statistics (largest tf, shortest
    row, impact, documents per large namespace) that the term's first search would: the same
    values the search computes itself, and the same ranking."""
    from search.bm25 import primer, statistics, text_index

    monkeypatch.setattr(primer, "PRIME_MIN_POSTINGS", 3)
    monkeypatch.setattr(statistics, "IMPACT_MIN_POSTINGS", 3)
    add_fillers()
    for i in range(4):
        remember(f"Kubernetes cluster number {i} runs the billing service")
    remember("Kubernetes once", namespace="other")
    primed = text_index.TextIndex(0.9, 0.4, 2)
    first = _index_search(primed, "kubernetes billing")  # loads, then the primer runs
    assert primed.primer is not None
    primed.primer.join(timeout=10)
    term = analyze_query("kubernetes")[0]
    ahead = primed.statistics
    assert term in ahead.bounds and term in ahead.impacts and (primed.namespace_code("global"), term) in ahead.df

    unprimed = text_index.TextIndex(0.9, 0.4, 2)
    monkeypatch.setattr(text_index.TextIndex, "_prime_soon", lambda self: None)
    assert _index_search(unprimed, "kubernetes billing") == first
    for cache in ("bounds", "df"):  # what the search computed itself, the primer computed the same
        computed, ahead = getattr(unprimed.statistics, cache), getattr(primed.statistics, cache)
        assert computed and {key: ahead.get(key) for key in computed} == computed, cache
    # impacts: the primer's are taken at the largest namespace's avgdl, a bound for every smaller one
    assert unprimed.statistics.impacts.keys() <= primed.statistics.impacts.keys()


def test_a_reload_stops_the_last_primer(hash_embedder, monkeypatch) -> None:
    from search.bm25 import primer, text_index

    monkeypatch.setattr(primer, "PRIME_MIN_POSTINGS", 1)
    add_fillers()
    index = text_index.TextIndex(0.9, 0.4, 2)
    with index.held():  # the primer waits for the lock, then finds itself replaced
        index.reload()
        first = index.primer
        index.reload()
    assert first is not None and first is not index.primer
    first.join(timeout=10)
    index.primer.join(timeout=10)
    assert not first.is_alive() and index.statistics.bounds  # the second one did the work


def test_a_search_waiting_for_the_lock_gets_it_between_two_primed_terms(hash_embedder, monkeypatch) -> None:
    """The primer holds the index lock one term at a time and pauses after each: a search waiting
    for the lock takes it at the next pause. Without the pause the primer, still holding the GIL,
    took the lock again before the woken search could, term after term (a new process's second
    search at a million rows waited 0.8-1.7 s for the whole primer)."""
    from search.bm25 import text_index

    add_fillers()
    index = text_index.TextIndex(0.9, 0.4, 2)
    _index_search(index, "kubernetes")  # loaded (its own primer finds nothing long to prime)
    index.primer.join(timeout=10)
    primed: list[str] = []
    started = threading.Event()

    def busy_term(term: str, namespaces: object) -> None:  # pure Python: holds the GIL, like the real one
        started.set()
        deadline = time.perf_counter() + 0.01
        while time.perf_counter() < deadline:
            pass
        primed.append(term)

    monkeypatch.setattr(index, "_long_terms", lambda: [f"t{i}" for i in range(100)])
    monkeypatch.setattr(index, "_prime_term", busy_term)
    with index.held():
        index._prime_soon()  # noqa: SLF001 - what a load does last
    assert started.wait(timeout=10)
    with index.held():  # what a search does
        waited_for = len(primed)
    index.primer.join(timeout=30)
    assert len(primed) == 100 and waited_for <= 5, waited_for
