"""Memories loaded by id for a search's hits, with the query compiled once.

``Memory.objects.defer("embedding").in_bulk(ids)`` builds and compiles its query on every call
(~0.2 ms warm). Right after a million-row full-text search, whose numpy passes have evicted the
CPU caches, the whole call took 1.2-1.5 ms against 0.55 alone, for ten rows (docs/performance.md,
"Rows after a search"): Django's query building touches many objects. :func:`memories_by_id`
runs the same SQL, compiled once per id count and kept per thread (a compiler belongs to its
thread's connection), with Django's own converters and ``Model.from_db``: the same instances
``in_bulk`` returns, the embedding deferred alike.
"""
from __future__ import annotations

import threading
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db import connections

from memories.models import Memory

DB_ALIAS = "default"
BATCH = 500  # ids per query: far below every backend's parameter limit
_CACHED_COUNTS = 64  # queries kept per thread: one per distinct id count up to this


@dataclass(frozen=True)
class _Compiled:
    sql: str
    compiler: Any  # the SQLCompiler: its apply_converters, bound to this thread's connection
    converters: dict[int, Any]
    init_list: list[str]
    start: int
    end: int


_local = threading.local()


def _compiled(count: int) -> _Compiled:
    connection = connections[DB_ALIAS]
    cache: dict[tuple[int, int], _Compiled] = _local.__dict__.setdefault("queries", {})
    key = (id(connection), count)
    found = cache.get(key)
    if found is not None:
        return found
    stand_ins = [uuid.UUID(int=i + 1) for i in range(count)]  # distinct: IN keeps one of each
    compiler = Memory.objects.defer("embedding").filter(pk__in=stand_ins).query.get_compiler(connection=connection)
    sql, params = compiler.as_sql()
    if len(params) != count:
        raise AssertionError(f"expected {count} parameters, the compiled query has {len(params)}")
    select_fields = compiler.klass_info["select_fields"]
    start, end = select_fields[0], select_fields[-1] + 1
    compiled = _Compiled(sql, compiler, compiler.get_converters([column[0] for column in compiler.select]),
                         [column[0].target.attname for column in compiler.select[start:end]], start, end)
    if len(cache) >= _CACHED_COUNTS:
        cache.clear()
    cache[key] = compiled
    return compiled


def memories_by_id(ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, Memory]:
    """The memories with these ids (missing ones left out), embedding deferred, like
    ``Memory.objects.defer("embedding").in_bulk(ids)``."""
    unique = list(dict.fromkeys(ids))
    found: dict[uuid.UUID, Memory] = {}
    connection = connections[DB_ALIAS]
    pk = Memory._meta.pk
    assert pk is not None
    for at in range(0, len(unique), BATCH):
        batch = unique[at:at + BATCH]
        compiled = _compiled(len(batch))
        params = [pk.get_db_prep_value(memory_id, connection) for memory_id in batch]
        with connection.cursor() as cursor:
            cursor.execute(compiled.sql, params)
            rows = cursor.fetchall()
        for row in compiled.compiler.apply_converters(rows, compiled.converters) if compiled.converters else rows:
            memory = Memory.from_db(DB_ALIAS, compiled.init_list, row[compiled.start:compiled.end])
            found[memory.pk] = memory
    return found
