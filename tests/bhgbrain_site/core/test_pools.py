"""The operations' thread pool: the thread that finished last takes the next call."""
from __future__ import annotations

import asyncio
import contextvars
import threading
from concurrent.futures import CancelledError, wait

import pytest

from bhgbrain_site.core.pools import READ_POOL, WRITE_POOL, LifoThreadPool, in_pool, run_beside
from tests.conftest import each_thread

TIMEOUT = 10


def _burst(pool: LifoThreadPool, count: int) -> list[str]:
    """``count`` calls running at once (each waits for the others): ``count`` threads started."""
    barrier = threading.Barrier(count, timeout=TIMEOUT)

    def meet() -> str:
        barrier.wait()
        return threading.current_thread().name

    futures = [pool.submit(meet) for _ in range(count)]
    return [future.result(TIMEOUT) for future in futures]


def _thread_name() -> str:
    return threading.current_thread().name


@pytest.fixture
def pool():
    made = LifoThreadPool(6, thread_name_prefix="test-pool")
    yield made
    made.shutdown(cancel_futures=True)


def test_after_a_burst_one_client_s_calls_stay_on_one_thread(pool):
    started = _burst(pool, 6)
    assert len(set(started)) == 6 and pool.threads == 6
    served = [pool.submit(_thread_name).result(TIMEOUT) for _ in range(30)]
    assert len(set(served)) == 1  # a stdlib ThreadPoolExecutor goes round every idle thread
    assert pool.threads == 6


def test_the_thread_that_finished_last_is_the_one_asked(pool):
    _burst(pool, 3)
    release = {name: threading.Event() for name in ("a", "b")}

    def hold(key: str) -> str:
        release[key].wait(TIMEOUT)
        return threading.current_thread().name

    first, second = pool.submit(hold, "a"), pool.submit(hold, "b")
    release["b"].set()
    second_thread = second.result(TIMEOUT)
    release["a"].set()
    first_thread = first.result(TIMEOUT)
    assert pool.submit(_thread_name).result(TIMEOUT) == first_thread != second_thread


def test_a_sequential_load_starts_one_thread_and_a_busy_thread_is_never_asked(pool):
    assert [pool.submit(_thread_name).result(TIMEOUT) for _ in range(5)] == ["test-pool_0"] * 5
    assert pool.threads == 1
    gate = threading.Event()
    busy = pool.submit(gate.wait, TIMEOUT)
    assert pool.submit(_thread_name).result(TIMEOUT) == "test-pool_1"  # not queued behind the busy one
    gate.set()
    assert busy.result(TIMEOUT) is True


def test_calls_beyond_the_limit_wait_and_run_in_arrival_order(pool):
    gate = threading.Event()
    blockers = [pool.submit(gate.wait, TIMEOUT) for _ in range(6)]
    order: list[int] = []
    waiting = [pool.submit(order.append, n) for n in range(20)]
    assert not any(future.done() for future in waiting)
    assert pool.threads == 6  # the limit
    gate.set()
    done, not_done = wait([*blockers, *waiting], timeout=TIMEOUT)
    assert not not_done
    assert order == list(range(20))


def test_errors_reach_the_caller_and_the_thread_serves_on(pool):
    def fail() -> None:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        pool.submit(fail).result(TIMEOUT)
    assert pool.submit(lambda: 42).result(TIMEOUT) == 42
    assert pool.threads == 1


def test_a_cancelled_waiting_call_never_runs(pool):
    gate = threading.Event()
    blockers = [pool.submit(gate.wait, TIMEOUT) for _ in range(6)]
    ran = threading.Event()
    waiting = pool.submit(ran.set)
    assert waiting.cancel()
    gate.set()
    wait(blockers, timeout=TIMEOUT)
    assert pool.submit(lambda: "after").result(TIMEOUT) == "after"
    assert not ran.is_set()
    with pytest.raises(CancelledError):
        waiting.result(0)


def test_shutdown_stops_every_thread_and_refuses_new_calls():
    pool = LifoThreadPool(4, thread_name_prefix="test-shutdown")
    names = _burst(pool, 4)
    gate = threading.Event()
    running = [pool.submit(gate.wait, TIMEOUT) for _ in range(4)]
    queued = pool.submit(lambda: "queued")
    cancelled = pool.submit(lambda: "cancelled")
    assert cancelled.cancel()
    pool.shutdown(wait=False)
    with pytest.raises(RuntimeError, match="after shutdown"):
        pool.submit(lambda: None)
    stopper = threading.Thread(target=pool.shutdown)  # waits for the threads
    stopper.start()
    gate.set()
    stopper.join(TIMEOUT)
    assert not stopper.is_alive()
    assert all(future.result(0) is True for future in running)
    assert queued.result(0) == "queued"  # as ThreadPoolExecutor: calls already accepted still run
    assert not any(thread.name in names for thread in threading.enumerate())


