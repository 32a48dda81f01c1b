"""The embedding provider failing mid-run and coming back.

In-process: the real local model behind a switch at our provider boundary (while it is off every
call raises EmbeddingUnavailable, as each provider does when it cannot answer). Against a real
server: the OpenAI provider pointed at a local HTTP server that answers 503 for a while, then
embeddings again. Writes made during the outage are stored (degraded) or refused cleanly with
EMBEDDING_UNAVAILABLE, never lost; /health says degraded; the scheduled vector_sync embeds what is
missing once the provider is back, and semantic search finds it."""
from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from bhgbrain_site.core.errors import EmbeddingUnavailable
from memories import embeddings
from memories.embeddings import LocalE5Embedder
from memories.indexes import embedded
from memories.models import AuditLog, ChangeFeedEntry, Memory
from memories.remember import RememberInput, thread_append
from memories.services import memories_index_catch_up, memory_forget
from retention.selectors import store_health
from search.bm25.text_index import reset_text_index
from search.selectors import memories_search
from tests.conftest import remember
from tests.faults.conftest import QuietHandler, answer_embeddings, answer_json, finished, serve_in_thread, store_task
from tests.live_server import LiveServer

NS = "outage"
BEFORE = "The staging database is backed up every night at two o'clock UTC"
# written while the provider is down, each with a question semantic search must answer afterwards
DURING = {
    "Marta waters the office plants every Tuesday morning": "who takes care of watering the plants in the office",
    "The VPN certificate for contractors expires at the end of March": "when does the contractors' VPN access run out",
    "The cafeteria switched its coffee supplier to a small roaster in Porto": "where does the canteen buy its coffee now",
}
MESSAGES = ["We are planning a hike up Mount Tamalpais on Saturday",
            "Bring two liters of water and a windbreaker, it gets windy at the summit"]
MESSAGE_QUESTION = "what should I pack for the hike"


class SwitchedEmbedder:
    """The real local model behind a switch: while ``down`` is set every call fails as a provider
    outage does (EmbeddingUnavailable). ``fail_after``: go down after that many more passages.
    ``on_passage``: called with each passage before it is embedded (something happening meanwhile)."""

    def __init__(self, inner: LocalE5Embedder) -> None:
        self.inner, self.model_id, self.dimensions, self.curve = inner, inner.model_id, inner.dimensions, inner.curve
        self.down = threading.Event()
        self.fail_after: int | None = None
        self.on_passage: Callable[[str], None] | None = None

    def _call(self, texts: list[str]) -> None:
        if self.fail_after is not None:
            if self.fail_after < len(texts):
                self.down.set()
            self.fail_after -= len(texts)
        if self.down.is_set():
            raise EmbeddingUnavailable("Embedding provider error: APIConnectionError")
        for text in texts:
            if self.on_passage is not None:
                self.on_passage(text)

    def embed_passage(self, text: str) -> np.ndarray:
        self._call([text])
        return self.inner.embed_passage(text)

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        self._call(list(texts))
        return self.inner.embed_passages(texts)

    def embed_query(self, text: str) -> np.ndarray:
        self._call([])
        return self.inner.embed_query(text)

    def health(self) -> tuple[str, str]:
        return self.inner.health()


@pytest.fixture
def provider(e5: LocalE5Embedder) -> Iterator[SwitchedEmbedder]:
    switched = SwitchedEmbedder(e5)
    embeddings.set_embedder(switched)
    embedded.reset_vector_index()
    reset_text_index()
    yield switched
    switched.down.clear()


def _search(query: str, mode: str) -> list[str]:
    hits = memories_search(query=query, namespace=NS, collection=None, mode=mode, limit=3)  # type: ignore[arg-type]
    return [hit.memory.content for hit in hits]


def _first_semantic_hits() -> dict[str, str | None]:
    """Each question → the content semantic search puts first."""
    questions = {**{q: c for c, q in DURING.items()}, MESSAGE_QUESTION: MESSAGES[1]}
    return {question: next(iter(_search(question, "semantic")), None) for question in questions}


