"""Change-feed rows that commit out of id order reach every reader.

On PostgreSQL two write transactions can commit in the other order than their feed ids were
allocated (id 100 commits after id 101). A reader that read 101 must still get 100 when it
commits: the embedded vector index, the BM25 text index, the subscription watcher's
``changes.since`` and the Qdrant sync. On SQLite writers are serialised by the database, so
the second write waits for the first commit; the same readers then simply see both.
"""
from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone

from bhgbrain_site import registry
from bhgbrain_site.core.calls import CallContext
from memories.analyzer import analyze_query
from memories.indexes.embedded import EmbeddedVectorIndex
from memories.models import ChangeFeedEntry
from search.bm25.text_index import TextIndex
from tests.conftest import remember

pytestmark = pytest.mark.django_db(transaction=True)

WATCHER = CallContext(actor="test:watcher")
ALPHA = "Alpha deployment notes: the gateway runs on Envoy"
BETA = "Beta release checklist: rotate the signing keys"


class Readers:
    """One of each feed reader, none of them told about a write by the process that made it."""

    def __init__(self, embedder: Any, qdrant: Any) -> None:
        self.embedder = embedder
        self.vectors = EmbeddedVectorIndex(embedder.model_id, embedder.dimensions)
        self.text = TextIndex(0.9, 0.4, 2)
        self.qdrant = qdrant
        self.position = registry.call("changes.since", {}, WATCHER)["position"]
        self.watched: set[str] = set()

    def read(self) -> dict[str, set[str]]:
        """What each reader holds now (every reader catches up first, as a search does)."""
        now = timezone.now()
        seen: dict[str, set[str]] = {}
        hits: set[str] = set()
        for content, namespace in ((ALPHA, "feed-a"), (BETA, "feed-b")):
            query = self.embedder.embed_query(content)
            hits |= {h.memory_id for h in self.vectors.search(query, namespace=namespace, collection=None, limit=5, now=now)}
        seen["vector index"] = hits
        seen["text index"] = {hit[0] for namespace in ("feed-a", "feed-b") for hit in self.text.search(
            analyze_query("Alpha Beta gateway signing"), namespace=namespace, collection=None, now=now, limit=5)}
        more = True
        while more:
            answer = registry.call("changes.since", self.position, WATCHER)
            self.position, more = answer["position"], answer["more"]
            self.watched |= {m["id"] for m in answer["memories"]}
        seen["subscriptions"] = set(self.watched)
        self.qdrant.sync()
        seen["qdrant"] = {point.id for _, points in self.qdrant.scan() for point in points}
        return seen


def _in_thread(work: Callable[[], None]) -> threading.Thread:
    def run() -> None:
        try:
            work()
        finally:
            connection.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_rows_committed_out_of_id_order_reach_every_reader(hash_embedder, qdrant, bhg_config) -> None:  # noqa: ANN001
    bhg_config.deduplication.enabled = False  # its search would sync Qdrant inside the open transaction
    readers = Readers(hash_embedder, qdrant)
    ids: dict[str, str] = {}
    written, release, beta_done = threading.Event(), threading.Event(), threading.Event()

    def alpha() -> None:  # its feed row is allocated first, and it commits last
        with transaction.atomic():
            ids["alpha"] = remember(ALPHA, namespace="feed-a").id
            written.set()
            assert release.wait(60)

    def beta() -> None:
        ids["beta"] = remember(BETA, namespace="feed-b").id
        beta_done.set()

    first = _in_thread(alpha)
    assert written.wait(60)
    second = _in_thread(beta)
    committed_out_of_order = beta_done.wait(10)  # SQLite: beta waits for alpha's commit
    if connection.vendor == "postgresql":
        assert committed_out_of_order, "PostgreSQL let the second write commit while the first is open"
    if committed_out_of_order:
        early = readers.read()  # every reader has now gone past alpha's feed id
        for reader, held in early.items():
            assert ids["beta"] in held and ids["alpha"] not in held, reader
    release.set()
    first.join(60)
    second.join(60)
    assert not first.is_alive() and not second.is_alive()
    alpha_feed = ChangeFeedEntry.objects.get(memory_id=ids["alpha"]).id
    beta_feed = ChangeFeedEntry.objects.get(memory_id=ids["beta"]).id
    assert alpha_feed < beta_feed
    missed = sorted(reader for reader, held in readers.read().items() if not {ids["alpha"], ids["beta"]} <= held)
    assert not missed, f"never saw the row that committed late: {missed}"
