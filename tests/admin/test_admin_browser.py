"""The Django admin (the django-unfold console) in a real headless browser (Debian's Chromium
driven by Playwright).

Every test logs in through the login form, clicks and types like a curator, then checks both
what the page shows and what the database holds afterwards. Fixtures and the curator's steps:
tests/admin/conftest.py.
"""
from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.utils import timezone
from playwright.sync_api import Page, expect

from categories.models import Category
from categories.services import category_set
from memories import api_tokens
from memories.models import ApiToken, AuditLog, ChangeFeedEntry, Memory
from retention.cleanup import retention_cleanup
from retention.models import ArchivedMemory
from tests.admin.conftest import (
    USERNAME,
    Screenshot,
    fill_tags,
    form_error,
    log_in,
    message,
    open_filters,
    readonly_field,
    result_ids,
    results,
    save,
    sidebar_link,
    submit_login,
)
from tests.conftest import remember

pytestmark = pytest.mark.django_db(transaction=True)  # the server thread must see committed rows

SECTIONS = {  # sidebar name -> (app, model, list URL)
    "Memories": ("memories", "memory", "/admin/memories/memory/"),
    "Archived memories": ("retention", "archivedmemory", "/admin/retention/archivedmemory/"),
    "Audit logs": ("memories", "auditlog", "/admin/memories/auditlog/"),
    "Categories": ("categories", "category", "/admin/categories/category/"),
    "Api tokens": ("memories", "apitoken", "/admin/memories/apitoken/"),
}
TOKEN_CREATED = "Token created. Copy it now, it is not stored:"


def url(section: str) -> str:
    return SECTIONS[section][2]


def open_section(page: Page, section: str) -> None:
    app, model, path = SECTIONS[section]
    sidebar_link(page, app, model).click()
    expect(page).to_have_url(re.compile(rf"{re.escape(path)}$"))


def no_add_link(page: Page, section: str) -> None:
    expect(page.locator(f'a[href="{url(section)}add/"]')).to_have_count(0)


def created_token(page: Page) -> str:
    shown = message(page, TOKEN_CREATED)
    expect(shown).to_be_visible()
    match = re.search(r"(bhg_[A-Za-z0-9_-]{20,})", shown.inner_text())
    assert match, shown.inner_text()
    return match.group(1)


# --------------------------------------------------------------------------- a. login


def test_login_form_opens_the_dashboard_with_every_section(page: Page, live_server, curator: User,
                                                           screenshot: Screenshot) -> None:
    log_in(page, live_server.url)
    for name, (app, model, path) in SECTIONS.items():
        link = sidebar_link(page, app, model)
        expect(link).to_have_attribute("href", path)
        expect(link).to_have_text(name)
    expect(page.locator("#logout-form").get_by_role("button", name="Log out", include_hidden=True)).to_have_count(1)
    assert screenshot(page, "dashboard").stat().st_size > 0


def test_wrong_password_shows_the_error_and_does_not_log_in(page: Page, live_server, curator: User) -> None:
    submit_login(page, live_server.url, USERNAME, "not the password")
    expect(page.locator(".errornote").filter(has_text="Please enter the correct username and password")).to_be_visible()
    expect(page).to_have_url(re.compile(r"/admin/login/"))
    page.goto(f"{live_server.url}{url('Memories')}")
    expect(page).to_have_url(re.compile(r"/admin/login/\?next=/admin/memories/memory/$"))
    assert User.objects.get(username=USERNAME).last_login is None


# --------------------------------------------------------------------------- b. memories


