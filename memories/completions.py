"""Completion reads (MCP ``completion/complete``): names that start with what a client has typed,
most used first, from indexed columns only (a prefix range and a LIMIT; never a scan of the
memories in Python), so an answer stays fast on a large store.

Each returns (values, total): at most ``limit`` values, and how many match in all. A caller's
namespaces are decided by the registry; a selector only filters by the ones it is given.
"""
from __future__ import annotations

import uuid
from datetime import timedelta

from django.db import connection
from django.db.models import Count, Q, QuerySet, Sum
from django.utils import timezone as django_timezone

from memories.models import AccessDay, Collection, Memory, MemoryTag

Matches = tuple[list[str], int]


def starts_with(field: str, prefix: str) -> Q:
    """``field`` starts with ``prefix``, in the form the backend answers from an index: a range on
    SQLite (whose LIKE ignores indexes), LIKE 'prefix%' elsewhere."""
    if not prefix:
        return Q()
    if connection.vendor != "sqlite":
        return Q(**{f"{field}__startswith": prefix})
    upper = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    return Q(**{f"{field}__gte": prefix, f"{field}__lt": upper})


def _ranked(rows: QuerySet, field: str, limit: int) -> Matches:
    """Values of ``field`` with their use (``n``), most used first, then by name. The rows are read
    from an index that covers ``field`` (no filter on ``archived``, which would read every row):
    archived memories count as use too."""
    ranked = list(rows.values(field).annotate(n=Count("*")).order_by("-n", field).values_list(field, flat=True)[:limit + 1])
    if len(ranked) <= limit:
        return ranked, len(ranked)
    return ranked[:limit], rows.values(field).distinct().count()


def _with_empty(values: list[str], total: int, names: QuerySet, limit: int) -> Matches:
    """``values`` followed by the other ``names`` (known but unused), by name, up to ``limit``."""
    if len(values) >= limit:
        return values, total
    extra = sorted(set(names.distinct()[:limit + len(values)]) - set(values))[:limit - len(values)]
    return values + extra, total + len(extra)


def namespaces_complete(*, prefix: str, namespaces: frozenset[str] | None, limit: int) -> Matches:
    """Namespaces with collections, most accessed in the last 30 days first (the dashboard's daily
    counts), then by name; only ``namespaces`` when given. Read from those small tables, never
    from the memories (every remember makes sure its collection exists)."""
    since = django_timezone.now().date() - timedelta(days=30)
    known = Collection.objects.filter(starts_with("namespace", prefix))
    used = AccessDay.objects.filter(starts_with("namespace", prefix), day__gte=since, accesses__gt=0)
    if namespaces is not None:
        known, used = known.filter(namespace__in=namespaces), used.filter(namespace__in=namespaces)
    names = set(known.values_list("namespace", flat=True).distinct())
    use = dict(used.values("namespace").annotate(n=Sum("accesses")).values_list("namespace", "n"))
    ranked = sorted(names | set(use), key=lambda name: (-use.get(name, 0), name))
    return ranked[:limit], len(ranked)


def collections_complete(*, prefix: str, namespace: str, limit: int) -> Matches:
    """Collections of the namespace, most memories first (empty ones last)."""
    values, total = _ranked(Memory.objects.filter(starts_with("collection", prefix), namespace=namespace),
                            "collection", limit)
    known = Collection.objects.filter(starts_with("name", prefix), namespace=namespace).values_list("name", flat=True)
    return _with_empty(values, total, known, limit)


def tags_complete(*, prefix: str, namespace: str, limit: int) -> Matches:
    """Tags of the namespace's live memories, by how many carry each (the tag index)."""
    return _ranked(MemoryTag.objects.filter(starts_with("tag", prefix), namespace=namespace), "tag", limit)


def threads_complete(*, prefix: str, namespace: str, limit: int) -> Matches:
    """Conversation threads of the namespace, by message count."""
    return _ranked(Memory.objects.filter(starts_with("thread", prefix), namespace=namespace, thread__isnull=False),
                   "thread", limit)


def keys_complete(*, prefix: str, namespace: str, limit: int) -> Matches:
    """Fact keys of the namespace, the ones with most versions first (idx_memories_fact_key); what
    was typed is matched as keys are stored (casefolded, inner whitespace collapsed)."""
    typed = " ".join(prefix.split()).casefold() + (" " if prefix[-1:].isspace() and prefix.strip() else "")
    return _ranked(Memory.objects.filter(starts_with("fact_key", typed), namespace=namespace, fact_key__isnull=False),
                   "fact_key", limit)


def _id_range(prefix: str) -> Q | None:
    """The ids starting with ``prefix`` (hex digits, dashes ignored) as a range of the primary key;
    None when the prefix cannot start an id."""
    digits = prefix.replace("-", "").lower()
    if len(digits) > 32 or any(c not in "0123456789abcdef" for c in digits):
        return None
    if not digits:
        return Q()
    return Q(pk__gte=uuid.UUID(digits.ljust(32, "0")), pk__lte=uuid.UUID(digits.ljust(32, "f")))


def memory_ids_complete(*, prefix: str, namespace: str, limit: int) -> Matches:
    """Ids of the namespace's live memories (for memory://{id}): most accessed first, then newest."""
    found = _id_range(prefix)
    if found is None:
        return [], 0
    rows = Memory.objects.filter(found, namespace=namespace, archived=False)
    if not prefix:  # every memory matches: the newest, from the list index, rather than sorting them all
        ids = rows.order_by("-created_at", "-id").values_list("id", flat=True)[:limit]
    else:
        ids = rows.order_by("-access_count", "-created_at").values_list("id", flat=True)[:limit]
    values = [str(i) for i in ids]
    total = len(values) if len(values) < limit else rows.count()
    return values, total
