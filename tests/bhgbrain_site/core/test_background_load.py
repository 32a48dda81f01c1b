"""A compiled module's background load (bhgbrain_site/core/background_load.py): started once,
read without waiting, waited for on request, and a failed load leaves the caller's own path."""
from __future__ import annotations

import logging
import threading
import types

import pytest

from bhgbrain_site.core.background_load import BackgroundLoad


def test_a_load_starts_once_and_is_read_without_waiting() -> None:
    gate = threading.Event()
    module = types.ModuleType("kernels")
    calls: list[int] = []

    def load() -> types.ModuleType:
        calls.append(1)
        gate.wait(10)
        return module

    loader = BackgroundLoad("test kernels", "test-load")
    assert loader.state == "idle" and loader.ready() is None
    assert loader.start(load) is True
    assert loader.start(load) is False  # one load a process
    assert loader.state == "loading" and loader.ready() is None
    assert loader.wait(0.05) is None  # a short wait gives up, the load goes on
    gate.set()
    assert loader.wait(10) is module and loader.state == "ready" and loader.ready() is module
    assert loader.load_now(load) is module
    assert calls == [1]


def test_load_now_waits_for_a_load_under_way_instead_of_starting_another() -> None:
    gate = threading.Event()
    module = types.ModuleType("kernels")
    loader = BackgroundLoad("test kernels", "test-load")
    loader.start(lambda: gate.wait(10) and module)
    threading.Timer(0.05, gate.set).start()
    assert loader.load_now(lambda: pytest.fail("a second load started")) is module


def test_a_failed_load_is_unavailable_for_good_and_says_so(caplog: pytest.LogCaptureFixture) -> None:
    def load() -> types.ModuleType:
        raise ImportError("No module named 'numba'")

    loader = BackgroundLoad("compiled test kernels", "test-load")
    with caplog.at_level(logging.WARNING, logger="bhgbrain_site.core.background_load"):
        assert loader.load_now(load) is None
    assert loader.state == "unavailable" and loader.ready() is None and loader.wait() is None
    assert loader.start(load) is False
    assert "compiled test kernels unavailable" in caplog.text and "numba" in caplog.text
