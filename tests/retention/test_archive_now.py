"""A curator's "archive now" (retention.archive.memory_archive) and the archive's export selector."""
from __future__ import annotations

import pytest

from bhgbrain_site.core.errors import NotFound
from memories.models import AuditLog, ChangeFeedEntry, Memory
from retention.archive import archive_export, archive_restore, memory_archive
from retention.models import ArchivedMemory
from tests.conftest import remember

pytestmark = pytest.mark.django_db


def test_archive_now_is_restorable_losslessly(hash_embedder) -> None:
    memory_id = remember("The on-call rota changes on Mondays", namespace="alice", tags=["ops"], importance=0.7).id
    before = Memory.objects.get(pk=memory_id)
    assert memory_archive(memory_id=memory_id, actor="admin:root", namespace="alice")["archived"]
    assert not Memory.objects.filter(pk=memory_id).exists()
    assert ChangeFeedEntry.objects.filter(memory_id=memory_id, op="delete").exists()
    audit = AuditLog.objects.get(operation="ARCHIVE", memory_id=memory_id)
    assert (audit.client_id, audit.details["reason"]) == ("admin:root", "curator")
    item = ArchivedMemory.objects.get(memory_id=memory_id)
    assert bytes(item.embedding) == bytes(before.embedding)
    archive_restore(memory_id=memory_id, namespace="alice", actor="test")
    after = Memory.objects.get(pk=memory_id)
    assert (after.content, after.tags, after.importance, after.created_at) == (
        before.content, before.tags, before.importance, before.created_at)


def test_archive_now_honours_the_namespace(hash_embedder) -> None:
    memory_id = remember("Bob's secret project codename is Falcon", namespace="bob").id
    with pytest.raises(NotFound):
        memory_archive(memory_id=memory_id, actor="test", namespace="alice")
    assert Memory.objects.filter(pk=memory_id).exists()


def test_archive_export_is_limited_to_the_namespaces(hash_embedder) -> None:
    ids = {ns: remember(f"A note kept by {ns}", namespace=ns).id for ns in ("alice", "bob")}
    for ns, memory_id in ids.items():
        memory_archive(memory_id=memory_id, actor="test", namespace=ns)
    rows = ArchivedMemory.objects.order_by("id")
    assert [r["id"] for r in archive_export(rows=rows, namespaces=frozenset({"alice"}), chunk_size=1)] == [ids["alice"]]
    assert {r["id"] for r in archive_export(rows=rows, namespaces=None)} == set(ids.values())
