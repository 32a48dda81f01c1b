"""The console's curation in a real headless browser, end to end: every list action (the ones that
need a parameter or a confirmation through their intermediate page), the review queue's tabs, the
merges review with its undo, the list's hybrid search box, the JSON Lines and CSV downloads, and a
curator limited to namespace alice who must never touch or see bob's memories in any of them.

Each test checks what the page shows and what the database holds afterwards: the rows, and the
audit row each write leaves. tests/admin/test_curation.py covers the same features through
Django's test client (the finer cases); the fixtures and a curator's steps: tests/admin/conftest.py.
"""
from __future__ import annotations

import csv
import io
import json
import re
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from django.conf import settings
from django.contrib.auth.models import Permission, User
from django.utils import timezone
from playwright.sync_api import Locator, Page, expect

from memories.admin.exports import memory_export_columns
from memories.curation.namespaces import curator_scope_set
from memories.models import AuditLog, Collection, Memory, MemoryRevision
from memories.selectors import memory_to_dict
from retention.archive import memory_archive
from retention.models import ArchivedMemory
from tests.admin.conftest import (
    USERNAME,
    Screenshot,
    fill_tags,
    form_error,
    log_in,
    message,
    open_filters,
    result_ids,
    sidebar_link,
)
from tests.conftest import remember

pytestmark = pytest.mark.django_db(transaction=True)  # the server thread must see committed rows

LIST = "/admin/memories/memory/"
REVIEW = "/admin/memories/memory/review/"
MERGES = "/admin/memories/memory/merges/"
ARCHIVE = "/admin/retention/archivedmemory/"
ACTOR = f"admin:{USERNAME}"
CHARLIE, CHARLIE_PASSWORD = "charlie", "charlie curates alice only"
MASTER_TOKEN = "bhg-test-master-token-for-the-curation-tests"

ACTIONS = {  # the action select's labels
    "set_tier": "Set tier…",
    "pin": "Pin (T0: never expires)",
    "unpin": "Unpin (T0 → T1, reviewed yearly)",
    "extend_expiry": "Extend expiry by the tier's TTL",
    "confirm_review": "Confirm review (T1: next review a TTL away)",
    "keep": "Keep (clear stale, renew expiry)",
    "archive_now": "Archive now (restorable from the archive)",
    "add_tags": "Add tags…",
    "remove_tags": "Remove tags…",
    "move_collection": "Move to collection…",
    "reembed": "Re-embed (recompute the vector)",
    "forget": "Forget (delete permanently)…",
}
RESTORE = "Restore the selected memories (same id, tier T2)"


# --------------------------------------------------------------------------- a curator's steps


def row_of(page: Page, memory_id: str) -> Locator:
    """The change list's row of one memory (its link goes to the memory's change page)."""
    return page.locator("#result_list tbody tr").filter(has=page.locator(f'th a[href*="/{memory_id}/change/"]'))


def listed(page: Page) -> list[str]:
    """The ids of the list's rows, top to bottom (once the page has loaded)."""
    page.wait_for_load_state("domcontentloaded")
    hrefs = page.locator("#result_list tbody tr th a").evaluate_all("links => links.map(a => a.pathname)")
    return [match.group(1) for href in hrefs if (match := re.search(r"/([^/]+)/change/$", href))]


def select(page: Page, *ids: str) -> None:
    for memory_id in ids:
        row_of(page, memory_id).get_by_role("checkbox", name="Select record").check()


def run_action(page: Page, action: str) -> None:
    """Pick an action by its label and press Run."""
    page.get_by_label("Select action to run").select_option(label=ACTIONS.get(action, action))
    page.locator("#changelist-actions").get_by_role("button", name="Run").click()


def act_on(page: Page, base_url: str, action: str, *ids: str, query: str = "") -> None:
    """Open the memory list, select ``ids`` and run ``action``."""
    page.goto(f"{base_url}{LIST}{query}")
    select(page, *ids)
    run_action(page, action)


def action_page(page: Page, action: str, ids: list[str], submit: str) -> Locator:
    """The intermediate page of ``action``: it lists the selection and offers ``submit``."""
    expect(page.locator("#bhg-action-page")).to_have_attribute("data-action", action)
    items = page.locator("#bhg-action-selection li")
    expect(items).to_have_count(len(ids))
    assert sorted(items.evaluate_all("items => items.map(li => li.dataset.id)")) == sorted(ids)
    apply = page.locator("#bhg-action-apply")
    expect(apply).to_have_text(submit)
    return apply


def memory(memory_id: str) -> Memory:
    return Memory.objects.get(pk=memory_id)


def audits(operation: str, *ids: str) -> list[AuditLog]:
    return list(AuditLog.objects.filter(operation=operation, memory_id__in=ids).order_by("id"))


