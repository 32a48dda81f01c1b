"""The local model's lanes (queries never wait for passages, lone calls on every core) and the query-vector cache."""
from __future__ import annotations

import os
import re
import sys
import threading
import time

import numpy as np
import pytest

from memories import embeddings
from memories.embeddings import ModelThread, QueryCache

LINUX_ONLY = pytest.mark.skipif(sys.platform != "linux", reason="per-thread niceness is Linux's; the lanes lower it only there")


def _niceness() -> int:
    """The calling thread's own niceness (Linux: per thread)."""
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def _wait_until(predicate, timeout: float = 10.0) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_passages_run_in_order_on_the_models_lane_and_a_query_never_waits_for_them() -> None:
    model = ModelThread("test-model")
    release = threading.Event()
    order: list[str] = []
    idents: dict[str, set[int]] = {"query": set(), "passage": set()}

    def job(label: str):  # noqa: ANN202
        def work() -> str:
            idents[label.split("-")[0]].add(threading.get_ident())
            order.append(label)
            return label
        return work

    running = threading.Event()
    blocker = threading.Thread(target=model.run, args=(ModelThread.PASSAGE, lambda: (running.set(), release.wait(10))))
    blocker.start()
    assert running.wait(10)  # the model is busy with a passage
    callers = [threading.Thread(target=model.run, args=(ModelThread.PASSAGE, job(f"passage-{i}"))) for i in range(3)]
    for caller in callers:
        caller.start()
    _wait_until(lambda: model.pending() == 3)
    assert model.run(ModelThread.QUERY, job("query-0"), ) == "query-0"  # answered while the passage still runs
    release.set()
    for thread in [blocker, *callers]:
        thread.join(10)
    assert order == ["query-0", "passage-0", "passage-1", "passage-2"]
    assert len(idents["passage"]) == 1 and len(idents["query"]) == 1
    assert idents["passage"] != idents["query"] and threading.get_ident() not in idents["passage"] | idents["query"]


def _record_teams(model_cores: int) -> tuple[ModelThread, list[tuple[str, int]], threading.Lock]:
    """A model thread of ``model_cores`` cores that records, for every call, its kind and the team
    size its lane set last."""
    teams: list[tuple[str, int]] = []
    lock = threading.Lock()
    lane_team = threading.local()
    model = ModelThread("test-lanes", cores=model_cores, team=lambda size: setattr(lane_team, "size", size))

    def call(kind: str, hold: threading.Event | None = None):  # noqa: ANN202
        def work() -> int:
            with lock:
                teams.append((kind, lane_team.size))
            if hold is not None:
                hold.wait(10)
            return lane_team.size
        return work

    model.call = call  # type: ignore[attr-defined]
    return model, teams, lock


def test_passages_queued_together_share_the_cores_one_each_and_a_lone_call_takes_them_all() -> None:
    model, teams, _ = _record_teams(2)
    assert model.run(ModelThread.PASSAGE, model.call("alone")) == 2  # nothing else queued: every core
    assert model.run(ModelThread.QUERY, model.call("query alone")) == 2
    hold_query, hold = threading.Event(), threading.Event()
    query = model.submit(ModelThread.QUERY, model.call("query holding both cores", hold_query))
    _wait_until(lambda: len(teams) == 3)
    passages = [model.submit(ModelThread.PASSAGE, model.call(f"passage-{i}", hold)) for i in range(3)]
    assert model.pending() == 3  # no core free: the passages wait
    hold_query.set()
    assert query.result(10) == 2
    _wait_until(lambda: len(teams) == 5)  # two passages side by side, one core each
    assert model.run(ModelThread.QUERY, model.call("query")) == 1  # no core free: one thread beside them
    hold.set()
    assert [future.result(10) for future in passages][:2] == [1, 1]
    assert passages[2].result(10) in (1, 2)  # alone by then, it takes whichever cores are free
    assert [kind for kind, _ in teams][:3] == ["alone", "query alone", "query holding both cores"]


def test_lone_calls_of_both_kinds_run_on_the_one_lane_whose_team_has_threads() -> None:
    """Only one team of several threads: two (4 threads on 2 CPUs) made libgomp sleep and wake its
    threads at every parallel region, a lone query 34 ms instead of 18."""
    model = ModelThread("test-main", cores=2)
    lanes = {model.run(kind, threading.get_ident) for kind in (ModelThread.QUERY, ModelThread.PASSAGE) * 4}
    assert len(lanes) == 1


