"""Reading the change feed without skipping a row that commits late.

Feed ids are handed out when a row is inserted, not when its transaction commits. On PostgreSQL
two writers can therefore commit out of id order: id 101 is visible while id 100 is still in a
running transaction. A reader that moved its position to 101 and read ``id > 101`` from then on
would never see 100.

So a position is two things: the highest id read, and the transactions that were still running
when the reader moved past ids (``pending``, PostgreSQL transaction ids). Every feed row carries
its transaction's id (the ``tx`` column, PostgreSQL only: migration memories 0015), so a read
returns the rows after the position *and* the rows of pending transactions that committed
since; a pending transaction is dropped once a read's snapshot shows it ended (whatever it
wrote was in that very read). Rows, position and snapshot come from one statement, so nothing
commits between them. A writer's transaction takes its id before its first feed row takes one
(``append_statement``): a transaction that drew a feed id always shows up as running.

SQLite has one writer at a time, so ids commit in order there: ``pending`` stays empty and a
read is the plain ``id > position``.
"""
from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass

from django.db import connection

from memories.models import ChangeFeedEntry

Row = tuple[int, uuid.UUID, str]
NO_PENDING: frozenset[int] = frozenset()


@dataclass(frozen=True)
class FeedRead:
    """The rows a read returned (oldest first; some may be older than the position: late
    commits) and the transactions whose rows may still appear below the new position."""

    rows: list[Row]
    pending: frozenset[int]

    def position_after(self, position: int) -> int:
        return max([position, *(row[0] for row in self.rows)])


def tracks_transactions() -> bool:
    """Whether writers can commit out of id order here (PostgreSQL), so readers track ``pending``."""
    return connection.vendor == "postgresql"


# The transaction's id is taken in a materialised CTE: the INSERT's projection, which draws each
# row's id from the sequence, runs only on the rows the CTE scan hands it, so the transaction has
# its id before it has a feed id (one statement: taking it first cost a round trip every write).
APPEND = """WITH x AS MATERIALIZED (SELECT pg_current_xact_id() AS tx)
INSERT INTO {table} (memory_id, op, created_at, tx)
SELECT u.memory_id, %s, %s, x.tx FROM x CROSS JOIN unnest(%s::uuid[]) WITH ORDINALITY AS u(memory_id, n)
ORDER BY u.n RETURNING id"""


def append_statement() -> str:
    """The INSERT that appends feed rows on PostgreSQL (parameters: op, created_at, the memory ids
    as an array; returns their ids in order), its transaction's id taken first. The funnel runs
    it: it is the only writer of feed rows."""
    return _sql(APPEND)


NEWEST = "SELECT id, memory_id FROM {table} ORDER BY id DESC LIMIT 1"
AHEAD = "SELECT id, memory_id, op FROM {table} WHERE id > %s ORDER BY id LIMIT %s"
READ = """WITH snap AS MATERIALIZED (SELECT pg_current_snapshot()::text AS s),
  ahead AS (SELECT id, memory_id, op FROM {table} WHERE id > %s ORDER BY id LIMIT %s),
  late AS (SELECT id, memory_id, op FROM {table} WHERE tx = ANY(%s::text[]::xid8[]) AND id <= %s)
SELECT f.id, f.memory_id, f.op, snap.s FROM snap
  LEFT JOIN (SELECT * FROM ahead UNION ALL SELECT * FROM late) f ON true ORDER BY f.id"""
PROBE = """SELECT pg_current_snapshot()::text, EXISTS (SELECT 1 FROM {table} WHERE id > %s)
  OR EXISTS (SELECT 1 FROM {table} WHERE tx = ANY(%s::text[]::xid8[]) AND id <= %s)"""
START = """WITH snap AS MATERIALIZED (SELECT pg_current_snapshot()::text AS s)
SELECT newest.id, newest.memory_id, snap.s FROM snap
  LEFT JOIN (SELECT id, memory_id FROM {table} ORDER BY id DESC LIMIT 1) newest ON true"""


def _sql(template: str) -> str:
    """A statement above on the feed's table (the model's own name, quoted)."""
    return template.format(table=connection.ops.quote_name(ChangeFeedEntry._meta.db_table))


def _running(snapshot: str) -> frozenset[int]:
    """The transactions running in a ``pg_snapshot`` ("xmin:xmax:xip,xip,...")."""
    listed = snapshot.split(":")[2]
    return frozenset(int(xid) for xid in listed.split(",")) if listed else NO_PENDING


def _xids(pending: Iterable[int]) -> list[str]:
    return [str(xid) for xid in sorted(pending)]


def _memory_id(value: uuid.UUID | str) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(value)


def read_after(position: int, pending: frozenset[int], limit: int | None = None) -> FeedRead:
    """The rows after ``position`` (at most ``limit``) and every row of a ``pending`` transaction
    that committed since, in one statement; the transactions still pending after it."""
    if not tracks_transactions():
        with connection.cursor() as cursor:
            cursor.execute(_sql(AHEAD), [position, -1 if limit is None else limit])
            return FeedRead([(row_id, _memory_id(memory_id), op) for row_id, memory_id, op in cursor.fetchall()], NO_PENDING)
    with connection.cursor() as cursor:
        cursor.execute(_sql(READ), [position, limit, _xids(pending), position])
        fetched = cursor.fetchall()
    running = _running(fetched[0][3])
    rows = [(row_id, _memory_id(memory_id), op) for row_id, memory_id, op, _ in fetched if row_id is not None]
    advanced = any(row[0] > position for row in rows)
    # Moving past ids, every transaction running now may still commit one below the new position;
    # otherwise only the pending ones still running may.
    return FeedRead(rows, running if advanced else pending & running)


def has_news(position: int, pending: frozenset[int]) -> tuple[bool, frozenset[int]]:
    """Whether a read would return a row (one indexed probe: every search asks), and the pending
    transactions still running (those that ended wrote nothing to read)."""
    with connection.cursor() as cursor:
        if not pending:
            cursor.execute(_sql("SELECT 1 FROM {table} WHERE id > %s LIMIT 1"), [position])
            return cursor.fetchone() is not None, NO_PENDING
        cursor.execute(_sql(PROBE), [position, _xids(pending), position])
        snapshot, found = cursor.fetchone()
    return bool(found), pending if found else pending & _running(snapshot)


def start_position() -> tuple[int, str | None, frozenset[int]]:
    """Where a reader that loads everything now starts: the newest row (id, memory id) and the
    transactions running at that moment (rows they commit later are read as late rows)."""
    with connection.cursor() as cursor:
        if not tracks_transactions():
            cursor.execute(_sql(NEWEST))
            found, running = cursor.fetchone(), NO_PENDING
        else:
            cursor.execute(_sql(START))
            row_id, memory_id, snapshot = cursor.fetchone()
            found, running = ((row_id, memory_id) if row_id is not None else None), _running(snapshot)
    if found is None:
        return 0, None, running
    return found[0], str(_memory_id(found[1])), running
