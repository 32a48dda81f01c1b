"""The Django admin in a real headless browser (Debian's Chromium driven by Playwright).

Every test logs in through the login form, clicks and types like a curator, then checks both
what the page shows and what the database holds afterwards.
"""
from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
if not os.path.exists(CHROMIUM):
    pytest.skip(f"the admin browser tests need Debian's Chromium at {CHROMIUM} (apt-get install chromium)",
                allow_module_level=True)

from django.contrib.admin.models import LogEntry  # noqa: E402
from django.contrib.auth.models import User  # noqa: E402
from django.utils import timezone  # noqa: E402
from playwright.sync_api import Browser, Locator, Page, Response, expect, sync_playwright  # noqa: E402

from categories.models import Category  # noqa: E402
from categories.services import category_set  # noqa: E402
from memories import tokens  # noqa: E402
from memories.models import (  # noqa: E402
    ApiToken,  # noqa: E402
    AuditLog,
    Memory,
    VectorChange,
)
from retention.cleanup import retention_cleanup  # noqa: E402
from retention.models import ArchivedMemory  # noqa: E402
from tests.conftest import remember  # noqa: E402

pytestmark = pytest.mark.django_db(transaction=True)  # the server thread must see committed rows

USERNAME, PASSWORD = "curator", "correct horse battery staple"
TIMEOUT_MS = 15_000
SECTIONS = {
    "Memories": "/admin/memories/memory/",
    "Archived memories": "/admin/retention/archivedmemory/",
    "Audit log": "/admin/memories/auditlog/",
    "Categories": "/admin/categories/category/",
    "Api tokens": "/admin/memories/apitoken/",
}


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One Chromium for the module. Playwright's sync API keeps an asyncio loop marked as running
    in this thread, so Django's async-safety check must be relaxed while the module runs."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
            yield chromium
            chromium.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context()
    context.set_default_timeout(TIMEOUT_MS)
    yield context.new_page()
    context.close()


@pytest.fixture
def curator() -> User:
    return User.objects.create_superuser(USERNAME, "curator@example.com", PASSWORD)


@pytest.fixture
def fresh_token_cache() -> Iterator[None]:
    """Whether scoped tokens exist is cached for 5 s per process: start and end with no cache,
    so no other test sees "auth required" after this test's token is gone."""
    tokens.reset_token_cache()
    yield
    tokens.reset_token_cache()


def submit_login(page: Page, base_url: str, username: str, password: str) -> None:
    page.goto(f"{base_url}/admin/")
    expect(page).to_have_url(re.compile(r"/admin/login/\?next=/admin/$"))
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("#login-form input[type=submit]")


def log_in(page: Page, base_url: str) -> None:
    submit_login(page, base_url, USERNAME, PASSWORD)
    expect(page).to_have_url(f"{base_url}/admin/")
    expect(page.locator("#user-tools")).to_contain_text(USERNAME)


def messages(page: Page) -> Locator:
    return page.locator("ul.messagelist")


def save(page: Page) -> Response:
    """Click "Save" and return the response to the form's POST."""
    with page.expect_response(lambda response: response.request.method == "POST") as posted:
        page.click("input[name=_save]")
    return posted.value


def form_error(page: Page) -> Locator:
    return page.locator(".errornote, .errorlist, ul.messagelist li.error")


# --------------------------------------------------------------------------- a. login


def test_login_form_opens_the_index_with_every_section(page: Page, live_server, curator: User, tmp_path: Path) -> None:
    log_in(page, live_server.url)
    index = page.locator("#content-main")
    for url in SECTIONS.values():
        expect(index.locator(f'th[scope=row] a[href="{url}"]')).to_be_visible()
    for name, section in [("Archived memories", "Archived memories"), ("Audit logs", "Audit log"),
                          ("Api tokens", "Api tokens")]:
        expect(index.get_by_role("link", name=name, exact=True)).to_have_attribute("href", SECTIONS[section])
    expect(page.locator("#logout-form")).to_have_count(1)
    shot = tmp_path / "admin-index.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 0