def test_memory_changelist_filter_and_edit(page: Page, live_server, curator: User, hash_embedder) -> None:
    kept = remember("The billing service runs on Kubernetes in eu-west-1", tags=["infra"], retention_tier="T1")
    other = remember("Lunch is served at noon on Fridays", retention_tier="T3")
    log_in(page, live_server.url)
    open_section(page, "Memories")
    expect(results(page)).to_have_count(2)
    expect(page.locator("#result_list")).to_contain_text(kept.summary)
    no_add_link(page, "Memories")  # memories are created by the remember tool only

    open_filters(page).get_by_role("link", name="T1 — institutional").click()
    expect(page).to_have_url(re.compile(r"[?&]retention_tier__exact=T1"))
    expect(results(page)).to_have_count(1)
    assert result_ids(page) == {kept.id}
    expect(page.locator("#result_list")).not_to_contain_text(other.summary)

    page.locator("#result_list").get_by_role("link", name=kept.summary).click()
    expect(page).to_have_url(re.compile(rf"/admin/memories/memory/{kept.id}/change/\?_changelist_filters="))
    form = page.locator("#memory_form")
    expect(form.locator("[name=embedding]")).to_have_count(0)
    expect(form.locator(".field-embedding")).to_have_count(0)
    expect(form.get_by_text("Embedding", exact=True)).to_have_count(0)  # "Embedding model" is shown, the vector not
    no_add_link(page, "Memories")
    page.fill("#id_importance", "0.9")
    page.select_option("#id_type", "procedural")
    assert save(page).status == 302

    expect(message(page, "was changed successfully")).to_be_visible()
    expect(page).to_have_url(re.compile(r"/admin/memories/memory/\?retention_tier__exact=T1$"))  # back to the filtered list
    row = Memory.objects.get(pk=kept.id)
    assert (row.importance, row.type, row.tags) == (0.9, "procedural", ["infra"])
    assert row.content == "The billing service runs on Kubernetes in eu-west-1"  # untouched
    edits = list(AuditLog.objects.filter(memory_id=kept.id, operation="EDIT"))
    assert len(edits) == 1
    assert edits[0].client_id == f"admin:{USERNAME}"
    assert edits[0].details["fields"] == ["importance", "type"]
    assert edits[0].details["before"] == {"importance": "0.5", "type": "semantic"}
    assert not AuditLog.objects.filter(memory_id=other.id, operation="EDIT").exists()


def test_memory_tags_edit_is_saved_and_audited(page: Page, live_server, curator: User, hash_embedder) -> None:
    memory = remember("The billing service runs on Kubernetes in eu-west-1", tags=["infra"])
    log_in(page, live_server.url)
    page.goto(f"{live_server.url}/admin/memories/memory/{memory.id}/change/")
    fill_tags(page, ["alpha", "beta"])
    assert save(page).status == 302
    expect(message(page, "was changed successfully")).to_be_visible()
    assert Memory.objects.get(pk=memory.id).tags == ["alpha", "beta"]
    edit = AuditLog.objects.get(memory_id=memory.id, operation="EDIT")
    assert (edit.details["fields"], edit.details["before"]) == (["tags"], {"tags": "['infra']"})


# --------------------------------------------------------------------------- c. archive


def test_archived_memory_restore_action(page: Page, live_server, curator: User, hash_embedder) -> None:
    gone = remember("Deploys are frozen during the quarterly release week", tags=["release"], retention_tier="T3")
    Memory.objects.filter(id=gone.id).update(expires_at=timezone.now() - timedelta(days=1))
    assert retention_cleanup().archived == 1
    assert not Memory.objects.filter(pk=gone.id).exists()

    log_in(page, live_server.url)
    open_section(page, "Archived memories")
    entry = results(page).filter(has_text=gone.summary)
    expect(entry).to_have_count(1)
    no_add_link(page, "Archived memories")
    entry.get_by_role("checkbox", name="Select record").check()
    page.get_by_label("Select action to run").select_option(label="Restore the selected memories (same id, tier T2)")
    page.locator("#changelist-actions").get_by_role("button", name="Run").click()

    expect(message(page, "Restored 1 memory.")).to_be_visible()
    restored = Memory.objects.get(pk=gone.id)
    assert (restored.content, restored.tags, restored.retention_tier) == (
        "Deploys are frozen during the quarterly release week", ["release"], "T2")
    assert ArchivedMemory.objects.get(memory_id=gone.id).restored_at is not None
    audit = AuditLog.objects.get(memory_id=gone.id, operation="RESTORE_ARCHIVE")
    assert audit.client_id == f"admin:{USERNAME}"


# --------------------------------------------------------------------------- d. api tokens


