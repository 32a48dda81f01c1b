"""The governance console's landing page: what a curator should look at today.

Read-only selectors, scoped to the curator's namespaces (``memories.curation.namespaces``): the store's
health, memories per namespace × tier against the tier budgets (and the superseded facts each
namespace keeps as history), each namespace's quota use, growth and accesses over the last 30
days, and the queues that need a person (expiring soon, T1 due for review, consolidation
candidates, the vector-sync backlog), backups and the latest audit events. A handful of aggregate
queries, so it stays fast on a large store (docs/performance.md has the measurement).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import CharField, Count, Sum
from django.db.models.functions import Cast, Substr

from bhgbrain_site.core.contracts import TIERS
from memories.curation.namespaces import Namespaces, within
from memories.curation.queues import QUEUES, queue_condition
from memories.models import AccessDay, AuditLog, Memory
from memories.quotas.selectors import QuotaUse, quota_uses
from retention.models import ArchivedMemory, BackupRecord
from retention.selectors import store_health

DAYS = 30  # the charts' window
AUDIT_ROWS = 12


@dataclass(frozen=True)
class TierUse:
    tier: str
    count: int
    budget: int | None

    @property
    def percent(self) -> int | None:
        return None if not self.budget else round(100 * self.count / self.budget)

    @property
    def over(self) -> bool:
        return self.budget is not None and self.count > self.budget


@dataclass
class Dashboard:
    health: dict[str, Any]
    namespaces: list[tuple[str, dict[str, int], int]]  # (namespace, {tier: count}, total)
    tiers: list[TierUse]
    total: int
    max_memories: int
    queues: dict[str, int]
    days: list[date]
    growth: list[int]
    accesses: list[int]
    archived: list[int]
    last_backup: BackupRecord | None
    archived_count: int
    audit: list[AuditLog] = field(default_factory=list)
    scoped: bool = False
    quotas: list[QuotaUse] = field(default_factory=list)  # namespaces with a quota: their use
    superseded: dict[str, int] = field(default_factory=dict)  # live superseded facts (history) per namespace

    @property
    def superseded_total(self) -> int:
        return sum(self.superseded.values())


# COUNT(*), not COUNT(id): the id is not in the partial indexes these counts are read from.


def _tier_matrix(live: Any) -> tuple[list[tuple[str, dict[str, int], int]], dict[str, int]]:
    per_namespace: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(TIERS, 0))
    totals = dict.fromkeys(TIERS, 0)
    for row in live.values("namespace", "retention_tier").annotate(n=Count("*")).order_by():
        per_namespace[row["namespace"]][row["retention_tier"]] = row["n"]
        totals[row["retention_tier"]] += row["n"]
    rows = [(ns, tiers, sum(tiers.values())) for ns, tiers in per_namespace.items()]
    rows.sort(key=lambda r: (-r[2], r[0]))
    return rows, totals


def _superseded(live: Any) -> dict[str, int]:
    """Live memories kept as the history of a newer fact (issue 42), per namespace: read from the
    partial index on ``superseded_by``."""
    rows = live.filter(superseded_by__isnull=False).values("namespace").annotate(n=Count("*")).order_by()
    return {row["namespace"]: row["n"] for row in rows}


def _queues(live: Any, now: datetime) -> dict[str, int]:
    """How many memories wait in each queue a curator works: one count each, so each is
    answered by its own index (one scan with four FILTERs reads the whole table)."""
    return {name: live.filter(queue_condition(name, now)).count() for name in QUEUES}


def _by_day(rows: Any, column: str) -> Any:
    """``rows`` counted per UTC day of ``column``. The day is the first 10 characters of the
    stored time (UTC on both databases): unlike TruncDate, no per-row Python function on SQLite,
    so the count is read from the index."""
    day = Substr(Cast(column, output_field=CharField()), 1, 10)
    return rows.annotate(day=day).values("day").annotate(n=Count("*")).order_by()


_SQLITE_GROWTH = ("SELECT SUBSTR(CAST(created_at AS text), 1, 10), COUNT(*) FROM memories INDEXED BY idx_live_created "
                  "WHERE NOT archived AND created_at >= %s GROUP BY 1")  # Memory's db_table and index (migration 0010)


def _growth(live: Any, since: datetime, namespaces: Namespaces) -> Any:
    """New live memories per UTC day since ``since``.

    On SQLite, for the whole store, the index is named: with sampled statistics the planner
    prefers a skip-scan of ``idx_memories_list`` (20 namespaces look "few") and reads every row
    of the window from the table (129 ms at 100k, against ~20 ms from the partial index)."""
    if namespaces is not None or connection.vendor != "sqlite":
        return _by_day(live.filter(created_at__gte=since), "created_at")
    with connection.cursor() as cursor:
        cursor.execute(_SQLITE_GROWTH, [connection.ops.adapt_datetimefield_value(since)])
        return [{"day": day, "n": n} for day, n in cursor.fetchall()]


def _per_day(rows: Any, days: list[date], value: str = "n") -> list[int]:
    by_day = {str(row["day"])[:10]: row[value] or 0 for row in rows}
    return [int(by_day.get(day.isoformat(), 0)) for day in days]


def _archived_count(namespaces: Namespaces) -> int:
    """Soft-archived memories and the archive's unrestored entries, within ``namespaces``."""
    return (within(Memory.objects.filter(archived=True), namespaces).count()
            + within(ArchivedMemory.objects.filter(restored_at__isnull=True), namespaces).count())


def _health(namespaces: Namespaces) -> dict[str, Any]:
    """The store's health; a curator of some namespaces sees each component's status only (the
    details count the whole store)."""
    health = store_health()
    if namespaces is None:
        return health
    return {"status": health["status"],
            "components": {name: {"status": c["status"]} for name, c in health["components"].items()}}


def dashboard_snapshot(*, namespaces: Namespaces, now: datetime) -> Dashboard:
    """Everything the landing page shows, limited to ``namespaces`` (None: all)."""
    retention = settings.BHGBRAIN.retention
    live = within(Memory.objects.filter(archived=False), namespaces)
    matrix, totals = _tier_matrix(live)
    first = (now - timedelta(days=DAYS - 1)).date()
    days = [first + timedelta(days=i) for i in range(DAYS)]
    since = datetime.combine(first, datetime.min.time(), tzinfo=now.tzinfo)
    growth = _growth(live, since, namespaces)
    archived = _by_day(within(ArchivedMemory.objects.filter(expired_at__gte=since), namespaces), "expired_at")
    accesses = (within(AccessDay.objects.filter(day__gte=first), namespaces)
                .values("day").annotate(n=Sum("accesses")).order_by())
    audit = within(AuditLog.objects.all(), namespaces).order_by("-timestamp")[:AUDIT_ROWS]
    return Dashboard(
        health=_health(namespaces),
        namespaces=matrix,
        tiers=[TierUse(t, totals[t], getattr(retention.tier_budgets, t)) for t in TIERS],
        total=sum(totals.values()),
        max_memories=retention.max_memories,
        queues=_queues(live, now),
        days=days,
        growth=_per_day(growth, days),
        accesses=_per_day(accesses, days),
        archived=_per_day(archived, days),
        last_backup=BackupRecord.objects.order_by("-created_at").first() if namespaces is None else None,
        archived_count=_archived_count(namespaces),
        audit=list(audit),
        scoped=namespaces is not None,
        quotas=quota_uses(namespaces=namespaces, limited_only=True),
        superseded=_superseded(live),
    )
