"""How many live memories each namespace holds, per tier: kept by the database itself.

Triggers on ``memories`` (created by migration 0016, checked after every ``migrate``) count every
insert, delete and change of ``namespace``, ``retention_tier`` or ``archived`` into
``namespace_usage``, so a count is one indexed read whatever path wrote the memory (the funnel,
a bulk restore, an admin edit, raw SQL), and nothing can make it drift.

- SQLite: one row per namespace, updated in place (writers are serialised by ``BEGIN IMMEDIATE``).
- PostgreSQL: each change appends a row; no two writers ever wait on one counter row (a locked
  counter would serialise every insert of a namespace and could deadlock with the cleanup, which
  locks memories first). :func:`fold` sums a namespace's rows into one; the quota check folds the
  namespace it counts when it holds more than ``FOLD_AT`` rows, the cleanup folds every one.

A memory counts from its insert until it is deleted: one that expired counts until the cleanup
archives it (:func:`expired_counts` tells the quota check how many of those there are).
"""
from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.db import connection, transaction
from django.db.models import Count

from bhgbrain_site.core.contracts import TIERS
from memories.models import Memory

TierCounts = dict[str, int]
FOLD_AT = 32  # rows of one namespace (PostgreSQL) above which the quota check folds them
TRIGGERS = ("memories_usage_insert", "memories_usage_delete", "memories_usage_update")


def zero() -> TierCounts:
    return dict.fromkeys(TIERS, 0)


# --------------------------------------------------------------------------- the triggers


# SQLite: one row per namespace; a comparison is 0 or 1. The row is made on a namespace's first memory.
_SQLITE_ADD = """
    INSERT INTO namespace_usage (namespace, t0, t1, t2, t3) SELECT NEW.namespace, 0, 0, 0, 0
        WHERE NOT NEW.archived AND NOT EXISTS (SELECT 1 FROM namespace_usage WHERE namespace = NEW.namespace);
    UPDATE namespace_usage SET t0 = t0 + (NEW.retention_tier = 'T0'), t1 = t1 + (NEW.retention_tier = 'T1'),
                               t2 = t2 + (NEW.retention_tier = 'T2'), t3 = t3 + (NEW.retention_tier = 'T3')
        WHERE NOT NEW.archived AND id = (SELECT MIN(id) FROM namespace_usage WHERE namespace = NEW.namespace);"""
_SQLITE_REMOVE = """
    UPDATE namespace_usage SET t0 = t0 - (OLD.retention_tier = 'T0'), t1 = t1 - (OLD.retention_tier = 'T1'),
                               t2 = t2 - (OLD.retention_tier = 'T2'), t3 = t3 - (OLD.retention_tier = 'T3')
        WHERE NOT OLD.archived AND id = (SELECT MIN(id) FROM namespace_usage WHERE namespace = OLD.namespace);"""
SQLITE_TRIGGERS = {
    "memories_usage_insert": f"CREATE TRIGGER IF NOT EXISTS memories_usage_insert AFTER INSERT ON memories "
                             f"BEGIN {_SQLITE_ADD} END",
    "memories_usage_delete": f"CREATE TRIGGER IF NOT EXISTS memories_usage_delete AFTER DELETE ON memories "
                             f"BEGIN {_SQLITE_REMOVE} END",
    "memories_usage_update": "CREATE TRIGGER IF NOT EXISTS memories_usage_update "
                             "AFTER UPDATE OF namespace, retention_tier, archived ON memories "
                             "WHEN OLD.namespace IS NOT NEW.namespace OR OLD.retention_tier IS NOT NEW.retention_tier "
                             f"OR OLD.archived IS NOT NEW.archived BEGIN {_SQLITE_REMOVE} {_SQLITE_ADD} END",
}

# PostgreSQL: every change appends a row (+1 or -1 in its tier's column); fold() sums them.
PG_FUNCTION = """
CREATE OR REPLACE FUNCTION memories_usage() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        IF NOT OLD.archived THEN
            INSERT INTO namespace_usage (namespace, t0, t1, t2, t3) VALUES (OLD.namespace,
                -(OLD.retention_tier = 'T0')::int, -(OLD.retention_tier = 'T1')::int,
                -(OLD.retention_tier = 'T2')::int, -(OLD.retention_tier = 'T3')::int);
        END IF;
    END IF;
    IF TG_OP <> 'DELETE' THEN
        IF NOT NEW.archived THEN
            INSERT INTO namespace_usage (namespace, t0, t1, t2, t3) VALUES (NEW.namespace,
                (NEW.retention_tier = 'T0')::int, (NEW.retention_tier = 'T1')::int,
                (NEW.retention_tier = 'T2')::int, (NEW.retention_tier = 'T3')::int);
        END IF;
    END IF;
    RETURN NULL;
END $$"""
PG_TRIGGERS = {
    "memories_usage_insert": "CREATE TRIGGER memories_usage_insert AFTER INSERT ON memories "
                             "FOR EACH ROW EXECUTE FUNCTION memories_usage()",
    "memories_usage_delete": "CREATE TRIGGER memories_usage_delete AFTER DELETE ON memories "
                             "FOR EACH ROW EXECUTE FUNCTION memories_usage()",
    "memories_usage_update": "CREATE TRIGGER memories_usage_update AFTER UPDATE OF namespace, retention_tier, archived "
                             "ON memories FOR EACH ROW WHEN (OLD.namespace IS DISTINCT FROM NEW.namespace "
                             "OR OLD.retention_tier IS DISTINCT FROM NEW.retention_tier "
                             "OR OLD.archived IS DISTINCT FROM NEW.archived) EXECUTE FUNCTION memories_usage()",
}