def downloaded(page: Page, button: str) -> tuple[str, str]:
    """Click a download button; the file's suggested name and its text."""
    with page.expect_download() as download:
        page.locator(button).click()
    path = download.value.path()
    return download.value.suggested_filename, Path(path).read_text(encoding="utf-8")


def jsonl_ids(text: str) -> list[str]:
    return [json.loads(line)["id"] for line in text.splitlines() if line.strip()]


def csv_rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def due_for_review(*ids: str) -> None:
    now = timezone.now()
    Memory.objects.filter(pk__in=ids).update(retention_tier="T1", review_due=now - timedelta(days=1),
                                             expires_at=now + timedelta(days=5))


def make_stale(*ids: str) -> None:
    Memory.objects.filter(pk__in=ids).update(stale=True, expires_at=timezone.now() - timedelta(seconds=1))


def ttl(tier: str) -> timedelta:
    return timedelta(days=getattr(settings.BHGBRAIN.retention.tier_ttl, tier))


# --------------------------------------------------------------------------- list actions


@pytest.fixture
def master_token(monkeypatch: pytest.MonkeyPatch, fresh_token_cache: None) -> str:
    """The REST API's bearer token for this test (the env var the config names)."""
    monkeypatch.setenv(settings.BHGBRAIN.transport.http.bearer_token_env, MASTER_TOKEN)
    return MASTER_TOKEN


def test_pin_by_a_bulk_action_then_the_api_shows_t0_with_an_audit_row(page: Page, live_server, curator: User,
                                                                      hash_embedder, master_token: str,
                                                                      screenshot: Screenshot) -> None:
    """The issue's headline: a curator sets memories to T0 by a bulk action, and the API shows T0."""
    first = remember("The incident runbook lives in the ops wiki", namespace="alice", retention_tier="T2").id
    second = remember("Production deploys need two approvals", namespace="alice", retention_tier="T3").id
    other = remember("The staging database is reset every night", namespace="alice", retention_tier="T3").id
    log_in(page, live_server.url)
    sidebar_link(page, "memories", "memory").click()
    select(page, first, second)
    screenshot(page, "selected")
    run_action(page, "pin")

    expect(message(page, "Pinned (T0): 2 memories.")).to_be_visible()
    for memory_id in (first, second):
        pinned = memory(memory_id)
        assert (pinned.retention_tier, pinned.expires_at, pinned.decay_eligible) == ("T0", None, False)
        expect(row_of(page, memory_id)).to_contain_text("T0")
    assert memory(other).retention_tier == "T3"
    edits = audits("EDIT", first, second)
    assert sorted(str(a.memory_id) for a in edits) == sorted([first, second])
    assert {(a.client_id, a.namespace, tuple(a.details["fields"])) for a in edits} == {(ACTOR, "alice", ("retention_tier",))}
    assert not audits("EDIT", other)

    api = f"{live_server.url}/api/memories/{first}/"
    assert httpx.get(api, params={"namespace": "alice"}).status_code == 401  # the API wants the token
    answer = httpx.get(api, params={"namespace": "alice"}, headers={"Authorization": f"Bearer {master_token}"})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["id"], body["retention_tier"], body["expires_at"]) == (first, "T0", None)


def test_unpin_makes_a_pinned_memory_t1_reviewed_yearly(page: Page, live_server, curator: User, hash_embedder) -> None:
    pinned = remember("The company was founded in 2011", namespace="alice", retention_tier="T0").id
    plain = remember("The coffee machine is on the 3rd floor", namespace="alice", retention_tier="T2").id
    log_in(page, live_server.url)
    act_on(page, live_server.url, "unpin", pinned, plain)

    expect(message(page, "Unpinned (now T1): 1 memory.")).to_be_visible()
    expect(message(page, "1 memory left as they were: not pinned.")).to_be_visible()
    unpinned = memory(pinned)
    assert unpinned.retention_tier == "T1"
    assert unpinned.review_due > timezone.now() + ttl("T1") - timedelta(days=1)
    assert memory(plain).retention_tier == "T2"
    [edit] = audits("EDIT", pinned, plain)
    assert (str(edit.memory_id), edit.client_id, edit.details["fields"]) == (pinned, ACTOR, ["retention_tier"])


