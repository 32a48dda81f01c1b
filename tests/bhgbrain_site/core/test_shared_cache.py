"""The counter-safe database cache (several workers without Redis count rate limits in it): on the
test database, SQLite or PostgreSQL, from threads with their own connections."""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.db import connection, connections
from django.test import override_settings
from django.utils import timezone

from bhgbrain_site.core.shared_cache import CounterDatabaseCache

TABLE = "bhgbrain_test_counter_cache"


@pytest.fixture
def counter_cache(transactional_db: None) -> Iterator[CounterDatabaseCache]:  # noqa: ARG001 - the fixture gives the database
    caches = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
              "counter": {"BACKEND": "bhgbrain_site.core.shared_cache.CounterDatabaseCache", "LOCATION": TABLE}}
    with override_settings(CACHES=caches):
        call_command("createcachetable", verbosity=0)
    yield CounterDatabaseCache(TABLE, {})
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE {connection.ops.quote_name(TABLE)}")


def _expires(key: str) -> object:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT expires FROM {TABLE} WHERE cache_key = %s", [f":1:{key}"])  # noqa: S608
        return cursor.fetchone()[0]


def test_concurrent_increments_are_never_lost_and_keep_the_expiry(counter_cache: CounterDatabaseCache) -> None:
    assert counter_cache.add("window", 0, timeout=60) is True
    assert counter_cache.add("window", 0, timeout=60) is False  # an open window is never reopened
    expires = _expires("window")
    seen: list[int] = []
    lock = threading.Lock()

    def worker() -> None:
        try:
            for _ in range(25):
                value = counter_cache.incr("window")
                with lock:
                    seen.append(value)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(seen) == list(range(1, 151))  # every increment counted, each value handed out once
    assert counter_cache.get("window") == 150
    assert _expires("window") == expires  # Django's own incr would re-set it with the default timeout


def test_an_expired_window_is_reopened_and_a_missing_one_is_not_counted(counter_cache: CounterDatabaseCache) -> None:
    with pytest.raises(ValueError, match="not found"):
        counter_cache.incr("never-opened")
    assert counter_cache.add("short", 5, timeout=1) is True
    time.sleep(2.1)  # expiries are kept to the second
    with pytest.raises(ValueError, match="not found"):
        counter_cache.incr("short")
    assert counter_cache.add("short", 0, timeout=60) is True
    assert counter_cache.incr("short") == 1


def _expire(key: str, expires: object) -> None:
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {TABLE} SET expires = %s WHERE cache_key = %s",  # noqa: S608
                       [connection.ops.adapt_datetimefield_value(expires), f":1:{key}"])


def test_a_window_closed_a_moment_ago_is_reopened_at_once(counter_cache: CounterDatabaseCache) -> None:
    """Within the second after a window closed, Django's own ``add`` (which cuts "now" to the
    second) still saw it open while ``incr`` saw it closed: the rate limiter's add-then-incr loop
    failed three times and the request got a 500."""
    assert counter_cache.add("window", 7, timeout=60) is True
    while timezone.now().microsecond < 200_000:  # a moment that is not at the start of a second
        time.sleep(0.05)
    _expire("window", timezone.now() - timedelta(milliseconds=1))
    with pytest.raises(ValueError, match="not found"):
        counter_cache.incr("window")  # closed
    assert counter_cache.add("window", 0, timeout=60) is True  # so it is reopened, not refused
    assert counter_cache.incr("window") == 1
    assert counter_cache.add("window", 0, timeout=60) is False  # and is open again
