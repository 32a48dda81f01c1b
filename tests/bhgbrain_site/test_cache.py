"""The counter-safe database cache (several workers without Redis count rate limits in it): on the
test database, SQLite or PostgreSQL, from threads with their own connections."""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from django.core.management import call_command
from django.db import connection, connections
from django.test import override_settings

from bhgbrain_site.cache import CounterDatabaseCache

TABLE = "bhgbrain_test_counter_cache"


@pytest.fixture
def counter_cache(transactional_db: None) -> Iterator[CounterDatabaseCache]:  # noqa: ARG001 - the fixture gives the database
    caches = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
              "counter": {"BACKEND": "bhgbrain_site.cache.CounterDatabaseCache", "LOCATION": TABLE}}
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