def test_set_tier_asks_for_the_tier_on_its_page(page: Page, live_server, curator: User, hash_embedder,
                                                screenshot: Screenshot) -> None:
    ids = [remember("The design system uses an 8 px grid", namespace="alice", retention_tier="T2").id,
           remember("The mobile app supports iOS 16 and later", namespace="bob", retention_tier="T1").id]
    log_in(page, live_server.url)
    act_on(page, live_server.url, "set_tier", *ids)

    apply = action_page(page, "set_tier", ids, "Set tier")
    assert {memory(i).retention_tier for i in ids} == {"T2", "T1"}  # nothing before the tier is chosen
    page.select_option("#id_tier", "T3")
    screenshot(page, "parameters")
    apply.click()

    expect(page).to_have_url(re.compile(rf"{LIST}$"))
    expect(message(page, "Moved to T3: 2 memories.")).to_be_visible()
    now = timezone.now()
    for memory_id in ids:
        moved = memory(memory_id)
        assert moved.retention_tier == "T3"
        assert now + ttl("T3") - timedelta(minutes=5) < moved.expires_at <= now + ttl("T3")
    assert {(str(a.memory_id), tuple(a.details["fields"])) for a in audits("EDIT", *ids)} == {
        (i, ("retention_tier",)) for i in ids}


def test_extend_expiry_adds_the_tiers_ttl_and_reports_what_failed(page: Page, live_server, curator: User,
                                                                  hash_embedder) -> None:
    mortal = remember("The VPN certificate is renewed every spring", namespace="alice", retention_tier="T2").id
    pinned = remember("Our mission is to make memory useful", namespace="alice", retention_tier="T0").id
    before = memory(mortal).expires_at
    log_in(page, live_server.url)
    act_on(page, live_server.url, "extend_expiry", mortal, pinned)

    expect(message(page, "Extended the expiry of 1 memory.")).to_be_visible()
    expect(message(page, re.compile(r"1 memory failed: .*T0 memories never expire"))).to_be_visible()
    assert memory(mortal).expires_at == before + ttl("T2")
    assert memory(pinned).expires_at is None
    [extend] = audits("EXTEND", mortal, pinned)
    assert (str(extend.memory_id), extend.client_id) == (mortal, ACTOR)
    assert extend.details["before"] is not None and extend.details["after"] is not None


def test_confirm_review_from_the_review_queue_in_the_list(page: Page, live_server, curator: User,
                                                          hash_embedder) -> None:
    due = remember("The on-call handbook is in Confluence", namespace="alice").id
    fresh = remember("Sprint demos are on Thursdays", namespace="alice", retention_tier="T3").id
    due_for_review(due)
    log_in(page, live_server.url)
    page.goto(f"{live_server.url}{LIST}")
    page.locator("#bhg-list-tools").get_by_role("link", name="Review queue").click()
    page.locator("#bhg-review-list").click()  # the whole queue in the list, for bulk actions
    expect(page).to_have_url(re.compile(r"[?&]queue=review"))
    assert listed(page) == [due]
    select(page, due)
    run_action(page, "confirm_review")

    expect(message(page, "Confirmed 1 memory.")).to_be_visible()
    confirmed = memory(due)
    assert confirmed.review_due > timezone.now() + ttl("T1") - timedelta(days=1)
    [review] = audits("REVIEW", due)
    assert (review.client_id, review.details["result"]) == (ACTOR, "confirmed")
    assert listed(page) == []  # confirmed: out of the queue

    act_on(page, live_server.url, "confirm_review", fresh)  # only T1 memories are reviewed
    expect(message(page, re.compile(r"1 memory failed: .*only T1 memories are reviewed"))).to_be_visible()
    assert not audits("REVIEW", fresh)


def test_keep_clears_stale_and_renews_the_expiry(page: Page, live_server, curator: User, hash_embedder) -> None:
    stale = remember("The old office had a rooftop terrace", namespace="alice", retention_tier="T2").id
    make_stale(stale)
    log_in(page, live_server.url)
    act_on(page, live_server.url, "keep", stale, query="?queue=stale")

    expect(message(page, "Kept 1 memory.")).to_be_visible()
    kept = memory(stale)
    assert not kept.stale and kept.expires_at > timezone.now() + ttl("T2") - timedelta(days=1)
    [keep] = audits("KEEP", stale)
    assert keep.client_id == ACTOR
    expect(page.locator("#result_list tbody tr th a")).to_have_count(0)  # no longer a stale candidate