def test_wrong_password_shows_the_error_and_does_not_log_in(page: Page, live_server, curator: User) -> None:
    submit_login(page, live_server.url, USERNAME, "not the password")
    expect(page.locator(".errornote")).to_contain_text("Please enter the correct username and password")
    expect(page).to_have_url(re.compile(r"/admin/login/"))
    page.goto(f"{live_server.url}/admin/memories/memory/")
    expect(page).to_have_url(re.compile(r"/admin/login/\?next=/admin/memories/memory/$"))
    assert User.objects.get(username=USERNAME).last_login is None


# --------------------------------------------------------------------------- b. memories


def test_memory_changelist_filter_and_edit(page: Page, live_server, curator: User, hash_embedder) -> None:
    kept = remember("The billing service runs on Kubernetes in eu-west-1", tags=["infra"], retention_tier="T1")
    other = remember("Lunch is served at noon on Fridays", retention_tier="T3")
    log_in(page, live_server.url)
    page.locator("#content-main").locator(f'a[href="{SECTIONS["Memories"]}"]').first.click()
    results = page.locator("#result_list tbody tr")
    expect(results).to_have_count(2)
    expect(page.locator("#result_list")).to_contain_text(kept.summary)
    expect(page.locator(".object-tools a.addlink")).to_have_count(0)  # memories are created by the remember tool only

    page.locator("#changelist-filter").get_by_role("link", name="T1 — institutional").click()
    expect(page).to_have_url(re.compile(r"[?&]retention_tier__exact=T1"))
    expect(results).to_have_count(1)
    expect(results).to_contain_text(kept.summary)
    expect(page.locator("#result_list")).not_to_contain_text(other.summary)

    results.get_by_role("link", name=kept.summary).click()
    expect(page).to_have_url(re.compile(rf"/admin/memories/memory/{kept.id}/change/\?_changelist_filters="))
    form = page.locator("#memory_form")
    expect(form.locator("[name=embedding]")).to_have_count(0)
    expect(form.locator(".field-embedding")).to_have_count(0)
    expect(form).not_to_contain_text("Embedding:")
    expect(page.locator(".object-tools a.addlink")).to_have_count(0)
    page.fill("#id_importance", "0.9")
    page.fill("#id_tags", '["alpha", "beta"]')
    page.click("input[name=_save]")

    expect(messages(page)).to_contain_text("was changed successfully")
    expect(page).to_have_url(re.compile(r"/admin/memories/memory/"))
    row = Memory.objects.get(pk=kept.id)
    assert (row.importance, row.tags) == (0.9, ["alpha", "beta"])
    assert row.content == "The billing service runs on Kubernetes in eu-west-1"  # untouched
    edits = list(AuditLog.objects.filter(memory_id=kept.id, operation="EDIT"))
    assert len(edits) == 1
    assert edits[0].client_id == f"admin:{USERNAME}"
    assert edits[0].details["fields"] == ["importance", "tags"]
    assert edits[0].details["before"] == {"importance": "0.5", "tags": "['infra']"}
    assert not AuditLog.objects.filter(memory_id=other.id, operation="EDIT").exists()


# --------------------------------------------------------------------------- c. archive


