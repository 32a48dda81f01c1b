"""The governance console's curation through the admin's URLs (Django's test client): the list's
actions, the review queue, the merges review, the tag field, the hybrid search box and the
exports; each as a superuser and as a curator limited to namespace alice (who must never see or
change bob's memories, whatever ids or URLs she posts)."""
from __future__ import annotations

import csv
import io
import json
from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.contrib.auth.models import Permission, User
from django.contrib.messages import get_messages
from django.test import AsyncClient, Client
from django.urls import reverse
from django.utils import timezone

from memories.models import AuditLog, Collection, CuratorScope, Memory, MemoryRevision
from memories.selectors import memory_to_dict
from retention.models import ArchivedMemory
from search.selectors import memories_search
from tests.admin.conftest import client_for
from tests.conftest import remember

pytestmark = pytest.mark.django_db

LIST = "/admin/memories/memory/"
REVIEW = "/admin/memories/memory/review/"
MERGES = "/admin/memories/memory/merges/"
ARCHIVE = "/admin/retention/archivedmemory/"
PERMS = ("view_memory", "change_memory", "delete_memory", "view_archivedmemory", "view_memoryrevision",
         "view_auditlog")


def _staff(name: str, namespaces: list[str] | None) -> User:
    user = User.objects.create_user(name, f"{name}@example.com", "pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(codename__in=PERMS))
    if namespaces is not None:
        CuratorScope.objects.create(user=user, namespaces=namespaces)
    return user


@pytest.fixture
def alice() -> Client:
    """A staff curator limited to namespace alice."""
    return client_for(_staff("alice-curator", ["alice"]))


def row(memory_id: str) -> Memory:
    return Memory.objects.get(pk=memory_id)


def notes(response) -> list[str]:  # noqa: ANN001
    return [str(m) for m in get_messages(response.wsgi_request)]


def act(client: Client, action: str, ids: list[str], query: str = "", **data: str):  # noqa: ANN201
    """Pick ``action`` for the rows ``ids`` and press Run, as the list's action bar does."""
    return client.post(LIST + query, {"action": action, "_selected_action": ids, "index": "0", **data})


def apply(client: Client, action: str, ids: list[str], query: str = "", **data: str):  # noqa: ANN201
    """Submit an action's intermediate page (its parameters), as its form does."""
    return client.post(LIST + query, {"action": action, "_selected_action": ids, "select_across": "0",
                                      "bhg_apply": "1", **data})


def audits(operation: str, memory_id: str) -> int:
    return AuditLog.objects.filter(operation=operation, memory_id=memory_id).count()


@pytest.fixture
def pair(hash_embedder) -> tuple[str, str]:
    """One memory of alice's, one of bob's (plain T2 facts)."""
    mine = remember("Alice's team deploys on Tuesdays", namespace="alice").id
    theirs = remember("Bob's team deploys on Fridays", namespace="bob").id
    return mine, theirs


# --------------------------------------------------------------------------- actions


def test_set_tier_asks_for_the_tier_then_moves_the_selection(root, pair) -> None:
    mine, theirs = pair
    page = act(root, "set_tier", [mine, theirs])
    assert page.status_code == 200 and b'id="bhg-action-form"' in page.content
    assert row(mine).retention_tier == "T2"  # nothing before the tier is chosen
    done = apply(root, "set_tier", [mine, theirs], tier="T3")
    assert done.status_code == 302
    assert {row(mine).retention_tier, row(theirs).retention_tier} == {"T3"}
    assert row(mine).expires_at < timezone.now() + timedelta(days=31)  # T3's TTL from now
    assert audits("EDIT", mine) == audits("EDIT", theirs) == 1
    assert "Moved to T3: 2 memories." in notes(done)
    again = apply(root, "set_tier", [mine], tier="T3")
    assert "1 memory left as they were: already T3." in notes(again)
    assert audits("EDIT", mine) == 1


def test_a_bad_parameter_shows_the_page_again_and_changes_nothing(root, pair) -> None:
    mine, _ = pair
    page = apply(root, "set_tier", [mine], tier="T9")
    assert page.status_code == 200 and b"errorlist" in page.content
    bad_tags = apply(root, "add_tags", [mine], tags="fine, not ok")
    assert bad_tags.status_code == 200 and b"letters, digits" in bad_tags.content
    assert row(mine).retention_tier == "T2" and row(mine).tags == []


def test_pin_then_unpin(root, pair) -> None:
    mine, theirs = pair
    act(root, "pin", [mine])
    pinned = row(mine)
    assert (pinned.retention_tier, pinned.expires_at, pinned.decay_eligible) == ("T0", None, False)
    response = act(root, "unpin", [mine, theirs])
    unpinned = row(mine)
    assert unpinned.retention_tier == "T1" and unpinned.review_due > timezone.now() + timedelta(days=360)
    assert row(theirs).retention_tier == "T2"  # not pinned: left alone
    assert "Unpinned (now T1): 1 memory." in notes(response)
    assert "1 memory left as they were: not pinned." in notes(response)
    assert audits("EDIT", mine) == 2 and audits("EDIT", theirs) == 0


def test_extend_expiry_adds_the_tiers_ttl_and_reports_t0(root, pair) -> None:
    mine, theirs = pair
    before = row(mine).expires_at
    act(root, "pin", [theirs])
    response = act(root, "extend_expiry", [mine, theirs])
    assert row(mine).expires_at == before + timedelta(days=90)
    assert row(theirs).expires_at is None
    assert any("1 memory failed" in n and "T0 memories never expire" in n for n in notes(response))
    assert AuditLog.objects.get(operation="EXTEND", memory_id=mine).details["before"] is not None


def test_archive_now_then_restore_from_the_archive(root, pair) -> None:
    mine, _ = pair
    act(root, "add_tags", [mine])
    apply(root, "add_tags", [mine], tags="ops, deploys")
    response = act(root, "archive_now", [mine])
    assert "Archived 1 memory." in notes(response)
    assert not Memory.objects.filter(pk=mine).exists()
    item = ArchivedMemory.objects.get(memory_id=mine)
    assert (item.namespace, item.tags, item.restored_at) == ("alice", ["ops", "deploys"], None)
    assert audits("ARCHIVE", mine) == 1
    root.post(ARCHIVE, {"action": "restore", "_selected_action": [str(item.pk)], "index": "0"})
    restored = row(mine)
    assert (restored.content, restored.tags) == ("Alice's team deploys on Tuesdays", ["ops", "deploys"])


def test_forget_asks_first_then_deletes(root, pair) -> None:
    mine, _ = pair
    page = act(root, "forget", [mine])
    assert page.status_code == 200 and b"for good" in page.content
    assert Memory.objects.filter(pk=mine).exists()
    assert "Forgot 1 memory." in notes(apply(root, "forget", [mine]))
    assert not Memory.objects.filter(pk=mine).exists()
    assert audits("FORGET", mine) == 1
    assert "delete_selected" not in root.get(LIST).context["action_form"].fields["action"].choices.__str__()


def test_reembed_recomputes_the_vector(root, pair, hash_embedder) -> None:
    mine, _ = pair
    Memory.objects.filter(pk=mine).update(embedding=None, embedding_model="", vector_synced=False)
    response = act(root, "reembed", [mine])
    memory = row(mine)
    assert memory.vector_synced and memory.embedding_model == hash_embedder.model_id
    assert bytes(memory.embedding) == hash_embedder.embed_passage(memory.content).tobytes()
    assert "Re-embedded 1 memory." in notes(response)
    assert AuditLog.objects.get(operation="REEMBED", memory_id=mine).details["model"] == hash_embedder.model_id


def test_reembed_without_an_embedder_fails_with_the_reason(root, pair, no_embedder) -> None:
    mine, _ = pair
    response = act(root, "reembed", [mine])
    assert any("No embedding provider" in n for n in notes(response))
    assert audits("REEMBED", mine) == 0


def test_add_and_remove_tags(root, pair) -> None:
    mine, theirs = pair
    apply(root, "add_tags", [mine, theirs], tags="release, team-core")
    assert row(mine).tags == row(theirs).tags == ["release", "team-core"]
    response = apply(root, "remove_tags", [mine], tags="release")
    assert row(mine).tags == ["team-core"]
    assert "Removed release from 1 memory." in notes(response)
    assert audits("TAG", mine) == 2


def test_move_to_a_collection_creates_it_locked_and_refuses_another_models(root, pair, hash_embedder) -> None:
    mine, theirs = pair
    response = apply(root, "move_collection", [mine], collection="runbooks")
    assert row(mine).collection == "runbooks"
    assert Collection.objects.get(namespace="alice", name="runbooks").embedding_model == hash_embedder.model_id
    assert "Moved to runbooks: 1 memory." in notes(response)
    Collection.objects.create(namespace="bob", name="legacy", embedding_model="other/model", embedding_dimensions=8)
    refused = apply(root, "move_collection", [theirs], collection="legacy")
    assert row(theirs).collection == "general"
    assert any("uses other/model" in n for n in notes(refused))


def test_a_limited_curator_cannot_act_on_ids_of_another_namespace(alice, pair) -> None:
    mine, theirs = pair
    before = memory_to_dict(row(theirs))
    for action in ("pin", "extend_expiry", "archive_now", "reembed"):
        act(alice, action, [mine, theirs])
    apply(alice, "add_tags", [theirs], tags="hijacked")
    apply(alice, "forget", [theirs])
    apply(alice, "set_tier", [theirs], tier="T3", select_across="1")  # "all rows": still only hers
    assert memory_to_dict(row(theirs)) == before
    assert not AuditLog.objects.filter(memory_id=theirs).exclude(operation="ADD").exists()
    assert not Memory.objects.filter(pk=mine).exists()  # hers were archived
    assert ArchivedMemory.objects.get(memory_id=mine).tier == "T0"


def test_select_across_acts_on_the_filtered_list_only(root, pair) -> None:
    mine, theirs = pair
    apply(root, "pin", [mine], query="?namespace__exact=alice")  # not a parameter action: no page
    act(root, "pin", [mine], query="?namespace__exact=alice", select_across="1")
    assert row(mine).retention_tier == "T0" and row(theirs).retention_tier == "T2"


def test_actions_need_a_csrf_token(pair) -> None:
    mine, _ = pair
    client = Client(enforce_csrf_checks=True)
    client.force_login(User.objects.create_superuser("strict", "s@example.com", "pw"))
    response = client.post(LIST, {"action": "pin", "_selected_action": [mine], "index": "0"})
    assert response.status_code == 403
    assert row(mine).retention_tier == "T2"


def test_a_view_only_curator_gets_no_actions(pair) -> None:
    mine, _ = pair
    viewer = User.objects.create_user("viewer", "v@example.com", "pw", is_staff=True)
    viewer.user_permissions.set(Permission.objects.filter(codename="view_memory"))
    client = client_for(viewer)
    assert client.get(LIST).context["action_form"] is None
    client.post(LIST, {"action": "pin", "_selected_action": [mine], "index": "0"})
    assert row(mine).retention_tier == "T2"
    assert client.post(REVIEW, {"memory_id": mine, "decision": "demote"}).status_code == 403


# --------------------------------------------------------------------------- review queue


def _due_for_review(memory_id: str) -> None:
    Memory.objects.filter(pk=memory_id).update(retention_tier="T1", review_due=timezone.now() - timedelta(days=1),
                                               expires_at=timezone.now() + timedelta(days=5))


def _stale(memory_id: str) -> None:
    Memory.objects.filter(pk=memory_id).update(stale=True, expires_at=timezone.now() - timedelta(seconds=1))


def test_review_queue_confirm_demote_archive(root, hash_embedder) -> None:
    ids = [remember(f"Runbook step {n}: restart the {word} worker", namespace="alice").id
           for n, word in enumerate(("billing", "search", "mail"))]
    for memory_id in ids:
        _due_for_review(memory_id)
    page = root.get(REVIEW)
    assert [m.pk for m in page.context["rows"]] and {str(m.pk) for m in page.context["rows"]} == set(ids)
    assert b'id="bhg-review-rows"' in page.content and b"bhg-decision-confirm" in page.content
    confirmed = root.post(REVIEW + "?tab=review", {"memory_id": ids[0], "decision": "confirm"})
    assert confirmed.status_code == 302
    memory = row(ids[0])
    assert memory.review_due > timezone.now() + timedelta(days=360)
    assert memory.expires_at > timezone.now() + timedelta(days=360)
    assert AuditLog.objects.get(operation="REVIEW", memory_id=ids[0]).details["result"] == "confirmed"
    root.post(REVIEW, {"memory_id": ids[1], "decision": "demote"})
    assert row(ids[1]).retention_tier == "T2" and row(ids[1]).review_due is None
    root.post(REVIEW, {"memory_id": ids[2], "decision": "archive"})
    assert ArchivedMemory.objects.filter(memory_id=ids[2]).exists()
    assert list(root.get(REVIEW).context["rows"]) == []


def test_stale_tab_keep_and_archive(root, hash_embedder) -> None:
    keep, drop = (remember(text, namespace="alice").id for text in ("Old note about the VPN", "Old note about the fax"))
    _stale(keep)
    _stale(drop)
    page = root.get(REVIEW + "?tab=stale")
    assert {str(m.pk) for m in page.context["rows"]} == {keep, drop}
    assert b"bhg-decision-confirm" not in page.content  # a stale memory is kept or archived
    root.post(REVIEW + "?tab=stale", {"memory_id": keep, "decision": "keep"})
    kept = row(keep)
    assert not kept.stale and kept.expires_at > timezone.now() + timedelta(days=89)
    assert audits("KEEP", keep) == 1
    root.post(REVIEW + "?tab=stale", {"memory_id": drop, "decision": "archive"})
    assert not Memory.objects.filter(pk=drop).exists()
    refused = root.post(REVIEW + "?tab=stale", {"memory_id": keep, "decision": "confirm"})
    assert any("Unknown decision" in n for n in notes(refused))


def test_review_queue_is_scoped_for_a_limited_curator(alice, pair) -> None:
    mine, theirs = pair
    _due_for_review(mine)
    _due_for_review(theirs)
    page = alice.get(REVIEW)
    assert [str(m.pk) for m in page.context["rows"]] == [mine]
    assert theirs.encode() not in page.content
    response = alice.post(REVIEW, {"memory_id": theirs, "decision": "demote"})
    assert any("not found" in n for n in notes(response))
    assert row(theirs).retention_tier == "T1"
    alice.post(REVIEW, {"memory_id": theirs, "decision": "archive"})
    assert Memory.objects.filter(pk=theirs).exists()


def test_confirm_review_and_keep_as_list_actions(root, pair) -> None:
    mine, theirs = pair
    _due_for_review(mine)
    _stale(theirs)
    response = act(root, "confirm_review", [mine, theirs], query="?queue=review")
    assert row(mine).review_due > timezone.now()
    assert "Confirmed 1 memory." in notes(response)  # theirs is not in the review queue
    failed = act(root, "confirm_review", [theirs])
    assert any("only T1 memories are reviewed" in n for n in notes(failed))
    act(root, "keep", [theirs], query="?queue=stale")
    assert not row(theirs).stale


# --------------------------------------------------------------------------- merges


@pytest.fixture
def merged(e5, bhg_config) -> str:
    bhg_config.deduplication.update_mode = "in_place"  # under the default an elaboration is a new version
    first = remember("The mobile release ships on Monday", namespace="alice", tags=["mobile"])
    again = remember("The mobile release ships on Monday at noon", namespace="alice", tags=["release"])
    assert (again.operation, again.id) == ("UPDATE", first.id)
    return first.id


def test_merges_page_shows_the_diff_and_undo_restores(root, merged) -> None:
    page = root.get(MERGES)
    [review] = page.context["reviews"]
    assert (str(review.memory.pk), review.status) == (merged, "undoable")
    assert b"<ins> at noon</ins>" in page.content and b"bhg-undo-merge" in page.content
    response = root.post(MERGES, {"memory_id": merged})
    assert any("Merge undone" in n for n in notes(response))
    memory = row(merged)
    assert (memory.content, memory.tags, memory.last_operation) == ("The mobile release ships on Monday", ["mobile"], "ADD")
    assert audits("UNDO_MERGE", merged) == 1
    put_aside = MemoryRevision.objects.get(memory_id=merged, operation="UNDO_MERGE")
    assert put_aside.content == "The mobile release ships on Monday at noon"
    assert root.get(MERGES).context["reviews"][0].status == "undone"
    again = root.post(MERGES, {"memory_id": merged})
    assert any("changed since its last merge" in n for n in notes(again))


def test_merges_are_scoped_for_a_limited_curator(merged) -> None:
    bob_curator = client_for(_staff("bob-curator", ["bob"]))
    assert bob_curator.get(MERGES).context["reviews"] == []
    response = bob_curator.post(MERGES, {"memory_id": merged})
    assert any("not found" in n for n in notes(response))
    assert row(merged).content.endswith("at noon")


# --------------------------------------------------------------------------- tags field


def _change_form(memory: Memory, **changes: str) -> dict[str, str]:
    data = {"content": memory.content, "collection": memory.collection, "type": memory.type, "category": "",
            "tags": ", ".join(memory.tags), "importance": str(memory.importance), "retention_tier": memory.retention_tier,
            "event_at_0": "", "event_at_1": "", "valid_until_0": "", "valid_until_1": "", "status": "", "_save": "Save"}
    return {**data, **changes}


def test_tags_are_typed_comma_separated(root, hash_embedder) -> None:
    memory_id = remember("The API gateway is Envoy", namespace="alice", tags=["infra", "edge"]).id
    url = reverse("admin:memories_memory_change", args=[memory_id])
    page = root.get(url)
    assert b'value="infra, edge"' in page.content and b'name="tags"' in page.content
    saved = root.post(url, _change_form(row(memory_id), tags="infra,  gateway , infra"))
    assert saved.status_code == 302
    assert row(memory_id).tags == ["infra", "gateway"]
    assert AuditLog.objects.get(operation="EDIT", memory_id=memory_id).details["fields"] == ["tags"]
    same = root.post(url, _change_form(row(memory_id), tags="infra,gateway"))
    assert same.status_code == 302 and audits("EDIT", memory_id) == 1  # the same tags typed otherwise: no edit


@pytest.mark.parametrize(("typed", "error"), [
    ("ok, not ok", b"letters, digits"), (", ".join(f"t{n}" for n in range(21)), b"at most 20 tags"),
    ('{"team": "core"}', b"letters, digits"),
])
def test_bad_tags_are_a_form_error(root, hash_embedder, typed: str, error: bytes) -> None:
    memory_id = remember("The API gateway is Envoy", namespace="alice", tags=["infra"]).id
    url = reverse("admin:memories_memory_change", args=[memory_id])
    response = root.post(url, _change_form(row(memory_id), tags=typed))
    assert response.status_code == 200 and error in response.content
    assert row(memory_id).tags == ["infra"]


def test_a_json_list_of_tags_is_read_too(root, hash_embedder) -> None:
    memory_id = remember("The API gateway is Envoy", namespace="alice").id
    url = reverse("admin:memories_memory_change", args=[memory_id])
    root.post(url, _change_form(row(memory_id), tags='["infra", "edge"]'))
    assert row(memory_id).tags == ["infra", "edge"]


# --------------------------------------------------------------------------- search


def _listed(client: Client, query: str) -> list[str]:
    return [str(m.pk) for m in client.get(LIST + query).context["cl"].result_list]


FACTS = ("Postgres is the primary database of the billing service", "The billing service sends invoices on the 1st",
         "Our Kubernetes cluster runs in eu-west-1", "我们的数据库使用PostgreSQL并且每天备份",
         "The cafeteria serves pizza on Fridays")


def test_search_lists_the_hybrid_hits_in_rank_order(root, e5) -> None:
    for text in FACTS:
        remember(text, namespace="alice")
    found = memories_search(query="billing database", namespace="alice", collection=None, mode="hybrid", limit=300)
    expected = [i.memory_id for i in found if i.fulltext is not None or i.semantic >= settings.BHGBRAIN.defaults.min_score]
    listed = _listed(root, "?q=billing+database")
    assert listed == expected and len(listed) >= 2
    assert row(listed[0]).content == FACTS[0]
    assert FACTS[4] not in [row(i).content for i in listed]  # pizza is neither worded nor meant like it


def test_search_finds_cjk(root, e5) -> None:
    for text in FACTS:
        remember(text, namespace="alice")
    listed = _listed(root, "?q=数据库")
    assert listed and row(listed[0]).content == FACTS[3]


def test_search_spans_the_visible_namespaces_or_the_filtered_one(root, alice, hash_embedder) -> None:
    mine = remember("Deploy freeze during the audit week", namespace="alice").id
    theirs = remember("Deploy freeze during the holidays", namespace="bob").id
    assert set(_listed(root, "?q=deploy+freeze")) == {mine, theirs}
    assert _listed(root, "?q=deploy+freeze&namespace__exact=bob") == [theirs]
    assert _listed(alice, "?q=deploy+freeze") == [mine]
    assert _listed(alice, "?q=holidays") == []
    assert _listed(alice, f"?q={theirs}") == []  # an exact id of another namespace: nothing


def test_search_keeps_exact_id_and_message_id_lookups(root, hash_embedder) -> None:
    fact = remember("The build uses Bazel", namespace="alice").id
    message = remember("See you at the standup", namespace="alice", thread="chat-1", message_id="msg-0042").id
    assert _listed(root, f"?q={fact}") == [fact]
    assert _listed(root, "?q=msg-0042") == [message]
    assert _listed(root, "?q=chat-1") == [message]


def test_search_still_finds_expired_rows_the_indexes_leave_out(root, hash_embedder) -> None:
    memory_id = remember("Temporary VPN credentials rotate weekly", namespace="alice").id
    _stale(memory_id)
    assert _listed(root, "?q=VPN&queue=stale") == [memory_id]


# --------------------------------------------------------------------------- exports


def _lines(response) -> list[dict]:  # noqa: ANN001
    assert response.streaming and response["Content-Disposition"].startswith("attachment;")
    return [json.loads(line) for line in b"".join(response.streaming_content).decode().splitlines()]


def test_export_jsonl_follows_the_filters_and_the_api_shape(root, pair) -> None:
    mine, theirs = pair
    everything = _lines(root.get(LIST + "export/jsonl/"))
    assert {r["id"] for r in everything} == {mine, theirs}
    filtered = _lines(root.get(LIST + "export/jsonl/?namespace__exact=alice"))
    assert filtered == [memory_to_dict(row(mine))]
    assert AuditLog.objects.filter(operation="EXPORT").count() == 2


def test_export_csv_has_the_api_columns_and_defuses_formulas(root, hash_embedder) -> None:
    memory_id = remember("=HYPERLINK(\"http://x\") is not a formula here", namespace="alice", tags=["a", "b"]).id
    response = root.get(LIST + "export/csv/")
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(b"".join(response.streaming_content).decode())))
    assert list(rows[0]) == list(memory_to_dict(row(memory_id)))
    assert rows[0]["content"].startswith("'=HYPERLINK") and rows[0]["tags"] == "a,b"