def test_passage_lanes_never_run_more_teams_than_cores() -> None:
    model = ModelThread("test-cores", cores=2)
    lock = threading.Lock()
    running, most = [0], [0]

    def passage() -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.01)
        with lock:
            running[0] -= 1

    futures = [model.submit(ModelThread.PASSAGE, passage) for _ in range(20)]
    for future in futures:
        future.result(10)
    assert most[0] == 2


@LINUX_ONLY
def test_passages_yield_the_cpu_to_queries_and_requests() -> None:
    model = ModelThread("test-nice", cores=2)
    niceness = _niceness
    own = niceness()
    hold_query, release, running = threading.Event(), threading.Event(), threading.Event()
    query = model.submit(ModelThread.QUERY, lambda: (running.set(), hold_query.wait(10)))
    assert running.wait(10)  # the main lane runs a lone query on both cores
    held = model.submit(ModelThread.PASSAGE, lambda: (release.wait(10), niceness())[1])
    helped = model.submit(ModelThread.PASSAGE, niceness)
    hold_query.set()  # the main lane takes the first passage, a helper the second
    query.result(10)
    assert helped.result(10) == min(19, own + embeddings.PASSAGE_NICE)
    assert model.run(ModelThread.QUERY, niceness) == own  # a query helper, while the main lane is busy
    release.set()
    assert held.result(10) == own  # the main lane (lone calls, queries first) keeps the process's priority
    assert niceness() == own  # the caller's thread is untouched


@LINUX_ONLY
def test_with_one_core_every_passage_yields_the_cpu_and_queries_keep_it() -> None:
    """Two workers on two cores have one core each: no team of several threads, so passages get a
    lane of their own (two 2-worker load runs: read p50 98 ms with passages on the query's lane)."""
    model = ModelThread("test-one-core", cores=1)
    own = _niceness()
    assert model.run(ModelThread.PASSAGE, _niceness) == min(19, own + embeddings.PASSAGE_NICE)
    assert model.run(ModelThread.QUERY, _niceness) == own


def test_an_error_in_the_model_reaches_the_caller_and_the_thread_goes_on() -> None:
    model = ModelThread("test-model")

    def boom() -> None:
        raise RuntimeError("model failed")

    with pytest.raises(RuntimeError, match="model failed"):
        model.run(ModelThread.QUERY, boom)
    assert model.run(ModelThread.PASSAGE, lambda: 42) == 42


class CountingEmbedder:
    """A tiny deterministic embedder that counts its query calls."""

    model_id = "test/counting"
    dimensions = 4
    curve = embeddings.IDENTITY_CURVE

    def __init__(self) -> None:
        self.queries: list[str] = []

    def embed_query(self, text: str) -> np.ndarray:
        self.queries.append(text)
        return np.array([len(text), 1, 0, 0], dtype=np.float32)

    def embed_passage(self, text: str) -> np.ndarray:
        return self.embed_query(text)

    def embed_passages(self, texts):  # noqa: ANN001, ANN201
        return np.vstack([self.embed_query(t) for t in texts])

    def health(self) -> tuple[str, str]:
        return "healthy", "test"


def test_a_repeated_query_is_embedded_once_and_the_vector_cannot_be_modified() -> None:
    embedder = CountingEmbedder()
    embeddings.set_embedder(embedder)  # the autouse fixture sets the test's embedder again afterwards
    first = embeddings.embed_query(embedder, "which VPN does staging use?")
    again = embeddings.embed_query(embedder, "  which VPN   does staging use? ")  # same words, other spacing
    other = embeddings.embed_query(embedder, "Which VPN does staging use?")  # case is kept: another query
    assert embedder.queries == ["which VPN does staging use?", "Which VPN does staging use?"]
    assert np.array_equal(first, again) and np.array_equal(first, other)  # same length: same test vector
    with pytest.raises(ValueError):
        first[0] = 0.0
    embeddings.set_embedder(embedder)  # a new embedder (or the same, reconfigured) empties the cache
    embeddings.embed_query(embedder, "which VPN does staging use?")
    assert len(embedder.queries) == 3


def test_the_cache_forgets_the_least_recently_used_query_first() -> None:
    cache = QueryCache(2)
    a, b, c = (QueryCache.key("m", q) for q in ("a", "b", "c"))
    cache.put(a, np.ones(2))
    cache.put(b, np.ones(2))
    assert cache.get(a) is not None  # a is now the most recent
    cache.put(c, np.ones(2))
    assert cache.get(b) is None and cache.get(a) is not None and cache.get(c) is not None
    assert (cache.hits, cache.misses) == (3, 1)
    assert QueryCache.key("m", "x") != QueryCache.key("other-model", "x")


