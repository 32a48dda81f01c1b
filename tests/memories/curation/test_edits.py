"""memory_edit (the admin's path) applies the same rules as the tools."""
from __future__ import annotations

import pytest

from bhgbrain_site.core.errors import Conflict, InvalidInput
from memories.curation.edits import memory_edit
from memories.models import AuditLog, Memory
from tests.conftest import remember

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(("changes", "message"), [
    ({"tags": "release"}, "tags"), ({"tags": {"team": "core"}}, "tags"), ({"tags": ["ok", "not ok"]}, "tags"),
    ({"tags": [f"t{n}" for n in range(21)]}, "at most 20"), ({"type": "dream"}, "type"),
    ({"retention_tier": "T9"}, "retention_tier"), ({"importance": 1.5}, "importance"),
    ({"collection": "a/b"}, "collection"), ({"content": "   "}, "empty"),
    ({"content": "db password=hunter2hunter2"}, "secret"), ({"archived": True}, "not editable"),
])
def test_invalid_edits_are_refused_and_change_nothing(hash_embedder, changes: dict, message: str) -> None:
    memory = remember("The search service is written in Rust", tags=["search"])
    with pytest.raises(InvalidInput, match=message):
        memory_edit(memory_id=memory.id, changes=changes, actor="test")
    row = Memory.objects.get(id=memory.id)
    assert (row.content, row.tags, row.retention_tier) == ("The search service is written in Rust", ["search"], "T2")
    assert not AuditLog.objects.filter(operation="EDIT").exists()


def test_editing_into_another_memorys_content_is_a_conflict(hash_embedder) -> None:
    remember("The billing service runs on Kubernetes")
    memory = remember("The search service is written in Rust")
    with pytest.raises(Conflict, match="already says exactly this"):
        memory_edit(memory_id=memory.id, changes={"content": "The billing service runs on Kubernetes"}, actor="test")
    edited = memory_edit(memory_id=memory.id, changes={"content": "The search service is written in Go",
                                                       "tags": ["search", "go"]}, actor="test")
    assert edited.content.endswith("Go") and edited.tags == ["search", "go"]