def test_archive_now_then_restore_from_the_archive(page: Page, live_server, curator: User, hash_embedder,
                                                   screenshot: Screenshot) -> None:
    gone = remember("The fax number is 555-0100", namespace="alice", tags=["contact"], retention_tier="T1").id
    stays = remember("The support inbox is support@example.com", namespace="alice", retention_tier="T2").id
    log_in(page, live_server.url)
    act_on(page, live_server.url, "archive_now", gone)

    expect(message(page, "Archived 1 memory.")).to_be_visible()
    assert listed(page) == [stays]
    assert not Memory.objects.filter(pk=gone).exists()
    item = ArchivedMemory.objects.get(memory_id=gone)
    assert (item.namespace, item.tags, item.restored_at) == ("alice", ["contact"], None)
    [archive] = audits("ARCHIVE", gone)
    assert archive.client_id == ACTOR

    sidebar_link(page, "retention", "archivedmemory").click()
    expect(page.locator("#bhg-export-jsonl")).to_be_visible()  # the archive downloads too
    _, exported = downloaded(page, "#bhg-export-csv")
    assert [row["id"] for row in csv_rows(exported)] == [gone]
    page.locator("#result_list tbody tr").filter(has_text="555-0100").get_by_role("checkbox", name="Select record").check()
    option = page.get_by_label("Select action to run").locator("option").filter(has_text="Restore")
    expect(option).to_have_text(RESTORE)
    run_action(page, RESTORE)
    expect(message(page, "Restored 1 memory.")).to_be_visible()
    screenshot(page, "restored")
    restored = memory(gone)
    assert (restored.content, restored.tags, restored.retention_tier) == ("The fax number is 555-0100", ["contact"], "T2")
    assert ArchivedMemory.objects.get(memory_id=gone).restored_at is not None
    assert audits("RESTORE_ARCHIVE", gone)[0].client_id == ACTOR


def test_add_tags_typed_comma_separated_on_its_page(page: Page, live_server, curator: User, hash_embedder,
                                                    screenshot: Screenshot) -> None:
    ids = [remember("Releases are cut from main every other week", namespace="alice", tags=["release"]).id,
           remember("The release train leaves on Wednesdays", namespace="bob").id]
    log_in(page, live_server.url)
    act_on(page, live_server.url, "add_tags", *ids)
    apply = action_page(page, "add_tags", ids, "Add tags")

    fill_tags(page, "fine, not ok")  # a space is not allowed in a tag: the page again, nothing changed
    apply.click()
    expect(form_error(page)).to_contain_text("letters, digits")
    expect(page.locator("#bhg-action-page")).to_have_attribute("data-action", "add_tags")
    assert not audits("TAG", *ids)

    fill_tags(page, "release,  team-core ")
    screenshot(page, "parameters")
    page.locator("#bhg-action-apply").click()
    expect(message(page, "Tagged release, team-core: 2 memories.")).to_be_visible()
    assert memory(ids[0]).tags == ["release", "team-core"]
    assert memory(ids[1]).tags == ["release", "team-core"]
    tagged = audits("TAG", *ids)
    assert sorted(str(a.memory_id) for a in tagged) == sorted(ids) and {a.client_id for a in tagged} == {ACTOR}


def test_remove_tags_on_its_page(page: Page, live_server, curator: User, hash_embedder) -> None:
    tagged = remember("Hotfixes skip the release train", namespace="alice", tags=["release", "team-core"]).id
    untagged = remember("The QA team signs off each release", namespace="alice", tags=["qa"]).id
    log_in(page, live_server.url)
    act_on(page, live_server.url, "remove_tags", tagged, untagged)
    apply = action_page(page, "remove_tags", [tagged, untagged], "Remove tags")
    fill_tags(page, "release")
    apply.click()

    expect(message(page, "Removed release from 1 memory.")).to_be_visible()
    expect(message(page, "1 memory left as they were: they did not have the tags.")).to_be_visible()
    assert (memory(tagged).tags, memory(untagged).tags) == (["team-core"], ["qa"])
    [tag] = audits("TAG", tagged, untagged)
    assert (str(tag.memory_id), tag.details["after"]) == (tagged, ["team-core"])


def test_move_to_a_collection_on_its_page(page: Page, live_server, curator: User, hash_embedder) -> None:
    moving = remember("Restart the worker with systemctl restart bhg-worker", namespace="alice").id
    log_in(page, live_server.url)
    act_on(page, live_server.url, "move_collection", moving)
    apply = action_page(page, "move_collection", [moving], "Move")
    page.fill("#id_collection", "runbooks")
    apply.click()

    expect(message(page, "Moved to runbooks: 1 memory.")).to_be_visible()
    expect(row_of(page, moving)).to_contain_text("runbooks")
    assert memory(moving).collection == "runbooks"
    assert Collection.objects.get(namespace="alice", name="runbooks").embedding_model == hash_embedder.model_id
    [edit] = audits("EDIT", moving)
    assert (edit.client_id, edit.details["fields"]) == (ACTOR, ["collection"])


def test_reembed_recomputes_the_vector(page: Page, live_server, curator: User, hash_embedder) -> None:
    stale_vector = remember("The search cluster has three nodes", namespace="alice").id
    Memory.objects.filter(pk=stale_vector).update(embedding=None, embedding_model="", vector_synced=False)
    log_in(page, live_server.url)
    act_on(page, live_server.url, "reembed", stale_vector, query="?vector_synced__exact=0")

    expect(message(page, "Re-embedded 1 memory.")).to_be_visible()
    expect(page.locator("#result_list tbody tr th a")).to_have_count(0)  # in the vector index now
    embedded = memory(stale_vector)
    assert embedded.vector_synced and embedded.embedding_model == hash_embedder.model_id
    assert bytes(embedded.embedding) == hash_embedder.embed_passage(embedded.content).tobytes()
    [reembed] = audits("REEMBED", stale_vector)
    assert (reembed.client_id, reembed.details["model"]) == (ACTOR, hash_embedder.model_id)