def test_shutdown_with_cancel_futures_drops_the_waiting_calls():
    pool = LifoThreadPool(1, thread_name_prefix="test-cancel")
    gate = threading.Event()
    running = pool.submit(gate.wait, TIMEOUT)
    waiting = [pool.submit(lambda: "late") for _ in range(3)]
    stopper = threading.Thread(target=pool.shutdown, kwargs={"cancel_futures": True})
    stopper.start()
    gate.set()
    stopper.join(TIMEOUT)
    assert running.result(0) is True
    assert all(future.cancelled() for future in waiting)


def test_the_registry_pools_run_event_loop_calls_with_the_caller_s_context():
    import contextvars

    marker: contextvars.ContextVar[str] = contextvars.ContextVar("marker", default="unset")

    async def main() -> tuple[str, str]:
        marker.set("from the caller")
        return await in_pool(READ_POOL, lambda: (marker.get(), threading.current_thread().name))

    value, thread = asyncio.run(main())
    assert value == "from the caller"
    assert thread.startswith("bhgbrain-read")
    assert isinstance(READ_POOL, LifoThreadPool) and isinstance(WRITE_POOL, LifoThreadPool)


def test_a_forked_child_starts_threads_of_its_own():
    import os
    import warnings

    pool = LifoThreadPool(2, thread_name_prefix="test-fork")
    try:
        _burst(pool, 2)
        with warnings.catch_warnings():  # Python 3.12+ warns about forking a threaded process: that is the case
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
        if pid == 0:  # the child: the parent's idle threads do not exist here
            try:
                ok = pool.submit(lambda: 7).result(5) == 7 and pool.threads == 1
            except BaseException:  # noqa: BLE001 - any failure is the exit status
                ok = False
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert pool.submit(lambda: 8).result(TIMEOUT) == 8 and pool.threads == 2  # the parent's are untouched
    finally:
        pool.shutdown()


def test_each_thread_runs_work_once_on_every_started_thread(pool):
    assert each_thread(pool, _thread_name) == 0  # nothing started: nothing to run
    started = set(_burst(pool, 4))
    ran: list[str] = []
    lock = threading.Lock()

    def note() -> None:
        with lock:
            ran.append(threading.current_thread().name)

    assert each_thread(pool, note) == 4
    assert sorted(ran) == sorted(started)  # each thread once, none twice


def test_submit_if_idle_runs_on_a_free_thread_and_never_queues():
    pool = LifoThreadPool(1, thread_name_prefix="test-side")
    try:
        assert pool.submit_if_idle(_thread_name).result(TIMEOUT) == "test-side_0"
        release = threading.Event()
        busy = pool.submit(release.wait, TIMEOUT)
        assert pool.submit_if_idle(_thread_name) is None  # its one thread is busy: nothing queued
        release.set()
        busy.result(TIMEOUT)
        assert pool.submit_if_idle(_thread_name).result(TIMEOUT) == "test-side_0"
    finally:
        pool.shutdown()
    assert pool.submit_if_idle(_thread_name) is None  # shut down


def test_run_beside_carries_the_caller_s_context():
    marker: contextvars.ContextVar[str] = contextvars.ContextVar("marker", default="unset")
    marker.set("caller")
    future = run_beside(lambda: (marker.get(), threading.current_thread().name))
    assert future is not None
    value, name = future.result(TIMEOUT)
    assert value == "caller" and name.startswith("bhgbrain-side")


@pytest.mark.django_db
def test_run_beside_declines_inside_a_transaction():
    """Another thread's connection would not see the caller's uncommitted writes."""
    from django.db import transaction

    with transaction.atomic():
        assert run_beside(_thread_name) is None


def test_each_operation_runs_in_the_pool_of_its_kind():
    """Reads in the read pool; writes that may wait for the embedding model in their own pool, so
    the other writes never queue behind them (tests/faults/test_write_admission.py)."""
    from bhgbrain_site import registry
    from bhgbrain_site.core.pools import EMBED_POOL

    assert {name: registry.executor_for(name) for name in ("search", "recall", "remember", "thread_append", "import",
                                                           "bootstrap", "forget", "tag", "no-such-operation")} == {
        "search": READ_POOL, "recall": READ_POOL, "remember": EMBED_POOL, "thread_append": EMBED_POOL,
        "import": EMBED_POOL, "bootstrap": EMBED_POOL, "forget": WRITE_POOL, "tag": WRITE_POOL,
        "no-such-operation": WRITE_POOL}
    embedding = {op.name for op in registry.operations() if registry.executor_for(op.name) is EMBED_POOL}
    assert embedding == {"remember", "thread_append", "import", "bootstrap"}
