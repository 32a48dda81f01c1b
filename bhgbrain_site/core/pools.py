"""A thread pool whose most recently idle thread takes the next call.

:class:`concurrent.futures.ThreadPoolExecutor` hands a call to whichever idle thread its queue
wakes, which is in practice the one idle longest: once a burst of concurrent calls has started
all twelve threads, one client's calls go round all twelve in turn. Each thread keeps its own
database connection (its own page cache and prepared statements) and each call then finds that
thread's caches cold. Measured on a 10k store, one client, cached semantic ``/tool`` searches:
after a burst, 1.93–2.03 ms p50 and about 1.9 ms of server CPU a call, spread over every thread,
against 1.69–1.75 ms and 1.62 ms on one thread before the burst.

Here an idle thread waits on a stack: a call goes to the thread that finished last (a thread
that is busy is never asked), a new thread is started only when none is idle, and calls that
find every thread busy wait in arrival order. So a light load runs on the fewest threads, each
kept warm, and a heavy one still uses them all.
"""
from __future__ import annotations

import asyncio
import contextvars
import itertools
import os
import threading
import time
import weakref
from collections import deque
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor, Future
from typing import Any, TypeVar

from django.db import connections

T = TypeVar("T")

_Call = tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]


class _Idle:
    """One idle thread's hand-over: the call it is given (``None``: stop) and the signal."""

    __slots__ = ("call", "wake")

    def __init__(self) -> None:
        self.call: _Call | None = None
        self.wake = threading.Semaphore(0)


class LifoThreadPool(Executor):
    """At most ``max_workers`` threads, started on demand, the most recently idle one used first."""

    def __init__(self, max_workers: int, thread_name_prefix: str) -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        self._max_workers = max_workers
        self._prefix = thread_name_prefix
        self._lock = threading.Lock()
        self._idle: list[_Idle] = []  # a stack: the last one in is the next one used
        self._waiting: deque[_Call] = deque()  # calls that found every thread busy, oldest first
        self._threads: list[threading.Thread] = []
        self._numbers = itertools.count()
        self._shutdown = False
        # As ThreadPoolExecutor does: at interpreter exit, before non-daemon threads are joined,
        # idle threads are told to stop (a running call finishes first).
        threading._register_atexit(self.shutdown)  # type: ignore[attr-defined]  # noqa: SLF001 - the stdlib pools use it
        # A forked child (a worker a process manager forks) has none of the parent's threads: its
        # pool starts empty, or a call handed to a parent's idle thread would never run.
        forked = weakref.WeakMethod(self._forget_threads)
        os.register_at_fork(after_in_child=lambda: (method := forked()) and method())

    def _forget_threads(self) -> None:
        self._lock = threading.Lock()
        self._idle.clear()
        self._threads.clear()

    @property
    def threads(self) -> int:
        """Threads started so far (they live as long as the pool)."""
        return len(self._threads)

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        self._place((future, fn, args, kwargs), wait=True)
        return future

    def submit_if_idle(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any] | None:
        """Like :meth:`submit` when a thread is idle or may be started; None (nothing queued)
        when every thread is busy or the pool is shut down: the caller does the work itself."""
        future: Future[Any] = Future()
        return future if self._place((future, fn, args, kwargs), wait=False) else None

    def _place(self, call: _Call, *, wait: bool) -> bool:
        """Hand ``call`` to an idle thread or a new one; else queue it (``wait``) or refuse it.
        One hold of the lock: no thread can become busy between the look and the hand-off."""
        with self._lock:
            if self._shutdown:
                if wait:
                    raise RuntimeError("cannot schedule new futures after shutdown")
                return False
            if self._idle:
                self._hand(self._idle.pop(), call)
            elif len(self._threads) < self._max_workers:
                self._start(call)
            elif wait:
                self._waiting.append(call)
            else:
                return False
        return True

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shutdown = True
            if cancel_futures:
                while self._waiting:
                    self._waiting.popleft()[0].cancel()
            while self._idle:
                self._hand(self._idle.pop(), None)
            threads = list(self._threads)
        if wait:
            for thread in threads:
                if thread is not threading.current_thread():
                    thread.join()

    @staticmethod
    def _hand(idle: _Idle, call: _Call | None) -> None:
        idle.call = call
        idle.wake.release()

    def _start(self, call: _Call) -> None:
        thread = threading.Thread(target=self._work, args=(call,), name=f"{self._prefix}_{next(self._numbers)}")
        self._threads.append(thread)
        thread.start()

    def _work(self, call: _Call | None) -> None:
        idle = _Idle()
        while call is not None:
            outcome = _run(call)
            call, parked = self._next_or_park(idle)
            if outcome is not None:
                # Only now does the caller learn the result, with this thread already back on the
                # stack: a caller that submits again at once finds it idle (no new thread).
                _settle(outcome)
            outcome = None  # nothing of the finished call stays referenced while this thread waits
            if parked:
                idle.wake.acquire()
                call = idle.call

    def _next_or_park(self, idle: _Idle) -> tuple[_Call | None, bool]:
        """The oldest waiting call; else, unless shutting down, this thread goes on the idle stack."""
        with self._lock:
            if self._waiting:
                return self._waiting.popleft(), False
            if self._shutdown:
                return None, False
            idle.call = None
            self._idle.append(idle)
            return None, True