def test_forget_asks_first_and_cancel_keeps_the_memory(page: Page, live_server, curator: User, hash_embedder,
                                                       screenshot: Screenshot) -> None:
    doomed = remember("The intern's laptop password is on a sticky note", namespace="alice").id
    log_in(page, live_server.url)
    act_on(page, live_server.url, "forget", doomed)
    action_page(page, "forget", [doomed], "Forget")
    expect(page.locator("#bhg-action-page")).to_contain_text("for good")
    expect(page.locator("#bhg-action-form input:visible")).to_have_count(0)  # nothing to type: a confirmation
    page.locator("#bhg-action-cancel").click()
    expect(page).to_have_url(re.compile(rf"{LIST}$"))
    assert Memory.objects.filter(pk=doomed).exists() and not audits("FORGET", doomed)

    select(page, doomed)
    run_action(page, "forget")
    screenshot(page, "confirm")
    page.locator("#bhg-action-apply").click()
    expect(message(page, "Forgot 1 memory.")).to_be_visible()
    assert listed(page) == []
    assert not Memory.objects.filter(pk=doomed).exists()
    assert not ArchivedMemory.objects.filter(memory_id=doomed).exists()  # forgotten, not archived
    [forget] = audits("FORGET", doomed)
    assert forget.client_id == ACTOR
    assert "delete_selected" not in page.get_by_label("Select action to run").inner_html()


# --------------------------------------------------------------------------- review queue


def decide(page: Page, memory_id: str, decision: str) -> None:
    row = page.locator(f'#bhg-review-rows tr.bhg-review-row[data-id="{memory_id}"]')
    row.locator(f".bhg-decision-{decision}").click()
    expect(row).to_have_count(0)  # the row leaves the queue


def review_ids(page: Page, tab: str) -> list[str]:
    """The ids the review queue's tab lists, top to bottom."""
    expect(page.locator("#bhg-review")).to_have_attribute("data-tab", tab)
    page.wait_for_load_state("domcontentloaded")
    return page.locator("#bhg-review-rows tr.bhg-review-row").evaluate_all("rows => rows.map(r => r.dataset.id)")


def test_review_tab_confirm_demote_archive(page: Page, live_server, curator: User, hash_embedder,
                                           screenshot: Screenshot) -> None:
    confirm, demote, archive = (remember(f"Runbook step {n}: restart the {word} worker", namespace="alice").id
                                for n, word in enumerate(("billing", "search", "mail")))
    not_due = remember("The mail worker logs to syslog", namespace="alice", retention_tier="T1").id
    due_for_review(confirm, demote, archive)
    log_in(page, live_server.url)
    page.goto(f"{live_server.url}{LIST}")
    page.locator("#bhg-review-link").click()
    assert sorted(review_ids(page, "review")) == sorted([confirm, demote, archive])
    expect(page.locator("#bhg-tab-review")).to_contain_text("3")
    expect(page.locator("#bhg-review-rows .bhg-decision-keep")).to_have_count(0)
    screenshot(page, "queue")

    decide(page, confirm, "confirm")
    expect(message(page, "Confirmed: next review a TTL away")).to_be_visible()
    confirmed = memory(confirm)
    assert confirmed.retention_tier == "T1" and confirmed.review_due > timezone.now() + ttl("T1") - timedelta(days=1)
    assert audits("REVIEW", confirm)[0].details["result"] == "confirmed"

    decide(page, demote, "demote")
    expect(message(page, "Demoted to T2")).to_be_visible()
    demoted = memory(demote)
    assert (demoted.retention_tier, demoted.review_due) == ("T2", None)
    assert audits("EDIT", demote)[0].details["fields"] == ["retention_tier"]

    decide(page, archive, "archive")
    expect(message(page, "Archived (restorable from the archive)")).to_be_visible()
    assert not Memory.objects.filter(pk=archive).exists() and ArchivedMemory.objects.filter(memory_id=archive).exists()
    assert len(audits("ARCHIVE", archive)) == 1

    expect(page.locator("#bhg-review-empty")).to_be_visible()
    expect(page.locator("#bhg-tab-review")).to_contain_text("0")
    assert {a.client_id for a in AuditLog.objects.exclude(operation="ADD")} == {ACTOR}
    assert memory(not_due).review_due > timezone.now()  # not due: never in the queue, untouched