def test_archived_memory_restore_action(page: Page, live_server, curator: User, hash_embedder) -> None:
    gone = remember("Deploys are frozen during the quarterly release week", tags=["release"], retention_tier="T3")
    Memory.objects.filter(id=gone.id).update(expires_at=timezone.now() - timedelta(days=1))
    assert retention_cleanup().archived == 1
    assert not Memory.objects.filter(pk=gone.id).exists()

    log_in(page, live_server.url)
    page.locator("#content-main").get_by_role("link", name="Archived memories", exact=True).click()
    entry = page.locator("#result_list tbody tr", has_text=gone.summary)
    expect(entry).to_have_count(1)
    expect(page.locator(".object-tools a.addlink")).to_have_count(0)
    entry.locator("input.action-select").check()
    page.select_option("select[name=action]", label="Restore the selected memories (same id, tier T2)")
    page.click("button[name=index]")

    expect(messages(page)).to_contain_text("Restored 1 memory.")
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
    page.locator("#content-main").get_by_role("link", name="Api tokens", exact=True).click()
    page.locator(".object-tools a.addlink").click()
    page.fill("#id_name", "alice-agent")
    page.fill("#id_namespaces", "alice")
    page.click("input[name=_save]")

    shown = messages(page).locator("li.warning")
    expect(shown).to_contain_text("Token created. Copy it now, it is not stored:")
    match = re.search(r"(bhg_[A-Za-z0-9_-]{20,})", shown.inner_text())
    assert match, shown.inner_text()
    plain = match.group(1)

    row = ApiToken.objects.get()
    assert (row.name, row.namespaces, row.read_only, row.revoked) == ("alice-agent", ["alice"], False, False)
    assert row.token_hash == tokens.hash_token(plain)
    assert row.prefix == plain[:10]
    stored = [str(value) for value in ApiToken.objects.values_list().get()]
    stored += [str(value) for entry in LogEntry.objects.values_list() for value in entry]
    assert not any(plain in value for value in stored)  # only the hash is kept

    principal = tokens.principal_for("Bearer " + plain)
    assert principal is not None
    assert (principal.name, principal.namespaces, principal.read_only) == ("alice-agent", frozenset({"alice"}), False)
    assert tokens.principal_for(None) is None  # a scoped token exists: auth is required now
    assert tokens.principal_for("Bearer " + plain[:-1] + ("A" if plain[-1] != "A" else "B")) is None

    page.reload()  # shown once: the value is gone from the next page
    expect(page.locator("#content")).not_to_contain_text(plain)
    expect(page.locator("#result_list")).to_contain_text(plain[:10])


# --------------------------------------------------------------------------- e. audit log


def test_audit_log_is_read_only(page: Page, live_server, curator: User, hash_embedder, tmp_path: Path) -> None:
    memory = remember("Architecture decisions are recorded as ADRs in the docs folder")
    category_set(namespace="global", name="stack", slot="architecture", content="Django with SQLite or PostgreSQL",
                 actor="test")
    log_in(page, live_server.url)
    page.locator("#content-main").locator(f'a[href="{SECTIONS["Audit log"]}"]').first.click()
    rows = page.locator("#result_list tbody tr")
    expect(rows).to_have_count(2)
    expect(page.locator("#result_list")).to_contain_text("CATEGORY_SET")
    rows.filter(has_text="ADD").locator("th a").click()

    expect(page).to_have_url(re.compile(r"/admin/memories/auditlog/\d+/change/$"))
    expect(page.locator("h1")).to_contain_text("View audit log")
    expect(page.locator("#content-main")).to_contain_text(str(memory.id))
    expect(page.locator("input[type=submit]")).to_have_count(0)
    expect(page.locator("#content-main input[name=operation], #content-main textarea")).to_have_count(0)
    shot = tmp_path / "audit-log-entry.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 0
    assert AuditLog.objects.filter(memory_id=memory.id, operation="ADD").count() == 1


# --------------------------------------------------------------------------- categories


def test_category_edit_keeps_a_revision(page: Page, live_server, curator: User) -> None:
    category_set(namespace="global", name="stack", slot="architecture", content="Django with SQLite", actor="test")
    log_in(page, live_server.url)
    page.locator("#content-main").locator(f'a[href="{SECTIONS["Categories"]}"]').first.click()
    page.locator("#result_list").get_by_role("link", name="stack", exact=True).click()
    page.fill("#id_content", "Django with PostgreSQL")
    assert save(page).status == 302
    expect(messages(page)).to_contain_text("was changed successfully")
    category = Category.objects.get()
    assert (category.name, category.revision, category.content) == ("stack", 2, "Django with PostgreSQL")
    assert list(category.revisions.values_list("revision", "content")) == [(1, "Django with SQLite")]
    audit = AuditLog.objects.filter(operation="CATEGORY_SET").order_by("id").last()
    assert (audit.client_id, audit.details["revision"]) == (f"admin:{USERNAME}", 2)