def test_the_model_thread_reports_its_busy_and_waiting_time_to_metrics() -> None:
    from prometheus_client import generate_latest

    from bhgbrain_site.core.metrics import metrics

    def seconds() -> float:
        text = generate_latest(metrics.registry).decode()
        found = re.search(r'^bhgbrain_embedding_model_seconds_total\{kind="query"\} (\S+)$', text, re.MULTILINE)
        return float(found.group(1)) if found else 0.0

    before = seconds()
    ModelThread("test-model").run(ModelThread.QUERY, lambda: time.sleep(0.05))
    assert seconds() - before >= 0.05
    assert 'bhgbrain_embedding_wait_seconds_count{kind="query"}' in generate_latest(metrics.registry).decode()


def _batching_model(batch_max: int) -> tuple[ModelThread, list[list[str]], threading.Event]:
    """A model thread kept busy by one passage until the event is set, and a record of each batch run."""
    model = ModelThread("test-batches", batch_max)
    release, running = threading.Event(), threading.Event()
    threading.Thread(target=model.run, args=(ModelThread.PASSAGE, lambda: (running.set(), release.wait(10))),
                     daemon=True).start()
    assert running.wait(10)
    return model, [], release


def test_passages_queued_together_run_as_one_batch_of_similar_lengths_and_queries_go_first() -> None:
    model, batches, release = _batching_model(3)

    def run_many(texts: list[str]) -> list[str]:
        batches.append(list(texts))
        return [text.upper() for text in texts]

    def passage(text: str):  # noqa: ANN202
        return model.submit(ModelThread.PASSAGE, lambda: run_many([text])[0],
                            embeddings.Batchable(run_many, text, len(text)))

    futures = [passage(text) for text in ("aaaa", "bbbb", "cccc", "dddd", "a much longer passage than the others")]
    query = model.submit(ModelThread.QUERY, lambda: batches.append(["query"]) or "q")
    assert query.result(10) == "q"  # answered on its own lane while the passage is still held
    release.set()
    assert [f.result(10) for f in futures] == ["AAAA", "BBBB", "CCCC", "DDDD", "A MUCH LONGER PASSAGE THAN THE OTHERS"]
    # the query first; then at most three passages a batch; the long one is not padded into theirs
    assert batches == [["query"], ["aaaa", "bbbb", "cccc"], ["dddd"], ["a much longer passage than the others"]]


def test_a_failing_batch_reaches_every_caller_in_it() -> None:
    model, _, release = _batching_model(4)

    def run_many(texts: list[str]) -> list[str]:
        raise RuntimeError("engine failure")

    futures = [model.submit(ModelThread.PASSAGE, lambda: "never", embeddings.Batchable(run_many, t, 4)) for t in ("abcd", "efgh")]
    release.set()
    for future in futures:
        with pytest.raises(RuntimeError, match="engine failure"):
            future.result(10)
    assert model.run(ModelThread.QUERY, lambda: "still serving") == "still serving"


def test_batched_passages_embed_exactly_as_single_ones() -> None:
    from bhgbrain_site.core.config import EmbeddingConfig

    texts = ["The billing service moved to Kubernetes in March", "Alice prefers tea over coffee in the morning",
             "我们把网关从 Kong 换成了 Envoy", "Deploys happen on Tuesdays after the standup", "The report is due on Friday"]
    single = embeddings.LocalE5Embedder(EmbeddingConfig(batch_max=1)).embed_passages(texts)
    batched = embeddings.LocalE5Embedder(EmbeddingConfig(batch_max=4)).embed_passages(texts)
    np.testing.assert_allclose(batched, single, atol=1e-5)


def test_passages_embedded_side_by_side_on_two_lanes_equal_those_embedded_one_at_a_time() -> None:
    from bhgbrain_site.core.config import EmbeddingConfig

    texts = [f"Note {i}: the {kind} team moved its {thing} to the new cluster on day {i}"
             for i, (kind, thing) in enumerate([("billing", "queue"), ("search", "index"), ("growth", "reports"),
                                                ("platform", "gateway"), ("data", "warehouse"), ("mobile", "builds")])]
    texts.append("我们把网关从 Kong 换成了 Envoy，延迟降低了三分之一")
    one_lane = embeddings.LocalE5Embedder(EmbeddingConfig(threads=1))
    serial = np.vstack([one_lane.embed_passage(text) for text in texts])
    side_by_side = embeddings.LocalE5Embedder(EmbeddingConfig(threads=2)).embed_passages(texts)
    np.testing.assert_allclose(side_by_side, serial, atol=1e-5)