def test_stale_tab_keep_and_archive(page: Page, live_server, curator: User, hash_embedder) -> None:
    keep, drop = (remember(text, namespace="alice").id for text in ("Old note about the VPN", "Old note about the fax"))
    make_stale(keep, drop)
    log_in(page, live_server.url)
    page.goto(f"{live_server.url}{REVIEW}")
    page.locator("#bhg-tab-stale").click()
    assert sorted(review_ids(page, "stale")) == sorted([keep, drop])
    expect(page.locator("#bhg-review-rows .bhg-decision-confirm")).to_have_count(0)  # kept or archived only
    expect(page.locator("#bhg-review-rows .bhg-decision-demote")).to_have_count(0)

    decide(page, keep, "keep")
    expect(message(page, "Kept: no longer stale, expiry renewed")).to_be_visible()
    kept = memory(keep)
    assert not kept.stale and kept.expires_at > timezone.now() + ttl("T2") - timedelta(days=1)
    assert audits("KEEP", keep)[0].client_id == ACTOR

    decide(page, drop, "archive")
    expect(page.locator("#bhg-review")).to_have_attribute("data-tab", "stale")  # back on the same tab
    assert not Memory.objects.filter(pk=drop).exists()
    assert ArchivedMemory.objects.get(memory_id=drop).namespace == "alice"
    assert audits("ARCHIVE", drop)[0].client_id == ACTOR
    expect(page.locator("#bhg-review-empty")).to_be_visible()


# --------------------------------------------------------------------------- merges


@pytest.fixture
def _merges_in_place(bhg_config) -> None:  # noqa: ANN001
    """Dedup merges revised in place (under the default update_mode an elaboration is a new version)."""
    bhg_config.deduplication.update_mode = "in_place"


def merge(first: str, elaborated: str, namespace: str, **fields: Any) -> str:
    """Remember ``first``, then ``elaborated``, which dedup merges into it: the memory's id."""
    original = remember(first, namespace=namespace, **fields)
    again = remember(elaborated, namespace=namespace)
    assert (original.operation, again.operation, again.id) == ("ADD", "UPDATE", original.id)
    return original.id


@pytest.mark.usefixtures("_merges_in_place")
def test_merges_page_shows_the_diff_and_undo_restores(page: Page, live_server, curator: User, e5,
                                                      screenshot: Screenshot) -> None:
    merged = merge("The mobile release ships on Monday", "The mobile release ships on Monday at noon", "alice",
                   tags=["mobile"])
    assert memory(merged).content.endswith("at noon")
    log_in(page, live_server.url)
    page.goto(f"{live_server.url}{LIST}")
    page.locator("#bhg-merges-link").click()
    expect(page).to_have_url(f"{live_server.url}{MERGES}")
    card = page.locator(f'.bhg-merge[data-id="{merged}"]')
    expect(card).to_have_attribute("data-status", "undoable")
    expect(card.locator(".bhg-diff ins")).to_have_text(" at noon")
    expect(card.locator(".bhg-diff")).to_contain_text("The mobile release ships on Monday at noon")
    expect(page.locator("#bhg-merges-empty")).to_have_count(0)
    screenshot(page, "diff")

    card.locator("button.bhg-undo-merge").click()
    expect(message(page, "Merge undone")).to_be_visible()
    expect(card).to_have_attribute("data-status", "undone")
    expect(card.locator("button.bhg-undo-merge")).to_have_count(0)
    restored = memory(merged)
    assert (restored.content, restored.tags) == ("The mobile release ships on Monday", ["mobile"])
    [undo] = audits("UNDO_MERGE", merged)
    assert undo.client_id == ACTOR
    assert MemoryRevision.objects.get(memory_id=merged, operation="UNDO_MERGE").content.endswith("at noon")


# --------------------------------------------------------------------------- search


FACTS = ("Postgres is the primary database of the billing service", "The billing service sends invoices on the 1st",
         "Our Kubernetes cluster runs in eu-west-1", "我们的数据库使用PostgreSQL并且每天备份",
         "The cafeteria serves pizza on Fridays")


def search(page: Page, query: str) -> list[str]:
    page.fill("#searchbar", query)
    page.locator("#searchbar").press("Enter")
    expect(page).to_have_url(re.compile(r"[?&]q="))
    expect(page.locator("#searchbar")).to_have_value(query)
    return listed(page)


