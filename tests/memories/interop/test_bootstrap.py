"""The bootstrap interview and the import tool, through the tool registry."""
from __future__ import annotations

import pytest

from bhgbrain_site.core.calls import CallContext
from bhgbrain_site.core.errors import InvalidInput
from bhgbrain_site.registry import call_tool
from memories.models import Memory

pytestmark = pytest.mark.django_db
CTX = CallContext(actor="test")


def test_interview_start_submit_status_reset(hash_embedder) -> None:
    start = call_tool("bootstrap", {"action": "start"}, CTX)
    assert start["complete"] is False and start["next"]["section"] == 1 and start["next"]["questions"]
    submitted = call_tool("bootstrap", {"action": "submit", "section": 1,
                                        "answers": "I am Kevin, CTO at Big Hat Group.\n\nI own architecture and hiring."}, CTX)
    assert submitted["memories_created"] == 2 and submitted["next"]["section"] == 2
    identity = Memory.objects.filter(namespace="profile", collection="identity")
    assert identity.count() == 2
    assert {m.retention_tier for m in identity} == {"T0"} and {m.importance for m in identity} == {1.0}
    assert set(identity.first().tags) >= {"identity", "role", "profile", "bootstrap"}
    status = call_tool("bootstrap", {"action": "status"}, CTX)
    assert status["sections"][0] == {"section": 1, "title": "Identity & Role", "status": "complete", "memory_count": 2}
    assert status["complete"] is False
    reset = call_tool("bootstrap", {"action": "reset", "section": 1}, CTX)
    assert reset["memories_forgotten"] == 2 and identity.all().count() == 0
    assert call_tool("bootstrap", {"action": "start"}, CTX)["next"]["section"] == 1


def test_interview_completes_after_all_sections(hash_embedder) -> None:
    for section in range(1, 11):
        result = call_tool("bootstrap", {"action": "submit", "section": section, "answers": f"Answer for section {section}."}, CTX)
    assert result["complete"] is True and result["memories_created"] == 10
    rules = Memory.objects.get(namespace="profile", collection="operating-rules")
    assert (rules.type, rules.retention_tier) == ("procedural", "T0")


@pytest.mark.parametrize(
    ("args", "field"),
    [({"action": "submit", "answers": "x"}, "section"), ({"action": "submit", "section": 1}, "answers"),
     ({"action": "submit", "section": 11, "answers": "x"}, "section"), ({"action": "dance"}, "action")],
)
def test_interview_validation(hash_embedder, args: dict, field: str) -> None:
    with pytest.raises(InvalidInput, match=field):
        call_tool("bootstrap", args, CTX)


PROFILE = """# Identity & Role
Kevin, CTO.

# Tools & Systems
Jira is the source of truth for work.

GitHub holds all code.

# Hobbies
Sailing on weekends.
"""


def test_profile_import_dry_run_then_real(hash_embedder) -> None:
    preview = call_tool("import", {"format": "profile", "content": PROFILE, "dry_run": True}, CTX)
    assert preview["dry_run"] is True and preview["memories_created"] == 0 and Memory.objects.count() == 0
    assert preview["sections_processed"] == 3 and preview["collections"] == ["general", "identity", "tools"]
    assert [(p["collection"], p["tier"], p["section"]) for p in preview["previews"]] == [
        ("identity", "T0", "Identity & Role"), ("tools", "T1", "Tools & Systems"), ("tools", "T1", "Tools & Systems"),
        ("general", "T2", "Hobbies"),
    ]
    done = call_tool("import", {"format": "profile", "content": PROFILE}, CTX)
    assert done["memories_created"] == 4 and done["duplicates_skipped"] == 0
    again = call_tool("import", {"format": "profile", "content": PROFILE}, CTX)
    assert again["memories_created"] == 0 and again["duplicates_skipped"] == 4


def test_freeform_import_and_secret_refusal(hash_embedder) -> None:
    done = call_tool("import", {"format": "freeform", "content": "First note.\n\nSecond note.", "namespace": "notes"}, CTX)
    assert done["memories_created"] == 2 and Memory.objects.filter(namespace="notes").count() == 2
    with pytest.raises(InvalidInput):
        call_tool("import", {"format": "freeform", "content": "ok paragraph\n\nkey sk-" + "a" * 30, "namespace": "x"}, CTX)
    assert not Memory.objects.filter(namespace="x").exists()  # refused whole, nothing stored
