"""Caches shared by several server processes: the store's key, and Django's database cache made
safe for counters.

Several workers without Redis count their rate limits in the database (``CounterDatabaseCache``):
Django's ``DatabaseCache.incr`` reads the value, adds and writes it back with the *default*
timeout, so two processes can lose an increment and every increment moves the expiry. Here
``incr`` locks the row (``SELECT … FOR UPDATE`` on PostgreSQL; SQLite's ``BEGIN IMMEDIATE``
transactions already serialise writers) and rewrites only the value, and ``add`` locks an
expired row before reusing it, so two processes opening the same window cannot both win.
"""
from __future__ import annotations

import base64
import hashlib
import pickle
from datetime import datetime
from typing import Any

from django.core.cache.backends.base import DEFAULT_TIMEOUT
from django.core.cache.backends.db import DatabaseCache
from django.db import connections, models, router, transaction
from django.utils.timezone import now as tz_now


def store_key(database: dict[str, Any]) -> str:
    """A short id of the database a process serves: processes of one store share keys in Redis
    (rate limits, the scheduler's queue), two stores on one Redis never mix them."""
    identity = "|".join(str(database.get(part) or "") for part in ("ENGINE", "HOST", "PORT", "NAME"))
    return hashlib.sha256(identity.encode()).hexdigest()[:12]


class CounterDatabaseCache(DatabaseCache):
    """Django's database cache with ``add`` and ``incr`` atomic across processes."""

    def _locked_row(self, key: str) -> tuple[Any, datetime] | None:
        """(value, expires) of ``key``, locked until the surrounding transaction ends."""
        connection = connections[router.db_for_write(self.cache_model_class)]
        quote = connection.ops.quote_name
        lock = " FOR UPDATE" if connection.features.has_select_for_update else ""
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT {quote('value')}, {quote('expires')} FROM {quote(self._table)} "  # noqa: S608 - quoted names
                f"WHERE {quote('cache_key')} = %s{lock}",
                [key],
            )
            row = cursor.fetchone()
        if row is None:
            return None
        expression = models.Expression(output_field=models.DateTimeField())
        expires = row[1]
        for converter in connection.ops.get_db_converters(expression) + expression.get_db_converters(connection):
            expires = converter(expires, expression, connection)
        return row[0], expires

    def add(self, key: str, value: Any, timeout: float | None = DEFAULT_TIMEOUT, version: int | None = None) -> bool:
        """Store ``value`` unless ``key`` holds an unexpired one. An expired row is overwritten here,
        under its lock: Django's ``add`` judges expiry against the time cut to the second, so for up
        to a second after a window closed it refused to reopen what ``incr`` already saw as closed
        (every rate-limited request in that second failed)."""
        database = router.db_for_write(self.cache_model_class)
        with transaction.atomic(using=database):
            row = self._locked_row(self.make_and_validate_key(key, version=version))
            if row is None:
                return super().add(key, value, timeout, version)
            if row[1] >= tz_now():
                return False
            self.set(key, value, timeout, version)
            return True

    def incr(self, key: str, delta: int = 1, version: int | None = None) -> int:
        made = self.make_and_validate_key(key, version=version)
        database = router.db_for_write(self.cache_model_class)
        connection = connections[database]
        quote = connection.ops.quote_name
        with transaction.atomic(using=database):
            row = self._locked_row(made)
            if row is None or row[1] < tz_now():
                raise ValueError(f"Key '{key}' not found.")
            value = pickle.loads(base64.b64decode(connection.ops.process_clob(row[0]).encode())) + delta  # noqa: S301 - our own rows
            encoded = base64.b64encode(pickle.dumps(value, self.pickle_protocol)).decode("latin1")
            with connection.cursor() as cursor:
                cursor.execute(
                    f"UPDATE {quote(self._table)} SET {quote('value')} = %s WHERE {quote('cache_key')} = %s",  # noqa: S608
                    [encoded, made],
                )
        return value