# --------------------------------------------------------------------------- edits the admin must refuse or route through services


def test_index_spells_memories_and_categories(page: Page, live_server, curator: User) -> None:
    log_in(page, live_server.url)
    index = page.locator("#content-main")
    for section in ("Memories", "Categories"):
        url = SECTIONS[section]
        expect(index.locator(f'th[scope=row] a[href="{url}"]')).to_have_text(section, timeout=2_000)


def test_memory_edit_with_a_secret_shows_a_form_error(page: Page, live_server, curator: User, hash_embedder) -> None:
    memory = remember("The search service is written in Rust")
    log_in(page, live_server.url)
    page.goto(f"{live_server.url}/admin/memories/memory/{memory.id}/change/")
    page.fill("#id_content", "The search service db password=hunter2hunter2")
    response = save(page)
    assert Memory.objects.get(pk=memory.id).content == "The search service is written in Rust"
    assert response.status == 200, f"HTTP {response.status}"
    expect(page.locator(".errorlist").first).to_contain_text("secret", timeout=2_000)


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


@pytest.mark.parametrize("tags", ['"release"', '{"team": "core"}', json.dumps([f"tag-{n}" for n in range(21)])],
                         ids=["string", "object", "21-tags"])
def test_memory_edit_rejects_invalid_tags(page: Page, live_server, curator: User, hash_embedder, tags: str) -> None:
    memory = remember("The search service is written in Rust", tags=["search"])
    log_in(page, live_server.url)
    page.goto(f"{live_server.url}/admin/memories/memory/{memory.id}/change/")
    page.fill("#id_tags", tags)
    save(page)
    assert Memory.objects.get(pk=memory.id).tags == ["search"]
    expect(form_error(page).first).to_be_visible(timeout=2_000)


def test_memory_delete_in_the_admin_is_audited_like_forget(page: Page, live_server, curator: User,
                                                           hash_embedder) -> None:
    memory = remember("The search service is written in Rust")
    log_in(page, live_server.url)
    page.goto(f"{live_server.url}/admin/memories/memory/{memory.id}/change/")
    page.locator("#content-main a.deletelink").click()
    page.click("#content input[type=submit]")
    expect(messages(page)).to_contain_text("deleted successfully")
    assert not Memory.objects.filter(pk=memory.id).exists()
    forget = AuditLog.objects.get(memory_id=memory.id, operation="FORGET")
    assert forget.client_id == f"admin:{USERNAME}"
    assert VectorChange.objects.filter(memory_id=memory.id, op=VectorChange.Op.DELETE).exists()


def test_audit_log_offers_no_add_and_no_delete(page: Page, live_server, curator: User, hash_embedder) -> None:
    remember("The search service is written in Rust")
    row = AuditLog.objects.get()
    log_in(page, live_server.url)
    page.goto(f"{live_server.url}{SECTIONS['Audit log']}")
    expect(page.locator("#result_list tbody tr")).to_have_count(1)
    expect(page.locator(".object-tools a.addlink")).to_have_count(0, timeout=2_000)
    expect(page.locator("select[name=action] option[value=delete_selected]")).to_have_count(0, timeout=2_000)
    page.goto(f"{live_server.url}{SECTIONS['Audit log']}{row.pk}/change/")
    expect(page.locator("a.deletelink")).to_have_count(0, timeout=2_000)


def test_category_name_is_fixed_once_created_and_an_edit_changes_that_category(page: Page, live_server,
                                                                               curator: User) -> None:
    """A category is identified by (namespace, name): the change form shows the name read-only, so an
    edit can only ever change that category (renaming would orphan its revisions and its inject slot)."""
    category_set(namespace="global", name="stack", slot="architecture", content="Django with SQLite", actor="test")
    log_in(page, live_server.url)
    page.goto(f"{live_server.url}{SECTIONS['Categories']}{Category.objects.get().pk}/change/")
    expect(page.locator("#id_name")).to_have_count(0)
    expect(page.locator(".field-name .readonly")).to_have_text("stack")
    page.fill("#id_content", "Django with PostgreSQL")
    assert save(page).status == 302
    assert list(Category.objects.values_list("name", "content")) == [("stack", "Django with PostgreSQL")]