def test_api_token_created_in_the_admin_authenticates(page: Page, live_server, curator: User,
                                                      fresh_token_cache: None) -> None:
    log_in(page, live_server.url)
    open_section(page, "Api tokens")
    page.get_by_title("Add api token").click()
    expect(page).to_have_url(re.compile(r"/admin/memories/apitoken/add/$"))
    page.fill("#id_name", "alice-agent")
    page.fill("#id_namespaces", "alice")
    assert save(page).status == 302

    plain = created_token(page)
    row = ApiToken.objects.get()
    assert (row.name, row.namespaces, row.read_only, row.revoked) == ("alice-agent", ["alice"], False, False)
    assert row.token_hash == api_tokens.hash_token(plain)
    assert row.prefix == plain[:10]
    stored = [str(value) for value in ApiToken.objects.values_list().get()]
    stored += [str(value) for entry in LogEntry.objects.values_list() for value in entry]
    assert not any(plain in value for value in stored)  # only the hash is kept

    principal = api_tokens.principal_for("Bearer " + plain)
    assert principal is not None
    assert (principal.name, principal.namespaces, principal.read_only) == ("alice-agent", frozenset({"alice"}), False)
    assert api_tokens.principal_for(None) is None  # a scoped token exists: auth is required now
    assert api_tokens.principal_for("Bearer " + plain[:-1] + ("A" if plain[-1] != "A" else "B")) is None

    page.reload()  # shown once: the value is gone from the next page
    expect(page.locator("#result_list")).to_contain_text(plain[:10])
    expect(page.locator("body")).not_to_contain_text(plain)


# --------------------------------------------------------------------------- e. audit log


def test_audit_log_is_read_only(page: Page, live_server, curator: User, hash_embedder, screenshot: Screenshot) -> None:
    memory = remember("Architecture decisions are recorded as ADRs in the docs folder")
    category_set(namespace="global", name="stack", slot="architecture", content="Django with SQLite or PostgreSQL",
                 actor="test")
    log_in(page, live_server.url)
    open_section(page, "Audit logs")
    expect(results(page)).to_have_count(2)
    expect(page.locator("#result_list")).to_contain_text("CATEGORY_SET")
    results(page).filter(has_text="ADD").get_by_role("link").first.click()

    expect(page).to_have_url(re.compile(r"/admin/memories/auditlog/\d+/change/$"))
    expect(page).to_have_title(re.compile(r"View audit log"))
    expect(readonly_field(page, "Memory id")).to_have_text(str(memory.id))
    expect(readonly_field(page, "Operation")).to_have_text("ADD")
    expect(page.locator("#content-main input:not([type=hidden]), #content-main textarea, #content-main select")).to_have_count(0)
    expect(page.get_by_role("button", name=re.compile(r"^Save"))).to_have_count(0)
    expect(page.locator("#submit-row").get_by_role("link", name="Close")).to_be_visible()
    assert screenshot(page, "entry").stat().st_size > 0
    assert AuditLog.objects.filter(memory_id=memory.id, operation="ADD").count() == 1


# --------------------------------------------------------------------------- categories


def test_category_edit_keeps_a_revision(page: Page, live_server, curator: User) -> None:
    category_set(namespace="global", name="stack", slot="architecture", content="Django with SQLite", actor="test")
    log_in(page, live_server.url)
    open_section(page, "Categories")
    page.locator("#result_list").get_by_role("link", name="stack", exact=True).click()
    page.fill("#id_content", "Django with PostgreSQL")
    assert save(page).status == 302
    expect(message(page, "was changed successfully")).to_be_visible()
    category = Category.objects.get()
    assert (category.name, category.revision, category.content) == ("stack", 2, "Django with PostgreSQL")
    assert list(category.revisions.values_list("revision", "content")) == [(1, "Django with SQLite")]
    audit = AuditLog.objects.filter(operation="CATEGORY_SET").order_by("id").last()
    assert (audit.client_id, audit.details["revision"]) == (f"admin:{USERNAME}", 2)


# --------------------------------------------------------------------------- edits the admin must refuse or route through services


def test_sidebar_spells_memories_and_categories(page: Page, live_server, curator: User) -> None:
    log_in(page, live_server.url)
    for section in ("Memories", "Categories"):
        app, model, _ = SECTIONS[section]
        expect(sidebar_link(page, app, model)).to_have_text(section, timeout=2_000)


def test_memory_edit_with_a_secret_shows_a_form_error(page: Page, live_server, curator: User, hash_embedder) -> None:
    memory = remember("The search service is written in Rust")
    log_in(page, live_server.url)
    page.goto(f"{live_server.url}/admin/memories/memory/{memory.id}/change/")
    page.fill("#id_content", "The search service db password=hunter2hunter2")
    response = save(page)
    assert Memory.objects.get(pk=memory.id).content == "The search service is written in Rust"
    assert response.status == 200, f"HTTP {response.status}"
    expect(page.locator(".field-content .errorlist")).to_contain_text("secret", timeout=2_000)