_Outcome = tuple[Future[Any], BaseException | None, Any]


def _run(call: _Call) -> _Outcome | None:
    """Run a call (unless it was cancelled while waiting); its future is completed by :func:`_settle`."""
    future, fn, args, kwargs = call
    if not future.set_running_or_notify_cancel():
        return None
    try:
        return future, None, fn(*args, **kwargs)
    except BaseException as exc:  # noqa: BLE001 - the caller gets it through the future
        return future, exc, None


def _settle(outcome: _Outcome) -> None:
    future, error, result = outcome
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


# --------------------------------------------------------------------------- the operations' pools

# Operations run in three thread pools, shared by every transport of the process (HTTP and MCP),
# instead of the event loop's default one: calls that write queue apart from those that only
# read, so a burst of writes never holds every thread while a search waits for one; and the
# writes that embed passages (remember, thread_append, import...) queue apart from the other
# writes: under a write burst each of their threads waits for the model (embedding it passage
# after passage), and a forget or a tag queued behind them waited 0.3-0.7 s for a thread that
# was only waiting (bench/load.py, docs/performance.md). Each thread keeps its database
# connection between calls (no connection set-up per call; up to 12 + 12 + 12 + the side
# threads a process under full load); the registry's call drops one that broke
# (:func:`drop_broken_connections`). The thread that finished last takes the next call
# (:class:`LifoThreadPool`), so a light load keeps one thread's caches warm.
READ_POOL = LifoThreadPool(12, thread_name_prefix="bhgbrain-read")
WRITE_POOL = LifoThreadPool(12, thread_name_prefix="bhgbrain-write")
EMBED_POOL = LifoThreadPool(12, thread_name_prefix="bhgbrain-embed")
# One side of a hybrid search (the vector search) runs here while the caller scores the other
# (search/selectors.py): as many threads as there are cores to run both on, and a search that finds
# them all busy runs both sides itself (``submit_if_idle``), so a burst never queues behind it.
SIDE_POOL = LifoThreadPool(max(1, min(4, os.cpu_count() or 1)), thread_name_prefix="bhgbrain-side")


def run_beside(work: Callable[[], T]) -> Future[T] | None:
    """``work()`` on a side thread (:data:`SIDE_POOL`) with the caller's context (its degraded-path
    notes, its step timers), or None, running nothing, when every side thread is busy or the caller
    is inside a transaction (another thread's connection would not see its uncommitted writes)."""
    if any(conn.in_atomic_block for conn in connections.all(initialized_only=True)):
        return None
    return SIDE_POOL.submit_if_idle(_side_call, contextvars.copy_context(), work)


def _side_call(context: contextvars.Context, work: Callable[[], T]) -> T:
    drop_broken_connections()
    return context.run(work)


def in_pool(executor: Executor, work: Callable[..., T], *args: Any) -> Awaitable[T]:
    """Run ``work(*args)`` in one of the pools from the event loop (with the caller's context)."""
    return asyncio.get_running_loop().run_in_executor(executor, contextvars.copy_context().run, work, *args)


# --------------------------------------------------------------------------- their threads' connections

IDLE_CHECK_S = 30.0  # a thread's connection unused this long is checked before its next query
_thread_calls = threading.local()  # .at: when this thread last began a call (time.monotonic)


def drop_broken_connections() -> None:
    """Close this thread's database connections that failed and no longer answer (PostgreSQL
    restarted, say), so the next query reconnects. Django checks connections only at a request's
    start and end, in the thread that handles its signals; calls run in thread pools, whose
    connections would otherwise stay broken until the process restarts.

    A connection this thread has not used for ``IDLE_CHECK_S`` is checked before its next query
    (Django's ``CONN_HEALTH_CHECKS``, on for PostgreSQL): a database, pooler or proxy that closes
    idle connections would otherwise fail that query once. The pool keeps a light load on the
    threads that finished last, so the others can sit idle for long."""
    now = time.monotonic()
    idle = now - getattr(_thread_calls, "at", now) >= IDLE_CHECK_S
    _thread_calls.at = now
    for conn in connections.all(initialized_only=True):
        if conn.connection is None or conn.in_atomic_block:
            continue
        if idle:
            conn.health_check_done = False  # its next cursor runs is_usable() first, if health checks are on
        if not conn.errors_occurred:
            continue
        if conn.is_usable():
            conn.errors_occurred = False
        else:
            conn.close()