def test_export_of_a_search_keeps_the_rank_order(root, e5) -> None:
    for text in FACTS:
        remember(text, namespace="alice")
    exported = [r["id"] for r in _lines(root.get(LIST + "export/jsonl/?q=billing+database"))]
    assert exported == _listed(root, "?q=billing+database")


def test_a_limited_curator_exports_only_her_namespace(alice, pair) -> None:
    mine, theirs = pair
    assert [r["id"] for r in _lines(alice.get(LIST + "export/jsonl/"))] == [mine]
    assert _lines(alice.get(LIST + "export/jsonl/?namespace__exact=bob")) == []
    assert _lines(alice.get(LIST + f"export/jsonl/?q={theirs}")) == []
    export = AuditLog.objects.filter(operation="EXPORT").first()
    assert (export.namespace, export.details["namespaces"]) == ("alice", ["alice"])


def test_the_list_links_its_exports_with_its_query_string(root, pair) -> None:
    page = root.get(LIST + "?namespace__exact=alice")
    assert b'id="bhg-export-csv"' in page.content
    assert b'href="/admin/memories/memory/export/csv/?namespace__exact=alice"' in page.content
    assert b'id="bhg-review-link"' in page.content and b'id="bhg-merges-link"' in page.content
    assert root.get(LIST + "export/xml/").status_code == 404
    assert root.get(LIST + "export/csv/?nonsense=1").status_code == 400


