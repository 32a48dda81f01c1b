"""memories_by_id (memories/loading.py): the instances in_bulk would give, from a query compiled once."""
from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.db import connections
from django.utils import timezone

from memories import loading
from memories.models import Memory
from tests.conftest import remember

pytestmark = pytest.mark.django_db(transaction=True)


def _store() -> list[uuid.UUID]:
    plain = uuid.UUID(remember("The lighthouse keeper paints the railing blue", tags=["paint", "lighthouse ä"]).id)
    other = uuid.UUID(remember("Quarterly budget review moved to Thursday", namespace="bob", importance=0.9).id)
    said = uuid.UUID(remember("Yeah, I went there last Friday", namespace="bob").id)
    now = timezone.now().replace(microsecond=123456)
    Memory.objects.filter(id=said).update(
        thread="chat-1", speaker="Caroline", occurred_at=now - timedelta(days=3), message_id="m-7",
        event_at=now + timedelta(days=2), valid_until=now + timedelta(days=9), status="planned",
        category="travel", expires_at=now + timedelta(days=30), archived=True, device_id="laptop")
    return [plain, other, said]


def _fields(memory: Memory) -> dict[str, object]:
    return {f.attname: getattr(memory, f.attname) for f in Memory._meta.concrete_fields if f.name != "embedding"}


def _assert_same(got: dict[uuid.UUID, Memory], expected: dict[uuid.UUID, Memory]) -> None:
    assert set(got) == set(expected)
    for memory_id, memory in expected.items():
        loaded = got[memory_id]
        assert type(loaded) is Memory and loaded.pk == memory_id
        assert _fields(loaded) == _fields(memory)
        assert loaded.get_deferred_fields() == memory.get_deferred_fields() == {"embedding"}
        assert loaded._state.adding is False and loaded._state.db == "default"  # noqa: SLF001


def test_the_same_instances_as_in_bulk_every_field_converted() -> None:
    ids = _store()
    missing = uuid.uuid4()
    asked = [ids[2], missing, ids[0], ids[2], ids[1]]  # an unknown id and a repeated one
    expected = Memory.objects.defer("embedding").in_bulk(asked)
    got = loading.memories_by_id(asked)
    _assert_same(got, expected)
    assert missing not in got and isinstance(got[ids[2]].tags, list) and got[ids[0]].tags == ["paint", "lighthouse ä"]
    assert got[ids[2]].archived is True and got[ids[2]].occurred_at.tzinfo is not None
    assert loading.memories_by_id([]) == {}
    got[ids[0]].refresh_from_db(fields=["embedding"])  # the deferred field still loads on demand
    assert got[ids[0]].embedding == Memory.objects.get(id=ids[0]).embedding


def test_batches_and_each_id_count_its_own_query(monkeypatch: pytest.MonkeyPatch) -> None:
    ids = _store()
    monkeypatch.setattr(loading, "BATCH", 2)
    _assert_same(loading.memories_by_id(ids), Memory.objects.defer("embedding").in_bulk(ids))
    for count in (1, 2, 3):  # the cached query of one count never answers for another
        _assert_same(loading.memories_by_id(ids[:count]), Memory.objects.defer("embedding").in_bulk(ids[:count]))


def test_other_threads_compile_their_own_query_on_their_own_connection() -> None:
    ids = _store()
    expected = Memory.objects.defer("embedding").in_bulk(ids)
    loading.memories_by_id(ids)  # this thread's cache

    def load() -> dict[uuid.UUID, Memory]:
        try:
            return loading.memories_by_id(ids)
        finally:
            connections.close_all()

    with ThreadPoolExecutor(max_workers=2) as pool:
        for got in pool.map(lambda _: load(), range(4)):
            _assert_same(got, expected)
