"""Identical concurrent writes create exactly one memory (a DB constraint, not luck)."""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.db import connections

from memories.models import AuditLog, Memory
from tests.conftest import remember

CONTENT = "The payments service retries webhooks with exponential backoff up to 6 times"


def _remember_in_thread(barrier: threading.Barrier) -> str:
    try:
        barrier.wait(timeout=30)
        result = remember(CONTENT, tags=["payments"])
        return f"{result.operation}:{result.id}"
    finally:
        connections.close_all()


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("embedder", ["hash_embedder", "e5"])
def test_eight_simultaneous_identical_remembers_make_one_memory(embedder: str, request: pytest.FixtureRequest) -> None:
    request.getfixturevalue(embedder)
    barrier = threading.Barrier(8)
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda _: _remember_in_thread(barrier), range(8)))
    operations = sorted(r.split(":")[0] for r in results)
    ids = {r.split(":")[1] for r in results}
    assert Memory.objects.count() == 1
    assert ids == {str(Memory.objects.get().id)}
    assert operations == ["ADD"] + ["NOOP"] * 7
    assert AuditLog.objects.filter(operation="ADD").count() == 1


@pytest.mark.django_db(transaction=True)
def test_unique_constraint_rejects_a_second_live_row(hash_embedder) -> None:
    from django.db import IntegrityError, transaction

    first = remember(CONTENT)
    row = Memory.objects.get(pk=first.id)
    row.pk = None
    row.id = None
    with pytest.raises(IntegrityError), transaction.atomic():
        Memory.objects.create(**{f.name: getattr(row, f.name) for f in Memory._meta.fields if f.name != "id"})
    # An archived copy does not count as live.
    fields = {f.name: getattr(row, f.name) for f in Memory._meta.fields if f.name != "id"}
    fields["archived"] = True
    Memory.objects.create(**fields)
    assert Memory.objects.count() == 2