def test_api_token_edit_keeps_its_namespaces(page: Page, live_server, curator: User, fresh_token_cache: None) -> None:
    _, plain = tokens.token_create(name="alice-agent", namespaces=["alice"], read_only=False)
    log_in(page, live_server.url)
    page.goto(f"{live_server.url}{SECTIONS['Api tokens']}")
    page.locator("#result_list").get_by_role("link", name="alice-agent").click()
    page.check("#id_read_only")
    save(page)
    expect(messages(page)).to_contain_text("was changed successfully")
    row = ApiToken.objects.get()
    assert row.read_only
    assert row.namespaces == ["alice"]


def test_api_token_with_an_invalid_namespace_shows_a_form_error(page: Page, live_server, curator: User,
                                                                fresh_token_cache: None) -> None:
    log_in(page, live_server.url)
    page.goto(f"{live_server.url}{SECTIONS['Api tokens']}add/")
    page.fill("#id_name", "bad")
    page.fill("#id_namespaces", "alice bob")
    response = save(page)
    assert not ApiToken.objects.exists()
    assert response.status == 200, f"HTTP {response.status}"
    expect(page.locator(".errorlist").first).to_contain_text("not a valid namespace", timeout=2_000)


def test_api_token_add_form_offers_no_revoked_box_and_revoking_later_stops_the_token(page: Page, live_server,
                                                                                     curator: User,
                                                                                     fresh_token_cache: None) -> None:
    """A token is created live (the add form has no "revoked" box: a token born revoked would be
    shown once and never work); revoking it on its change page stops it authenticating."""
    log_in(page, live_server.url)
    page.goto(f"{live_server.url}{SECTIONS['Api tokens']}add/")
    expect(page.locator("#id_revoked")).to_have_count(0)
    page.fill("#id_name", "retired")
    page.fill("#id_namespaces", "alice")
    save(page)
    plain = re.search(r"(bhg_[A-Za-z0-9_-]{20,})", messages(page).locator("li.warning").inner_text()).group(1)
    assert tokens.principal_for("Bearer " + plain) is not None
    page.goto(f"{live_server.url}{SECTIONS['Api tokens']}{ApiToken.objects.get().pk}/change/")
    page.check("#id_revoked")
    assert save(page).status == 302
    assert ApiToken.objects.get().revoked
    assert tokens.principal_for("Bearer " + plain) is None
    assert AuditLog.objects.get(operation="TOKEN_REVOKE").client_id == f"admin:{USERNAME}"


# --------------------------------------------------------------------------- conversation threads


def test_thread_view_shows_the_transcript_in_order_with_links_and_context(page: Page, live_server, curator: User,
                                                                        hash_embedder) -> None:
    from datetime import UTC, datetime

    from memories.messages import thread_append
    from memories.writing import RememberInput

    start = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)
    lines = [("Bob", "Did you book the flights?"), ("Ann", "Yes, we leave on the 14th."), ("Bob", "Great, thanks.")]
    batch = [RememberInput(content=text, namespace="global", collection="general", thread="trip", speaker=speaker,
                           message_id=f"m{i}", occurred_at=start + timedelta(minutes=10 - i))  # sent newest first
             for i, (speaker, text) in enumerate(lines)]
    ids = [r["id"] for r in thread_append(messages=batch, actor="test")]
    log_in(page, live_server.url)
    page.goto(f"{live_server.url}/admin/memories/memory/{ids[1]}/change/")
    expect(page.locator(".field-conversation_context")).to_contain_text("Did you book the flights?")
    page.locator(".field-thread_link a").click()
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
    page.select_option("#id_status", "cancelled")
    assert save(page).status == 302
    assert Memory.objects.get(pk=memory.id).status == "cancelled"
    assert AuditLog.objects.get(operation="EVENT", memory_id=memory.id).client_id == f"admin:{USERNAME}"
