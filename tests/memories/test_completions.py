"""Completion reads (memories/completions.py) and the tag index the write funnel keeps for them."""
from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection

from memories import completions
from memories.models import MemoryTag
from memories.services import collection_delete, memory_forget, memory_tag
from retention import archive
from retention.backups import create, restore
from tests.conftest import remember

pytestmark = pytest.mark.django_db(transaction=True)


def _tags(namespace: str = "global", prefix: str = "") -> list[str]:
    return completions.tags_complete(prefix=prefix, namespace=namespace, limit=100)[0]


def test_the_tag_index_follows_every_write(hash_embedder) -> None:
    first = remember("The deploy runs from CI", tags=["ci", "deploy"])
    remember("Lint runs in CI too", tags=["ci"])
    remember("Another namespace's tag", tags=["secret"], namespace="other")
    assert _tags() == ["ci", "deploy"]  # most used first
    memory_tag(memory_id=first.id, add=["release"], remove=["deploy"], namespace="global", actor="test")
    assert _tags() == ["ci", "release"]
    archive.memory_archive(memory_id=first.id, actor="test")
    assert _tags() == ["ci"]  # an archived memory's tags leave the index
    saved = create.backup_create(actor="test")
    scratch = remember("Scratch", tags=["tmp"], collection="scratch")
    assert _tags(prefix="t") == ["tmp"]
    collection_delete(namespace="global", name="scratch", force=True, actor="test")
    assert _tags(prefix="t") == []
    other = remember("Gone soon", tags=["gone"])
    memory_forget(memory_id=other.id, namespace="global", actor="test")
    assert "gone" not in _tags()
    restore.backup_restore(path=saved.path, actor="test")
    assert _tags() == ["ci"] and _tags("other") == ["secret"]  # rebuilt from the restored store
    assert scratch.id not in {str(m) for m in MemoryTag.objects.values_list("memory_id", flat=True)}


def test_memory_ids_complete_from_any_prefix_within_the_namespace(hash_embedder) -> None:
    mine = remember("Mine")
    remember("Theirs", namespace="other")
    for prefix in ("", mine.id[:1], mine.id[:9], mine.id.replace("-", "")[:12].upper(), mine.id):
        values, total = completions.memory_ids_complete(prefix=prefix, namespace="global", limit=100)
        assert values == [mine.id] and total == 1, prefix
    assert completions.memory_ids_complete(prefix="not-hex", namespace="global", limit=100) == ([], 0)


def test_namespaces_rank_by_recent_use_and_stay_within_the_callers(hash_embedder) -> None:
    from django.utils import timezone

    from memories.models import AccessDay

    for namespace in ("team-a", "team-b", "team-c"):
        remember(f"note of {namespace}", namespace=namespace)
    AccessDay.objects.create(day=timezone.now().date(), namespace="team-b", accesses=5)
    AccessDay.objects.create(day=timezone.now().date() - timedelta(days=90), namespace="team-c", accesses=50)  # long ago
    assert completions.namespaces_complete(prefix="team", namespaces=None, limit=100) == (["team-b", "team-a", "team-c"], 3)
    assert completions.namespaces_complete(prefix="", namespaces=frozenset({"team-a"}), limit=100) == (["team-a"], 1)
    assert completions.namespaces_complete(prefix="team", namespaces=None, limit=1) == (["team-b"], 3)
    assert completions.namespaces_complete(prefix="nobody", namespaces=None, limit=100) == ([], 0)


def test_collections_and_threads_rank_by_use(hash_embedder) -> None:
    from memories.services import collection_create

    remember("one", collection="busy")
    remember("two", collection="busy")
    remember("three", collection="quiet")
    collection_create(namespace="global", name="empty", actor="test")
    assert completions.collections_complete(prefix="", namespace="global", limit=100) == (["busy", "quiet", "empty"], 3)
    assert completions.collections_complete(prefix="q", namespace="global", limit=100) == (["quiet"], 1)
    assert completions.collections_complete(prefix="", namespace="other", limit=100) == ([], 0)
    remember("hi", thread="lunch", speaker="Ann")
    remember("hello", thread="lunch", speaker="Bob")
    remember("yo", thread="launch-review", speaker="Ann")
    assert completions.threads_complete(prefix="l", namespace="global", limit=100) == (["lunch", "launch-review"], 2)
    assert completions.threads_complete(prefix="la", namespace="global", limit=100) == (["launch-review"], 1)


def _plan(sql: str, params: list[object]) -> str:
    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN QUERY PLAN " + sql, params)
        return " | ".join(str(row[-1]) for row in cursor.fetchall())


@pytest.mark.skipif(connection.vendor != "sqlite", reason="SQLite's query plan")
def test_completion_queries_read_indexes_not_the_memories(hash_embedder) -> None:
    """Each completion query searches an index by its prefix (a range), never scans the table."""
    remember("x", tags=["ci"])
    from django.db.models import Count

    from memories.models import Memory

    queries = {
        "tags": MemoryTag.objects.filter(completions.starts_with("tag", "c"), namespace="global")
        .values("tag").annotate(n=Count("*")),
        "collections": Memory.objects.filter(completions.starts_with("collection", "ge"), namespace="global")
        .values("collection").annotate(n=Count("*")),
        "threads": Memory.objects.filter(completions.starts_with("thread", "lu"), namespace="global", thread__isnull=False)
        .values("thread").annotate(n=Count("*")),
        "ids": Memory.objects.filter(completions._id_range("ab"), namespace="global", archived=False)  # noqa: SLF001
        .order_by("-access_count").values("id"),
    }
    for name, queryset in queries.items():
        sql, params = queryset.query.sql_with_params()
        plan = _plan(sql, list(params))
        assert "USING" in plan and "INDEX" in plan, (name, plan)
        assert "SCAN memories" not in plan and "SCAN memory_tags" not in plan, (name, plan)
        if name != "ids":  # the use is counted from the index alone, without reading the rows
            assert "COVERING INDEX" in plan, (name, plan)
