"""The counter file that several workers on SQLite share for their rate limits
(``SharedCounterCache``): the cache semantics the rate limiter relies on, atomic increments
across threads and across real processes, a full table, and a file of another layout."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from bhgbrain_site.core.shared_cache import SharedCounterCache

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def counters(tmp_path: Path) -> SharedCounterCache:
    return SharedCounterCache(str(tmp_path / "ratelimit.counters"), {})


def test_a_window_opens_once_counts_and_keeps_its_expiry(counters: SharedCounterCache) -> None:
    assert counters.add("window", 0, timeout=60) is True
    assert counters.add("window", 5, timeout=60) is False  # an open window is never reopened
    assert [counters.incr("window") for _ in range(3)] == [1, 2, 3]
    assert counters.incr("window", 10) == 13
    assert counters.get("window") == 13 and counters.has_key("window")
    with pytest.raises(ValueError, match="not found"):
        counters.incr("never-opened")
    assert counters.get("never-opened", "absent") == "absent"


def test_an_expired_window_is_gone_and_reopened(counters: SharedCounterCache) -> None:
    assert counters.add("short", 5, timeout=0.3) is True
    assert counters.incr("short") == 6  # incr keeps the window's expiry, it does not extend it
    time.sleep(0.4)
    with pytest.raises(ValueError, match="not found"):
        counters.incr("short")
    assert counters.get("short") is None
    assert counters.add("short", 0, timeout=60) is True
    assert counters.incr("short") == 1


def test_set_touch_delete_clear_and_get_many(counters: SharedCounterCache) -> None:
    counters.set("a", 1, timeout=None)  # never expires
    counters.set("b", 2, timeout=60)
    counters.set("a", 7)
    assert counters.get_many(["a", "b", "c"]) == {"a": 7, "b": 2}
    assert counters.touch("b", timeout=0.2) is True and counters.touch("c") is False
    time.sleep(0.3)
    assert counters.get("b") is None and counters.get("a") == 7
    assert counters.delete("a") is True and counters.delete("a") is False
    assert counters.get("a") is None
    counters.set("d", 4)
    counters.clear()
    assert counters.get("d") is None


def test_only_integers_are_stored(counters: SharedCounterCache) -> None:
    for value in ("1", 1.5, True, None, 2**63):
        with pytest.raises(TypeError, match="integers"):
            counters.set("x", value)
    assert counters.add("x", 2**63 - 1) is True
    with pytest.raises(TypeError, match="integers"):
        counters.incr("x")  # would overflow the slot
    assert counters.get("x") == 2**63 - 1


def test_increments_from_many_threads_are_never_lost(counters: SharedCounterCache) -> None:
    counters.add("window", 0, timeout=60)
    seen: list[list[int]] = [[] for _ in range(8)]

    def worker(mine: list[int]) -> None:
        mine.extend(counters.incr("window") for _ in range(200))

    threads = [threading.Thread(target=worker, args=(mine,)) for mine in seen]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(value for mine in seen for value in mine) == list(range(1, 1601))


def test_increments_from_several_processes_are_never_lost(tmp_path: Path) -> None:
    """Real processes, as the workers of one server are: each opens the file, opens the window
    if no one has (add) and counts; every value is handed out exactly once."""
    path = tmp_path / "ratelimit.counters"
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO)!r})
        from bhgbrain_site.core.shared_cache import SharedCounterCache
        counters = SharedCounterCache({str(path)!r}, {{}})
        sys.stdin.readline()  # start together
        counters.add("window", 0, timeout=60)
        print(" ".join(str(counters.incr("window")) for _ in range(400)))
    """)
    workers = [subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
               for _ in range(4)]
    for worker in workers:
        worker.stdin.write("go\n")  # type: ignore[union-attr]
        worker.stdin.flush()  # type: ignore[union-attr]
    outputs = [worker.communicate(timeout=60)[0] for worker in workers]
    assert all(worker.returncode == 0 for worker in workers)
    values = sorted(int(value) for output in outputs for value in output.split())
    assert values == list(range(1, 1601))
    assert SharedCounterCache(str(path), {}).get("window") == 1600


class _Tiny(SharedCounterCache):
    SLOTS = 8
    PROBES = 4


def test_a_full_table_drops_the_key_closest_to_expiry(tmp_path: Path) -> None:
    counters = _Tiny(str(tmp_path / "tiny.counters"), {})
    for number in range(20):
        assert counters.add(f"k{number}", number, timeout=100 + number) is True
    live = {number: counters.get(f"k{number}") for number in range(20)}
    kept = {number for number, value in live.items() if value is not None}
    assert 0 < len(kept) <= 8 and all(live[number] == number for number in kept)
    assert 19 in kept  # the newest key is always written
    assert counters.add("k19", 0) is False  # and found again, not duplicated


def test_a_file_of_another_layout_is_started_afresh(tmp_path: Path) -> None:
    path = tmp_path / "ratelimit.counters"
    path.write_bytes(b"not a counter file" * 100)
    counters = SharedCounterCache(str(path), {})
    assert counters.get("window") is None
    assert counters.add("window", 3) is True and counters.incr("window") == 4
    assert path.read_bytes()[:8] == SharedCounterCache.MAGIC