@pytest.mark.django_db(transaction=True)
def test_writes_during_an_outage_are_kept_and_embedded_when_the_provider_returns(provider: SwitchedEmbedder) -> None:
    before = remember(BEFORE, namespace=NS)
    provider.down.set()
    during = {content: remember(content, namespace=NS) for content in DURING}
    again = remember(next(iter(DURING)), namespace=NS)  # a re-send in the outage: exact dedup still holds
    turns = thread_append(messages=[RememberInput(content=text, namespace=NS, collection="general", thread="hike",
                                                  speaker="user") for text in MESSAGES], actor="test")
    assert {r.operation for r in during.values()} == {"ADD"} and {t["operation"] for t in turns} == {"ADD"}
    assert again.operation == "NOOP" and again.id == during[next(iter(DURING))].id
    degraded = {r.id for r in during.values()} | {t["id"] for t in turns}
    assert {str(pk) for pk in Memory.objects.filter(vector_synced=False).values_list("id", flat=True)} == degraded
    assert Memory.objects.get(pk=before.id).vector_synced

    health = store_health()
    assert health["status"] == "degraded" and health["retention"]["unsynced_vectors"] == len(degraded)
    with pytest.raises(EmbeddingUnavailable) as refused:
        _search("office plants", "semantic")
    assert refused.value.code == "EMBEDDING_UNAVAILABLE" and refused.value.retryable
    for content in DURING:  # full-text and hybrid (which falls back to it) keep working
        word = content.split()[-1]
        assert _search(word, "fulltext")[:1] == [content] and _search(word, "hybrid")[:1] == [content]
    assert memories_index_catch_up()["pending"] == len(degraded)  # still down: nothing changes

    provider.down.clear()
    caught_up = memories_index_catch_up()
    assert caught_up["synced"] == len(degraded) and caught_up["pending"] == 0, caught_up
    assert store_health()["status"] == "healthy"
    assert _first_semantic_hits() == {**{q: c for c, q in DURING.items()}, MESSAGE_QUESTION: MESSAGES[1]}
    assert Memory.objects.filter(namespace=NS).count() == 1 + len(DURING) + len(MESSAGES)


@pytest.mark.django_db(transaction=True)
def test_without_the_fallback_an_outage_refuses_the_write_and_stores_nothing(provider: SwitchedEmbedder,
                                                                             bhg_config: Any) -> None:
    bhg_config.pipeline.fallback_to_threshold_dedup = False
    provider.down.set()
    content = next(iter(DURING))
    with pytest.raises(EmbeddingUnavailable) as refused:
        remember(content, namespace=NS)
    assert refused.value.code == "EMBEDDING_UNAVAILABLE" and refused.value.http_status == 503
    assert (Memory.objects.count(), AuditLog.objects.count(), ChangeFeedEntry.objects.count()) == (0, 0, 0)
    provider.down.clear()
    assert remember(content, namespace=NS).operation == "ADD"  # the client's retry lands
    assert _search(DURING[content], "semantic")[:1] == [content]


@pytest.mark.django_db(transaction=True)
def test_an_outage_in_the_middle_of_the_catch_up_keeps_what_was_embedded(provider: SwitchedEmbedder) -> None:
    provider.down.set()
    for content in DURING:
        remember(content, namespace=NS)
    provider.down.clear()
    provider.fail_after = 1  # the provider falls over again after one passage
    first = memories_index_catch_up()
    assert (first["synced"], first["failed"], first["pending"]) == (1, 1, len(DURING) - 1), first
    provider.fail_after = None
    provider.down.clear()
    second = memories_index_catch_up()
    assert (second["synced"], second["pending"]) == (len(DURING) - 1, 0), second
    assert {q: _search(q, "semantic")[:1] for q in DURING.values()} == {q: [c] for c, q in DURING.items()}


@pytest.mark.django_db(transaction=True)
def test_a_memory_changed_or_forgotten_while_the_catch_up_embeds_it(provider: SwitchedEmbedder) -> None:
    """The catch-up embeds outside any transaction (embedding is slow): a memory edited meanwhile
    must not get its old words' vector marked as synced, and one forgotten meanwhile must not stop
    the run."""
    from memories.curation.edits import memory_edit

    provider.down.set()
    ids = {content: remember(content, namespace=NS).id for content in DURING}
    edited, forgotten, untouched = list(DURING)
    new_text = "Marta waters the office plants every Friday afternoon now"
    seen: list[str] = []

    def meanwhile(text: str) -> None:  # while the catch-up embeds the first memory (the oldest)
        provider.on_passage = None
        seen.append(text)
        provider.down.set()  # the curator's edit meets the outage: stored degraded, new words
        memory_edit(memory_id=ids[edited], changes={"content": new_text}, actor="curator")
        provider.down.clear()
        memory_forget(memory_id=ids[forgotten], namespace=NS, actor="test")

    provider.down.clear()
    provider.on_passage = meanwhile
    first = memories_index_catch_up()
    assert seen == [edited]
    assert not Memory.objects.filter(pk=ids[forgotten]).exists()
    memory = Memory.objects.get(pk=ids[edited])
    assert memory.content == new_text and not memory.vector_synced, "the old words' vector stored as synced"
    assert Memory.objects.get(pk=ids[untouched]).vector_synced
    assert (first["synced"], first["pending"]) == (1, 1), first
    second = memories_index_catch_up()
    assert (second["synced"], second["pending"]) == (1, 0), second
    stored = embeddings.from_bytes(Memory.objects.get(pk=ids[edited]).embedding)
    assert np.allclose(stored, provider.inner.embed_passage(new_text), atol=1e-5)
    assert _search("who waters the office plants and on which day", "semantic")[:1] == [new_text]


