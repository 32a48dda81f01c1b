"""Caches shared by several server processes: the store's key, a counter file for the workers of
one host, and Django's database cache made safe for counters.

Several workers without Redis count their rate limits in a memory-mapped counter file on SQLite
(``SharedCounterCache``: every worker of a SQLite store is on this host), and in the database on
PostgreSQL, whose servers may run on several hosts (``CounterDatabaseCache``).
Django's ``FileBasedCache`` would not do: a file per key, rewritten whole, with no lock.

In the database, Django's ``DatabaseCache.incr`` reads the value, adds and writes it back with the *default*
timeout, so two processes can lose an increment and every increment moves the expiry. Here
``incr`` locks the row (``SELECT … FOR UPDATE`` on PostgreSQL; SQLite's ``BEGIN IMMEDIATE``
transactions already serialise writers) and rewrites only the value, and ``add`` locks an
expired row before reusing it, so two processes opening the same window cannot both win.
"""
from __future__ import annotations

import base64
import contextlib
import dataclasses
import fcntl
import hashlib
import math
import mmap
import os
import pickle
import struct
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from django.core.cache.backends.base import DEFAULT_TIMEOUT, BaseCache
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


class SharedCounterCache(BaseCache):
    """Integer counters in a memory-mapped file that the processes of one host share.

    Several workers of one ``bhgbrain server start`` on SQLite without Redis count their rate
    limits here instead of in the database: a request then takes a file lock for microseconds
    instead of the store's one write lock (``BEGIN IMMEDIATE``, a write and a commit per request,
    queued behind every ``remember``). ``add``, ``incr``, ``set`` and ``delete`` are atomic
    across processes (``flock`` on the file) and across threads (a lock per process); ``incr``
    keeps the expiry, as :class:`CounterDatabaseCache` does.

    The file (``LOCATION``) is a fixed table of ``SLOTS`` slots: a key's 64-bit hash, its expiry
    (epoch seconds; infinity: never) and its value, found by linear probing over at most
    ``PROBES`` slots. Expired slots are reused. Only integers are stored. When every probed slot
    holds an unexpired key (more than ``SLOTS`` live keys, or a pathological cluster), the one
    closest to expiry is dropped: for a rate limit, that one client's window starts again.
    """

    MAGIC = b"BHGCNT01"
    SLOTS = 16384
    PROBES = 32
    _HEADER = struct.Struct("<8sI4x")
    _SLOT = struct.Struct("<Qdq")  # key hash (0: never used), expires, value

    def __init__(self, location: str, params: dict[str, Any]) -> None:
        super().__init__(params)
        self._path = Path(location)
        self._thread_lock = threading.Lock()
        self._opened: tuple[int, int, mmap.mmap] | None = None  # (pid, fd, map)

    # ------------------------------------------------------------------ the file

    def _map(self) -> tuple[int, mmap.mmap]:
        """The file's descriptor and map, opened (and created) once per process."""
        if self._opened is not None and self._opened[0] == os.getpid():
            return self._opened[1], self._opened[2]
        self._path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
        size = self._HEADER.size + self.SLOTS * self._SLOT.size
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            if os.fstat(fd).st_size != size or os.pread(fd, len(self.MAGIC), 0) != self.MAGIC:
                os.ftruncate(fd, 0)  # new, or another layout: counters are never worth keeping
                os.ftruncate(fd, size)
                os.pwrite(fd, self._HEADER.pack(self.MAGIC, self.SLOTS), 0)
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
        self._opened = (os.getpid(), fd, mmap.mmap(fd, size))
        return fd, self._opened[2]

    @contextlib.contextmanager
    def _locked(self) -> Iterator[mmap.mmap]:
        with self._thread_lock:
            fd, table = self._map()
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                yield table
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)

    def _offset(self, index: int) -> int:
        return self._HEADER.size + index * self._SLOT.size

    def _hash(self, key: str, version: int | None) -> int:
        made = self.make_and_validate_key(key, version=version)
        return int.from_bytes(hashlib.blake2b(made.encode(), digest_size=8).digest(), "little") or 1

    def _find(self, table: mmap.mmap, hashed: int, now: float) -> tuple[int | None, int]:
        """(the slot holding the key unexpired or None, the slot to write it to)."""
        free: int | None = None
        oldest, oldest_expiry = hashed % self.SLOTS, math.inf
        for probe in range(self.PROBES):
            index = (hashed + probe) % self.SLOTS
            held, expires, _value = self._SLOT.unpack_from(table, self._offset(index))
            if held == 0:  # never used: the key is not further along
                return None, index if free is None else free
            if expires <= now:
                if held == hashed:
                    return None, index
                free = index if free is None else free
            elif held == hashed:
                return index, index
            elif expires < oldest_expiry:
                oldest, oldest_expiry = index, expires
        return None, oldest if free is None else free

    @contextlib.contextmanager
    def _slot(self, key: str, version: int | None) -> Iterator[_Slot]:
        """The key's slot, under both locks: where it lives (if unexpired) or would be written."""
        hashed = self._hash(key, version)
        with self._locked() as table:
            live, index = self._find(table, hashed, time.time())
            yield _Slot(table, self._offset(index), hashed, live is not None)

    def _expiry(self, timeout: float | None) -> float:
        expires = self.get_backend_timeout(timeout)
        return math.inf if expires is None else float(expires)

    @staticmethod
    def _integer(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not -(2**63) <= value < 2**63:
            raise TypeError("SharedCounterCache stores 64-bit integers only")
        return value

    # ------------------------------------------------------------------ the cache API

    def add(self, key: str, value: Any, timeout: float | None = DEFAULT_TIMEOUT, version: int | None = None) -> bool:
        value = self._integer(value)
        with self._slot(key, version) as slot:
            if slot.live:
                return False
            slot.write(self._expiry(timeout), value)
            return True

    def incr(self, key: str, delta: int = 1, version: int | None = None) -> int:
        delta = self._integer(delta)
        with self._slot(key, version) as slot:
            if not slot.live:
                raise ValueError(f"Key '{key}' not found.")
            expires, value = slot.read()
            value = self._integer(value + delta)
            slot.write(expires, value)
            return value

    def set(self, key: str, value: Any, timeout: float | None = DEFAULT_TIMEOUT, version: int | None = None) -> None:
        value = self._integer(value)
        with self._slot(key, version) as slot:
            slot.write(self._expiry(timeout), value)

    def get(self, key: str, default: Any = None, version: int | None = None) -> Any:
        with self._slot(key, version) as slot:
            return slot.read()[1] if slot.live else default

    def touch(self, key: str, timeout: float | None = DEFAULT_TIMEOUT, version: int | None = None) -> bool:
        with self._slot(key, version) as slot:
            if slot.live:
                slot.write(self._expiry(timeout), slot.read()[1])
            return slot.live

    def delete(self, key: str, version: int | None = None) -> bool:
        with self._slot(key, version) as slot:
            if slot.live:
                slot.write(0.0, 0)  # expired, but still part of the probe chain
            return slot.live

    def has_key(self, key: str, version: int | None = None) -> bool:
        return self.get(key, version=version) is not None

    def clear(self) -> None:
        with self._locked() as table:
            table[self._HEADER.size:] = bytes(self.SLOTS * self._SLOT.size)


@dataclasses.dataclass(frozen=True)
class _Slot:
    """One slot of a :class:`SharedCounterCache` table, read and written while its locks are held."""

    table: mmap.mmap
    offset: int
    hashed: int
    live: bool  # it holds the key, unexpired

    def read(self) -> tuple[float, int]:
        """(expires, value)"""
        _held, expires, value = SharedCounterCache._SLOT.unpack_from(self.table, self.offset)  # noqa: SLF001 - the layout
        return expires, value

    def write(self, expires: float, value: int) -> None:
        SharedCounterCache._SLOT.pack_into(self.table, self.offset, self.hashed, expires, value)  # noqa: SLF001