def test_memory_edit_to_duplicate_content_shows_a_form_error(page: Page, live_server, curator: User,
                                                             hash_embedder) -> None:
    remember("The billing service runs on Kubernetes")
    memory = remember("The search service is written in Rust")
    log_in(page, live_server.url)
    page.goto(f"{live_server.url}/admin/memories/memory/{memory.id}/change/")
    page.fill("#id_content", "The billing service runs on Kubernetes")
    response = save(page)
    assert Memory.objects.get(pk=memory.id).content == "The search service is written in Rust"
    assert response.status == 200, f"HTTP {response.status}"
    expect(form_error(page).first).to_be_visible(timeout=2_000)
    expect(page.locator(".field-content .errorlist")).to_contain_text("already says exactly this")


@pytest.mark.parametrize("tags", ['"release"', '{"team": "core"}', json.dumps([f"tag-{n}" for n in range(21)])],
                         ids=["string", "object", "21-tags"])
def test_memory_edit_rejects_invalid_tags(page: Page, live_server, curator: User, hash_embedder, tags: str) -> None:
    memory = remember("The search service is written in Rust", tags=["search"])
    log_in(page, live_server.url)
    page.goto(f"{live_server.url}/admin/memories/memory/{memory.id}/change/")
    fill_tags(page, tags)
    response = save(page)
    assert Memory.objects.get(pk=memory.id).tags == ["search"]
    assert response.status == 200, f"HTTP {response.status}"
    expect(form_error(page).first).to_be_visible(timeout=2_000)


def test_memory_delete_in_the_admin_is_audited_like_forget(page: Page, live_server, curator: User,
                                                           hash_embedder) -> None:
    memory = remember("The search service is written in Rust")
    log_in(page, live_server.url)
    page.goto(f"{live_server.url}/admin/memories/memory/{memory.id}/change/")
    page.locator("#submit-row").get_by_role("link", name="Delete memory").click()
    expect(page).to_have_url(re.compile(rf"/admin/memories/memory/{memory.id}/delete/$"))
    page.locator("#content").get_by_role("button", name=re.compile(r"^Yes, I.m sure")).click()
    expect(message(page, "deleted successfully")).to_be_visible()
    assert not Memory.objects.filter(pk=memory.id).exists()
    forget = AuditLog.objects.get(memory_id=memory.id, operation="FORGET")
    assert forget.client_id == f"admin:{USERNAME}"
    assert ChangeFeedEntry.objects.filter(memory_id=memory.id, op=ChangeFeedEntry.Op.DELETE).exists()


def test_audit_log_offers_no_add_and_no_delete(page: Page, live_server, curator: User, hash_embedder) -> None:
    remember("The search service is written in Rust")
    row = AuditLog.objects.get()
    log_in(page, live_server.url)
    page.goto(f"{live_server.url}{url('Audit logs')}")
    expect(results(page)).to_have_count(1)
    no_add_link(page, "Audit logs")
    expect(page.locator("select[name=action] option[value=delete_selected]")).to_have_count(0, timeout=2_000)
    page.goto(f"{live_server.url}{url('Audit logs')}{row.pk}/change/")
    expect(readonly_field(page, "Operation")).to_have_text("ADD")
    expect(page.locator('#main a[href$="/delete/"]')).to_have_count(0, timeout=2_000)
    response = page.goto(f"{live_server.url}{url('Audit logs')}{row.pk}/delete/")
    assert response is not None and response.status == 403, response and response.status
    assert AuditLog.objects.filter(pk=row.pk).exists()


def test_category_name_is_fixed_once_created_and_an_edit_changes_that_category(page: Page, live_server,
                                                                               curator: User) -> None:
    """A category is identified by (namespace, name): the change form shows the name read-only, so an
    edit can only ever change that category (renaming would orphan its revisions and its inject slot)."""
    category_set(namespace="global", name="stack", slot="architecture", content="Django with SQLite", actor="test")
    log_in(page, live_server.url)
    page.goto(f"{live_server.url}{url('Categories')}{Category.objects.get().pk}/change/")
    expect(page.locator("#id_content")).to_be_visible()
    expect(page.locator("#id_name")).to_have_count(0)
    expect(readonly_field(page, "Name")).to_have_text("stack")
    page.fill("#id_content", "Django with PostgreSQL")
    assert save(page).status == 302
    assert list(Category.objects.values_list("name", "content")) == [("stack", "Django with PostgreSQL")]