def test_search_box_ranks_by_meaning_and_finds_chinese(page: Page, live_server, curator: User, e5,
                                                       screenshot: Screenshot) -> None:
    ids = {remember(text, namespace="alice").id: text for text in FACTS}
    by_text = {text: memory_id for memory_id, text in ids.items()}
    log_in(page, live_server.url)
    sidebar_link(page, "memories", "memory").click()

    found = search(page, "Which SQL engine keeps the payment records?")  # not one word in common with the answer
    screenshot(page, "meaning")
    assert found and ids[found[0]] == FACTS[0], [ids[i] for i in found]
    assert by_text[FACTS[4]] not in found  # pizza is neither worded nor meant like it
    _, exported = downloaded(page, "#bhg-export-jsonl")  # the download keeps the search's rank order
    assert jsonl_ids(exported) == found

    found = search(page, "数据什么时候备份")  # "when is the data backed up?"
    screenshot(page, "chinese")
    assert found and ids[found[0]] == FACTS[3], [ids[i] for i in found]
    expect(row_of(page, found[0])).to_contain_text("我们的数据库")


# --------------------------------------------------------------------------- exports


def test_export_downloads_exactly_the_filtered_list(page: Page, live_server, curator: User, hash_embedder,
                                                    screenshot: Screenshot) -> None:
    alice = [remember("Alice's deploy checklist lives in the team wiki", namespace="alice", retention_tier="T2").id,
             remember("=SUM(A1:A3) is how Alice totals the budget", namespace="alice", tags=["budget", "sheets"]).id,
             remember("Alice prefers squash merges", namespace="alice", retention_tier="T3").id]
    others = [remember("Bob's pager rotation starts on Mondays", namespace="bob").id,
              remember("The billing service runs on Kubernetes", retention_tier="T1").id]
    log_in(page, live_server.url)
    sidebar_link(page, "memories", "memory").click()
    open_filters(page).get_by_role("link", name="alice", exact=True).click()
    expect(page).to_have_url(re.compile(r"[?&]namespace(__exact)?=alice"))
    query = urlsplit(page.url).query
    shown = listed(page)
    assert sorted(shown) == sorted(alice)
    expect(page.locator("#bhg-list-tools")).to_contain_text("Download these 3 rows")
    screenshot(page, "filtered")

    name, jsonl = downloaded(page, "#bhg-export-jsonl")
    assert re.fullmatch(r"memories-\d{8}-\d{6}\.jsonl", name), name
    lines = [json.loads(line) for line in jsonl.splitlines()]
    assert [line["id"] for line in lines] == shown  # the list's rows, in its order
    assert lines == [memory_to_dict(memory(memory_id)) for memory_id in shown]  # the API's shape

    name, text = downloaded(page, "#bhg-export-csv")
    assert re.fullmatch(r"memories-\d{8}-\d{6}\.csv", name), name
    rows = csv_rows(text)
    assert [row["id"] for row in rows] == shown and list(rows[0]) == memory_export_columns()
    budget = next(row for row in rows if row["id"] == alice[1])
    assert (budget["tags"], budget["content"][:5]) == ("budget,sheets", "'=SUM")  # no formula for a spreadsheet
    assert not set(others) & {row["id"] for row in rows}

    exports = list(AuditLog.objects.filter(operation="EXPORT").order_by("id"))
    assert [(e.client_id, e.details["format"], e.details["query"]) for e in exports] == [
        (ACTOR, "jsonl", query), (ACTOR, "csv", query)]


# --------------------------------------------------------------------------- a curator limited to alice


@pytest.fixture
def charlie() -> User:
    """A staff curator of namespace alice, with the Django permissions to view, change and delete
    memories and to view the archive: only his scope keeps bob's memories from him."""
    user = User.objects.create_user(CHARLIE, "charlie@example.com", CHARLIE_PASSWORD, is_staff=True)
    user.user_permissions.set(Permission.objects.filter(
        content_type__app_label="memories", codename__regex=r"^(view|change|delete)_"))
    user.user_permissions.add(*Permission.objects.filter(codename="view_archivedmemory"))
    curator_scope_set(user_id=user.pk, namespaces=["alice"], actor="test")
    return user


@pytest.fixture
def alice_and_bob(e5, _merges_in_place: None) -> dict[str, dict[str, str]]:
    """The same curation work in alice and in bob: a T1 memory due for review, a stale one, a
    dedup merge, and a plain fact the word "release" finds; and one archived memory each."""
    def seed(namespace: str, owner: str, day: str) -> dict[str, str]:
        rows = {
            "due": remember(f"{owner}'s on-call handbook is in Confluence", namespace=namespace).id,
            "stale": remember(f"{owner}'s old office had a rooftop terrace", namespace=namespace).id,
            "merged": merge(f"The mobile release ships on {day}", f"The mobile release ships on {day} at noon", namespace),
            "plain": remember(f"{owner} writes the release notes for every sprint", namespace=namespace).id,
        }
        assert len(set(rows.values())) == 4, rows  # four memories, none merged into another
        due_for_review(rows["due"])
        make_stale(rows["stale"])
        return rows

    archived = {namespace: remember(f"{namespace}'s old release calendar", namespace=namespace).id
                for namespace in ("alice", "bob")}
    for namespace, memory_id in archived.items():
        memory_archive(memory_id=memory_id, namespace=namespace, actor="test")
    return {"alice": seed("alice", "Alice", "Monday"), "bob": seed("bob", "Bob", "Thursday"), "archived": archived}


