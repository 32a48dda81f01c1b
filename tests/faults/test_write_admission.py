"""A write that does not embed never waits behind writes that wait for the embedding model.

A real server, the OpenAI provider pointed at a local HTTP server that holds every embedding
request until the test lets it answer (a provider or a model that is slow: writes pile up
waiting for it). More remembers than the server has threads for writes wait there; meanwhile a
forget and a tag, over ``/tool`` and over REST, answer at once, and a search too. Once the
provider answers, every held remember is stored."""
from __future__ import annotations

import hashlib
import json
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np

from tests.faults.conftest import QuietHandler, answer_embeddings, serve_in_thread
from tests.live_server import LiveServer

NS = "admission"
HELD = 16  # more than any pool's 12 threads: every thread that could take a write is waiting
QUICK_S = 10.0  # a write that waits for no model answers well within this (it would wait for the release)


def _vector(text: str) -> list[float]:
    """A stable unit vector for a text (no meaning needed here)."""
    seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")
    vector = np.random.default_rng(seed).standard_normal(384).astype(np.float32)
    return (vector / np.linalg.norm(vector)).tolist()


class HeldProvider:
    """An OpenAI-compatible /v1/embeddings on 127.0.0.1 that answers only once ``release`` is set
    (``held`` counts the requests waiting for it)."""

    def __init__(self) -> None:
        self.release, self.held, self.arrived = threading.Event(), 0, threading.Event()
        self.release.set()
        provider = self

        class Handler(QuietHandler):
            def do_POST(self) -> None:  # noqa: N802 - the http.server API
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                if not provider.release.is_set():
                    provider.held += 1
                    provider.arrived.set()
                    provider.release.wait(120)
                answer_embeddings(self, body, _vector)

        self.server = serve_in_thread(Handler)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"


def _remember(live: LiveServer, content: str, sent: threading.Semaphore | None = None) -> httpx.Response:
    if sent is not None:
        sent.release()
    return httpx.post(f"{live.url}/tool/remember", json={"content": content, "namespace": NS}, timeout=120)


def test_forget_and_tag_answer_while_every_remember_waits_for_the_model(tmp_path: Path,
                                                                        store_backend: dict[str, str]) -> None:
    provider = HeldProvider()
    config = {"embedding": {"provider": "openai", "model": "text-embedding-3-small", "dimensions": 384,
                            "base_url": provider.base_url}, "security": {"rate_limit_rpm": 100_000},
              "deduplication": {"enabled": False}}
    live = LiveServer(home=tmp_path, config=config, env={**store_backend, "OPENAI_API_KEY": "sk-local-held"}).start(timeout=180)
    clients = ThreadPoolExecutor(HELD)
    try:
        kept = [_remember(live, f"Kept fact number {i}: the harbour crane {i} is inspected monthly").json()["id"]
                for i in range(3)]
        provider.release.clear()
        sent = threading.Semaphore(0)
        held: list[Future[httpx.Response]] = [
            clients.submit(_remember, live, f"Held fact {i}: the lighthouse lamp {i} was replaced", sent)
            for i in range(HELD)]
        assert provider.arrived.wait(60), "no remember reached the provider"
        assert all(sent.acquire(timeout=60) for _ in range(HELD)), "not every remember was sent"
        threading.Event().wait(0.5)  # the last ones sent reach the server's pool

        forgot = httpx.post(f"{live.url}/tool/forget", json={"id": kept[0], "namespace": NS}, timeout=QUICK_S)
        tagged = httpx.post(f"{live.url}/tool/tag", json={"id": kept[1], "add": ["crane"], "namespace": NS},
                            timeout=QUICK_S)
        rest_tagged = httpx.post(f"{live.url}/api/memories/{kept[2]}/tags/", json={"add": ["monthly"], "namespace": NS},
                                 timeout=QUICK_S)
        rest_forgot = httpx.delete(f"{live.url}/api/memories/{kept[2]}/", params={"namespace": NS}, timeout=QUICK_S)
        found = httpx.post(f"{live.url}/tool/search", json={"query": "harbour crane", "namespace": NS, "mode": "fulltext"},
                           timeout=QUICK_S)
        still_held = not any(f.done() for f in held)

        assert forgot.status_code == 200 and forgot.json()["deleted"] is True, forgot.text
        assert tagged.status_code == 200 and "crane" in tagged.json()["tags"], tagged.text
        assert rest_tagged.status_code == 200 and "monthly" in rest_tagged.json()["tags"], rest_tagged.text
        assert rest_forgot.status_code == 200, rest_forgot.text
        assert [hit["id"] for hit in found.json()["results"]] == [kept[1]], found.text
        assert still_held, "the remembers were answered before the other writes: nothing was waiting"
    finally:
        provider.release.set()
        answers = [f.result(timeout=120) for f in held] if "held" in locals() else []
        clients.shutdown()
        live.stop()
        provider.server.shutdown()
    assert [a.status_code for a in answers] == [200] * HELD, [a.text for a in answers if a.status_code != 200]
    assert {a.json()["operation"] for a in answers} == {"ADD"}