def test_api_token_edit_keeps_its_namespaces(page: Page, live_server, curator: User, fresh_token_cache: None) -> None:
    _, plain = api_tokens.token_create(name="alice-agent", namespaces=["alice"], read_only=False)
    log_in(page, live_server.url)
    page.goto(f"{live_server.url}{url('Api tokens')}")
    page.locator("#result_list").get_by_role("link", name="alice-agent").click()
    expect(page.locator("#id_namespaces")).to_have_value("alice")
    page.check("#id_read_only")
    assert save(page).status == 302
    expect(message(page, "was changed successfully")).to_be_visible()
    row = ApiToken.objects.get()
    assert row.read_only
    assert row.namespaces == ["alice"]


def test_api_token_with_an_invalid_namespace_shows_a_form_error(page: Page, live_server, curator: User,
                                                                fresh_token_cache: None) -> None:
    log_in(page, live_server.url)
    page.goto(f"{live_server.url}{url('Api tokens')}add/")
    page.fill("#id_name", "bad")
    page.fill("#id_namespaces", "alice bob")
    response = save(page)
    assert not ApiToken.objects.exists()
    assert response.status == 200, f"HTTP {response.status}"
    expect(page.locator(".field-namespaces .errorlist")).to_contain_text("not a valid namespace", timeout=2_000)


def test_api_token_add_form_offers_no_revoked_box_and_revoking_later_stops_the_token(page: Page, live_server,
                                                                                     curator: User,
                                                                                     fresh_token_cache: None) -> None:
    """A token is created live (the add form has no "revoked" box: a token born revoked would be
    shown once and never work); revoking it on its change page stops it authenticating."""
    log_in(page, live_server.url)
    page.goto(f"{live_server.url}{url('Api tokens')}add/")
    expect(page.locator("#id_name")).to_be_visible()
    expect(page.locator("#id_revoked")).to_have_count(0)
    page.fill("#id_name", "retired")
    page.fill("#id_namespaces", "alice")
    save(page)
    plain = created_token(page)
    assert api_tokens.principal_for("Bearer " + plain) is not None
    page.goto(f"{live_server.url}{url('Api tokens')}{ApiToken.objects.get().pk}/change/")
    page.check("#id_revoked")
    assert save(page).status == 302
    assert ApiToken.objects.get().revoked
    assert api_tokens.principal_for("Bearer " + plain) is None
    assert AuditLog.objects.get(operation="TOKEN_REVOKE").client_id == f"admin:{USERNAME}"


# --------------------------------------------------------------------------- conversation threads


def test_thread_view_shows_the_transcript_in_order_with_links_and_context(page: Page, live_server, curator: User,
                                                                          hash_embedder) -> None:
    from datetime import UTC, datetime

    from memories.remember import RememberInput, thread_append

    start = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)
    lines = [("Bob", "Did you book the flights?"), ("Ann", "Yes, we leave on the 14th."), ("Bob", "Great, thanks.")]
    batch = [RememberInput(content=text, namespace="global", collection="general", thread="trip", speaker=speaker,
                           message_id=f"m{i}", occurred_at=start + timedelta(minutes=10 - i))  # sent newest first
             for i, (speaker, text) in enumerate(lines)]
    ids = [r["id"] for r in thread_append(messages=batch, actor="test")]
    log_in(page, live_server.url)
    page.goto(f"{live_server.url}/admin/memories/memory/{ids[1]}/change/")
    expect(readonly_field(page, "Context (indexed with it)")).to_contain_text("Did you book the flights?")
    readonly_field(page, "Thread").get_by_role("link", name="trip").click()
    rows = page.locator("#thread-transcript tbody tr.turn")
    expect(rows).to_have_count(3)
    assert [rows.nth(i).get_attribute("data-id") for i in range(3)] == ids[::-1]  # conversation order: by time
    expect(rows.nth(0)).to_contain_text("Great, thanks.")
    rows.nth(2).get_by_role("link").click()
    expect(page).to_have_url(re.compile(rf"/admin/memories/memory/{ids[0]}/change/$"))


def test_event_status_edited_in_the_admin_goes_through_the_service(page: Page, live_server, curator: User,
                                                                   hash_embedder) -> None:
    memory = remember("Team offsite in Porto", status="planned")
    log_in(page, live_server.url)
    page.goto(f"{live_server.url}/admin/memories/memory/{memory.id}/change/")
    expect(page.locator("#id_status")).to_have_value("planned")
    page.select_option("#id_status", "cancelled")
    assert save(page).status == 302
    assert Memory.objects.get(pk=memory.id).status == "cancelled"
    assert AuditLog.objects.get(operation="EVENT", memory_id=memory.id).client_id == f"admin:{USERNAME}"