def test_a_limited_curator_never_reaches_another_namespace(page: Page, live_server, charlie: User,
                                                           alice_and_bob: dict[str, dict[str, str]],
                                                           screenshot: Screenshot) -> None:
    alice, bob = alice_and_bob["alice"], alice_and_bob["bob"]
    bob_before = {memory_id: memory_to_dict(memory(memory_id)) for memory_id in bob.values()}
    log_in(page, live_server.url, CHARLIE, CHARLIE_PASSWORD)
    sidebar_link(page, "memories", "memory").click()
    expect(page).to_have_url(f"{live_server.url}{LIST}")
    page.wait_for_load_state("domcontentloaded")
    assert result_ids(page) == set(alice.values())

    # actions: every row selected, and a tampered form posting one of bob's ids too
    page.locator("#action-toggle").check()
    page.evaluate("""id => {
        const input = Object.assign(document.createElement('input'), {type: 'hidden', name: '_selected_action', value: id});
        document.querySelector('#changelist-form').appendChild(input);
    }""", bob["plain"])
    run_action(page, "add_tags")
    apply = action_page(page, "add_tags", list(alice.values()), "Add tags")
    expect(page.locator("#bhg-action-page")).not_to_contain_text("Bob")
    fill_tags(page, "curated")
    apply.click()
    expect(message(page, "Tagged curated: 4 memories.")).to_be_visible()
    assert all("curated" in memory(memory_id).tags for memory_id in alice.values())
    page.goto(f"{live_server.url}{LIST}?namespace__exact=bob")  # bob's list is empty for him
    expect(page.locator("#result_list tbody tr th a")).to_have_count(0)
    act_on(page, live_server.url, "pin", alice["plain"])
    expect(message(page, "Pinned (T0): 1 memory.")).to_be_visible()

    # the review queue, both tabs
    page.locator("#bhg-review-link").click()
    assert review_ids(page, "review") == [alice["due"]]
    expect(page.locator("#bhg-tab-review")).to_contain_text("1")
    screenshot(page, "review")
    page.locator("#bhg-tab-stale").click()
    assert review_ids(page, "stale") == [alice["stale"]]
    decide(page, alice["stale"], "keep")
    expect(page.locator("#bhg-review-empty")).to_be_visible()
    expect(page.locator("body")).not_to_contain_text("Bob")

    # merges
    page.goto(f"{live_server.url}{MERGES}")
    merges = page.locator(".bhg-merge")
    expect(merges).to_have_count(1)
    expect(merges).to_have_attribute("data-id", alice["merged"])
    expect(page.locator("body")).not_to_contain_text("Thursday")
    screenshot(page, "merges")

    # search: words both namespaces hold, and one of bob's ids typed whole
    page.goto(f"{live_server.url}{LIST}")
    found = search(page, "release")
    assert found and set(found) <= set(alice.values()), found
    assert search(page, bob["plain"]) == []

    # exports: the whole list, and the list filtered to bob by hand
    page.goto(f"{live_server.url}{LIST}")
    _, jsonl = downloaded(page, "#bhg-export-jsonl")
    assert sorted(jsonl_ids(jsonl)) == sorted(alice.values())
    _, text = downloaded(page, "#bhg-export-csv")
    assert sorted(row["id"] for row in csv_rows(text)) == sorted(alice.values())
    page.goto(f"{live_server.url}{LIST}?namespace__exact=bob")
    _, jsonl = downloaded(page, "#bhg-export-jsonl")
    assert jsonl == ""
    sidebar_link(page, "retention", "archivedmemory").click()
    expect(page).to_have_url(f"{live_server.url}{ARCHIVE}")
    _, jsonl = downloaded(page, "#bhg-export-jsonl")
    assert jsonl_ids(jsonl) == [alice_and_bob["archived"]["alice"]]
    exports = AuditLog.objects.filter(operation="EXPORT")
    assert exports.count() == 4 and {(e.namespace, tuple(e.details["namespaces"])) for e in exports} == {("alice", ("alice",))}

    # bob's memories: untouched, and no audit row but their own ADD/UPDATE from the seeding
    assert {memory_id: memory_to_dict(memory(memory_id)) for memory_id in bob.values()} == bob_before
    assert not AuditLog.objects.filter(namespace="bob").exclude(client_id="test").exists()
    assert ArchivedMemory.objects.get(memory_id=alice_and_bob["archived"]["bob"]).restored_at is None
    assert set(AuditLog.objects.filter(client_id=f"admin:{CHARLIE}").values_list("namespace", flat=True)) == {"alice"}