_RECOUNT = """
    INSERT INTO namespace_usage (namespace, t0, t1, t2, t3)
    SELECT namespace, SUM(CASE WHEN retention_tier = 'T0' THEN 1 ELSE 0 END),
           SUM(CASE WHEN retention_tier = 'T1' THEN 1 ELSE 0 END), SUM(CASE WHEN retention_tier = 'T2' THEN 1 ELSE 0 END),
           SUM(CASE WHEN retention_tier = 'T3' THEN 1 ELSE 0 END)
    FROM memories WHERE NOT archived GROUP BY namespace"""


def triggers_present(using: object = None) -> set[str]:
    """The usage triggers the database has."""
    db = using or connection
    with db.cursor() as cursor:
        if db.vendor == "postgresql":
            cursor.execute("SELECT tgname FROM pg_trigger WHERE tgrelid = 'memories'::regclass AND NOT tgisinternal")
        else:
            cursor.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'memories'")
        return {name for (name,) in cursor.fetchall()} & set(TRIGGERS)


def install_triggers(using: object = None) -> bool:
    """Create the usage triggers that are missing and count every namespace again if any was (a
    table rebuilt by a later migration on SQLite loses its triggers). True when it changed anything."""
    db = using or connection
    missing = set(TRIGGERS) - triggers_present(db)
    if not missing:
        return False
    with transaction.atomic(using=db.alias), db.cursor() as cursor:
        if db.vendor == "postgresql":
            cursor.execute(PG_FUNCTION)
        for name in sorted(missing):
            cursor.execute((PG_TRIGGERS if db.vendor == "postgresql" else SQLITE_TRIGGERS)[name])
        cursor.execute("DELETE FROM namespace_usage")
        cursor.execute(_RECOUNT)
    return True


def remove_triggers(using: object = None) -> None:
    """Drop the usage triggers (the migration's reverse)."""
    db = using or connection
    with db.cursor() as cursor:
        for name in TRIGGERS:
            cursor.execute(f"DROP TRIGGER IF EXISTS {name}" + (" ON memories" if db.vendor == "postgresql" else ""))
        if db.vendor == "postgresql":
            cursor.execute("DROP FUNCTION IF EXISTS memories_usage()")


# --------------------------------------------------------------------------- reading and folding

_SUMS = "COALESCE(SUM(t0), 0), COALESCE(SUM(t1), 0), COALESCE(SUM(t2), 0), COALESCE(SUM(t3), 0)"


def _counts(row: Iterable[int]) -> TierCounts:
    return {tier: int(value) for tier, value in zip(TIERS, row, strict=True)}


def counts(namespace: str) -> TierCounts:
    """The live memories of ``namespace`` per tier (one indexed read); on PostgreSQL its rows are
    folded first when there are more than FOLD_AT (call it under the namespace's quota lock)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {_SUMS}, COUNT(*) FROM namespace_usage WHERE namespace = %s", [namespace])  # noqa: S608
        *sums, rows = cursor.fetchone()
    if rows > FOLD_AT and connection.vendor == "postgresql":
        fold(namespace)
    return _counts(sums)


def counts_of(namespaces: Iterable[str] | None = None) -> dict[str, TierCounts]:
    """Per tier, the live memories of each namespace that holds or held any (``namespaces``: only those)."""
    sql = f"SELECT namespace, {_SUMS} FROM namespace_usage"  # noqa: S608 - fixed column names
    params: list[str] = []
    if namespaces is not None:
        names = sorted(namespaces)
        if not names:
            return {}
        sql += f" WHERE namespace IN ({', '.join(['%s'] * len(names))})"
        params = names
    with connection.cursor() as cursor:
        cursor.execute(sql + " GROUP BY namespace", params)
        return {namespace: _counts(sums) for namespace, *sums in cursor.fetchall()}


def live_total() -> int:
    """Every namespace's live memories together (one read of the counters: counting the memories
    themselves read the whole table, 1.06 s at a million rows on a cold PostgreSQL)."""
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {_SUMS} FROM namespace_usage")  # noqa: S608 - fixed column names
        return sum(int(value) for value in cursor.fetchone())


def fold(namespace: str) -> None:
    """Replace the namespace's rows by one holding their sums (PostgreSQL). Rows another transaction
    appends meanwhile are not seen by the DELETE and stay, to be added to the sum later."""
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "WITH gone AS (DELETE FROM namespace_usage WHERE namespace = %s RETURNING t0, t1, t2, t3) "
            "INSERT INTO namespace_usage (namespace, t0, t1, t2, t3) "
            "SELECT %s, SUM(t0), SUM(t1), SUM(t2), SUM(t3) FROM gone HAVING COUNT(*) > 0",
            [namespace, namespace],
        )


def crowded(more_than: int = 1) -> list[str]:
    """Namespaces with more than ``more_than`` rows (PostgreSQL: what a fold makes one)."""
    if connection.vendor != "postgresql":
        return []
    with connection.cursor() as cursor:
        cursor.execute("SELECT namespace FROM namespace_usage GROUP BY namespace HAVING COUNT(*) > %s", [more_than])
        return [namespace for (namespace,) in cursor.fetchall()]


def expired_counts(namespace: str, now: datetime) -> TierCounts:
    """The namespace's live memories that expired and still wait for the cleanup, per tier."""
    found = zero()
    rows = (Memory.objects.filter(namespace=namespace, archived=False, decay_eligible=True, expires_at__lt=now)
            .values("retention_tier").annotate(n=Count("*")).order_by())
    for row in rows:
        found[row["retention_tier"]] = row["n"]
    return found