# --------------------------------------------------------------------------- a real server, OpenAI over HTTP


class FakeOpenAI:
    """An OpenAI-compatible /v1/embeddings on 127.0.0.1 (the provider is outside this machine):
    503 while ``down``, else the local model's vectors, float or base64 as asked."""

    def __init__(self, model: LocalE5Embedder) -> None:
        self.model, self.down, self.requests = model, threading.Event(), {"ok": 0, "503": 0}
        fake = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server API
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                if fake.down.is_set():
                    fake.requests["503"] += 1
                    answer_json(self, 503, {"error": {"message": "overloaded", "type": "server_error"}})
                    return
                fake.requests["ok"] += 1
                answer_embeddings(self, body, lambda text: fake.encode(text, body.get("encoding_format")))

        self.server = serve_in_thread(Handler)

    def encode(self, text: str, encoding: str | None) -> Any:
        vector = np.asarray(self.model.embed_passage(text), dtype=np.float32)
        return base64.b64encode(vector.tobytes()).decode() if encoding == "base64" else vector.tolist()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"


def _health_within(live: LiveServer, wanted: Callable[[dict[str, Any]], bool], *, seconds: float) -> dict[str, Any]:
    """/health until ``wanted`` holds (or the deadline): the server serves a snapshot it refreshes
    every few seconds, so another process's change shows there within that interval."""
    deadline = time.monotonic() + seconds
    while True:
        health = httpx.get(live.url + "/health", timeout=60).json()
        if wanted(health) or time.monotonic() > deadline:
            return health
        time.sleep(0.25)


def _scheduled_vector_sync(live: LiveServer, env: dict[str, str]) -> dict[str, int]:
    """The scheduler's job (memories.tasks.vector_sync), run now in a process of its own on the store."""
    return finished(store_task(live.home, env, "vector_sync"))


def test_a_real_server_rides_out_an_openai_outage(tmp_path: Path, e5: LocalE5Embedder,
                                                  store_backend: dict[str, str]) -> None:
    fake = FakeOpenAI(e5)
    config = {"embedding": {"provider": "openai", "model": "text-embedding-3-small", "dimensions": 384,
                            "base_url": fake.base_url}, "security": {"rate_limit_rpm": 100_000}}
    env = {**store_backend, "OPENAI_API_KEY": "sk-local-fake-provider"}
    live = LiveServer(home=tmp_path, config=config, env=env).start(timeout=180)
    try:
        assert live.post("remember", {"content": BEFORE, "namespace": NS}).json()["operation"] == "ADD"
        fake.down.set()
        written = {content: live.post("remember", {"content": content, "namespace": NS}) for content in DURING}
        assert {r.status_code for r in written.values()} == {200}, [r.text for r in written.values()]
        assert fake.requests["503"] >= len(DURING)  # the provider was asked and refused
        health = httpx.get(live.url + "/health", timeout=60).json()
        assert health["status"] == "degraded" and health["retention"]["unsynced_vectors"] == len(DURING), health
        semantic = live.post("search", {"query": "office plants", "namespace": NS, "mode": "semantic"})
        assert semantic.status_code == 503 and semantic.json()["error"]["code"] == "EMBEDDING_UNAVAILABLE"
        hybrid = live.post("search", {"query": "Porto roaster", "namespace": NS}).json()["results"]
        assert hybrid[0]["content"] == list(DURING)[2]  # full-text carries hybrid search meanwhile
        assert _scheduled_vector_sync(live, env)["pending"] == len(DURING)  # still down: kept, not lost

        fake.down.clear()
        assert _scheduled_vector_sync(live, env) | {"feed_rows_applied": 0} == {
            "synced": len(DURING), "failed": 0, "pending": 0, "feed_rows_applied": 0, "refilled": 0, "usage_folded": 0}
        health = _health_within(live, lambda h: h["status"] == "healthy", seconds=15)  # another process synced
        assert health["status"] == "healthy" and health["retention"]["unsynced_vectors"] == 0, health
        for content, question in DURING.items():  # the server's index picked the new vectors up from the feed
            found = live.post("search", {"query": question, "namespace": NS, "mode": "semantic", "limit": 1})
            assert [hit["id"] for hit in found.json()["results"]] == [written[content].json()["id"]], found.text
    finally:
        live.stop()
        fake.server.shutdown()