def test_archive_export_is_scoped(root, alice, pair) -> None:
    mine, theirs = pair
    act(root, "archive_now", [mine, theirs])
    assert {r["id"] for r in _lines(root.get(ARCHIVE + "export/jsonl/"))} == {mine, theirs}
    assert [r["id"] for r in _lines(alice.get(ARCHIVE + "export/jsonl/"))] == [mine]
    rows = list(csv.DictReader(io.StringIO(b"".join(alice.get(ARCHIVE + "export/csv/").streaming_content).decode())))
    assert [r["id"] for r in rows] == [mine] and rows[0]["namespace"] == "alice"
    assert b'id="bhg-export-jsonl"' in root.get(ARCHIVE).content


def test_export_streams_asynchronously_under_asgi(pair) -> None:
    """Under ASGI (the server) a sync iterator would be read whole into a list before sending."""
    mine, theirs = pair
    user = User.objects.create_superuser("async-root", "a@example.com", "pw")

    async def fetch() -> tuple[bool, bytes]:
        client = AsyncClient()
        await client.aforce_login(user)
        response = await client.get(LIST + "export/jsonl/")
        return response.is_async, b"".join([chunk async for chunk in response.streaming_content])

    is_async, body = async_to_sync(fetch)()
    assert is_async
    assert {json.loads(line)["id"] for line in body.decode().splitlines()} == {mine, theirs}


def test_a_limited_curator_cannot_read_or_restore_another_namespaces_archive(root, alice, pair) -> None:
    mine, theirs = pair
    act(root, "archive_now", [mine, theirs])
    theirs_item = ArchivedMemory.objects.get(memory_id=theirs)
    assert [str(i.memory_id) for i in alice.get(ARCHIVE).context["cl"].result_list] == [mine]
    assert alice.get(reverse("admin:retention_archivedmemory_change", args=[theirs_item.pk])).status_code in (302, 404)
    alice.post(ARCHIVE, {"action": "restore", "_selected_action": [str(theirs_item.pk)], "index": "0"})
    assert not Memory.objects.filter(pk=theirs).exists()


def test_a_limited_curator_cannot_open_another_namespaces_thread(alice, hash_embedder) -> None:
    remember("Bob: see you on Monday", namespace="bob", thread="t-1")
    assert alice.get(LIST + "thread/?namespace=bob&thread=t-1").status_code == 403
    assert alice.get(LIST + "thread/?namespace=alice&thread=t-1").status_code == 200
