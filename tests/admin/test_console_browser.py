"""The governance console in a real headless browser: the dashboard's numbers and the lists behind
them, curators limited to namespaces (alice's curator never sees bob's memories), setting a
curator's namespaces on the user page, login throttling, and Chinese text drawn with real glyphs.

Each test leaves a full-page screenshot named after it (tests/admin/conftest.py).
"""
from __future__ import annotations

import json
import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.utils import timezone
from playwright.sync_api import Locator, Page, expect

from categories.services import category_set
from memories.curation.namespaces import curator_namespaces, curator_scope_set
from memories.models import AuditLog, CuratorScope, Memory
from retention.cleanup import retention_cleanup
from retention.models import ArchivedMemory, BackupRecord
from tests.admin.conftest import (
    PASSWORD,
    USERNAME,
    Screenshot,
    filter_choices,
    log_in,
    message,
    result_ids,
    save,
    sidebar_link,
    submit_login,
    submit_login_form,
)
from tests.conftest import remember

pytestmark = pytest.mark.django_db(transaction=True)  # the server thread must see committed rows

CHARLIE, CHARLIE_PASSWORD = "charlie", "charlie curates alice only"


def table(locator: Locator) -> list[list[str]]:
    """A table's cells as the curator reads them, row by row."""
    return locator.evaluate("t => [...t.rows].map(r => [...r.cells].map(c => c.innerText.trim()))")


def queue_counts(page: Page) -> dict[str, str]:
    cards = page.locator("#bhg-queues").get_by_role("link")
    lines = [[line.strip() for line in text.splitlines() if line.strip()] for text in cards.all_inner_texts()]
    return {card[0]: card[-1] for card in lines}


def chart_data(page: Page, kind: str) -> dict[str, Any]:
    return json.loads(page.locator(f"#bhg-dashboard canvas[data-type={kind}]").get_attribute("data-value") or "{}")


def painted_pixels(canvas: Locator) -> int:
    """How many pixels of a canvas something was drawn on (0: the chart never rendered)."""
    return canvas.evaluate("""c => {
        if (!c.width || !c.height) return 0;
        const data = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let n = 0;
        for (let i = 3; i < data.length; i += 4) if (data[i] > 0) n++;
        return n;
    }""")


def eventually_painted(page: Page, canvas: Locator, enough: int = 500) -> int:
    painted = 0
    for _ in range(50):  # Chart.js draws once its script has loaded, and animates in
        painted = painted_pixels(canvas)
        if painted > enough:
            break
        page.wait_for_timeout(100)
    return painted


def expire(*ids: str) -> int:
    """Let these memories expire and archive them (the retention job)."""
    Memory.objects.filter(id__in=ids).update(expires_at=timezone.now() - timedelta(days=1))
    return retention_cleanup().archived


def status_without_redirect(page: Page, url: str) -> tuple[int, str]:
    """Open ``url`` in the browser: the status of the first response and where the page ended up."""
    response = page.goto(url)
    assert response is not None
    first = response.request
    while first.redirected_from is not None:
        first = first.redirected_from
    answered = first.response()
    return (answered.status if answered else response.status), page.url


# --------------------------------------------------------------------------- the dashboard


@pytest.fixture
def seeded(hash_embedder, bhg_config) -> dict[str, str]:
    """Seven memories in two namespaces and three tiers, each queue holding a different number,
    budgets small enough to show a use: T1 2 of 4, T3 4 of 2 (over)."""
    bhg_config.retention.tier_budgets.T1 = 4
    bhg_config.retention.tier_budgets.T3 = 2
    ids = {
        "a_t2": remember("Alice's deploy checklist lives in the team wiki", namespace="alice", retention_tier="T2").id,
        "a_t3_1": remember("Alice prefers squash merges for small fixes", namespace="alice", retention_tier="T3").id,
        "a_t3_2": remember("Alice is out of office next Tuesday", namespace="alice", retention_tier="T3").id,
        "a_t3_3": remember("Alice reviews the frontend pull requests", namespace="alice", retention_tier="T3").id,
        "g_t1_1": remember("The billing service runs on Kubernetes", retention_tier="T1").id,
        "g_t1_2": remember("Invoices are archived for ten years", retention_tier="T1").id,
        "g_t3": remember("The staging database is reset every night", retention_tier="T3").id,
    }
    now = timezone.now()
    Memory.objects.filter(id__in=[ids["g_t3"], ids["a_t3_1"], ids["a_t3_2"]]).update(expires_at=now + timedelta(days=2))
    Memory.objects.filter(id=ids["g_t1_1"]).update(review_due=now - timedelta(days=1))
    Memory.objects.filter(id__in=[ids["a_t2"], ids["g_t1_2"]]).update(stale=True)
    Memory.objects.filter(id__in=[ids["a_t2"], ids["a_t3_1"], ids["a_t3_3"], ids["g_t1_2"]]).update(vector_synced=False)
    BackupRecord.objects.create(path="/backups/store-1.bhgb", size_bytes=4096, memory_count=7, checksum="0" * 64,
                                created_at=now - timedelta(hours=3))
    return ids


def test_dashboard_shows_the_stores_numbers(page: Page, live_server, curator: User, seeded: dict[str, str]) -> None:
    log_in(page, live_server.url)
    expect(page.locator("#bhg-scope")).to_have_count(0)  # a superuser curates every namespace
    expect(page.locator("#bhg-health")).to_contain_text("sqlite: healthy")

    assert table(page.locator("#bhg-namespaces")) == [
        ["namespace", "T0", "T1", "T2", "T3", "total", "superseded"],
        ["alice", "0", "0", "1", "3", "4", "0"],
        ["global", "0", "2", "0", "1", "3", "0"],
    ]
    budgets = table(page.locator("#bhg-budgets"))
    assert [row[:3] for row in budgets] == [
        ["tier", "memories", "budget"],
        ["T0", "0", "—"], ["T1", "2", "4"], ["T2", "1", "200,000"], ["T3", "4", "2"], ["all", "7", "500,000"],
    ]
    assert budgets[2][3] == "50 %" and budgets[4][3] == "200 % over"
    assert queue_counts(page) == {"Expiring in 7 days": "3", "T1 due for review": "1",
                                  "Consolidation candidates (stale)": "2", "Not in the vector index yet": "4"}
    expect(page.locator("#bhg-backups")).to_contain_text("(7 memories, 4.0 KB)")
    audit = table(page.locator("#bhg-audit"))
    assert [row[1] for row in audit[1:]] == ["ADD"] * 7

    bars = chart_data(page, "bar")
    assert (bars["labels"], bars["datasets"][0]["data"]) == (["T0", "T1", "T2", "T3"], [0, 2, 1, 4])
    growth = chart_data(page, "line")["datasets"][0]
    assert (growth["label"], growth["data"][-1], sum(growth["data"])) == ("new memories", 7, 7)
    legend = page.locator("#activity-legend li")
    assert [" ".join(text.split()) for text in legend.all_inner_texts()] == ["new memories 7", "accesses 0", "archived 0"]
    canvases = page.locator("#bhg-dashboard canvas")
    expect(canvases).to_have_count(2)
    for canvas in canvases.all():
        expect(canvas).to_be_visible()
        assert eventually_painted(page, canvas) > 500


def test_dashboard_tables_fit_their_cards(page: Page, live_server, curator: User, seeded: dict[str, str]) -> None:
    """At a laptop's width every column of the dashboard's tables is on screen: none is cut off by
    its card ("200 % over" read "200 % ove" when the budget table overflowed)."""
    log_in(page, live_server.url)
    for table_id in ("bhg-budgets", "bhg-namespaces", "bhg-audit"):
        overflow = page.locator(f"#{table_id}").evaluate("""t => {
            let card = t.parentElement;
            while (card && getComputedStyle(card).overflowX === 'visible' && card.id !== 'bhg-dashboard') card = card.parentElement;
            return t.getBoundingClientRect().right - card.getBoundingClientRect().right;
        }""")
        assert overflow <= 0, f"#{table_id} sticks out of its card by {overflow:.0f}px"


@pytest.mark.parametrize("where, link, expected", [
    ("#bhg-namespaces", ("alice", 4), ("a_t3_1", "a_t3_2", "a_t3_3")),  # alice's T3 cell
    ("#bhg-namespaces", ("global", 2), ("g_t1_1", "g_t1_2")),  # global's T1 cell
    ("#bhg-namespaces", ("alice", 0), ("a_t2", "a_t3_1", "a_t3_2", "a_t3_3")),  # the namespace itself
    ("#bhg-budgets", ("T3", 1), ("a_t3_1", "a_t3_2", "a_t3_3", "g_t3")),  # the tier's count
    ("#bhg-queues", "Expiring in 7 days", ("g_t3", "a_t3_1", "a_t3_2")),
    ("#bhg-queues", "T1 due for review", ("g_t1_1",)),
    ("#bhg-queues", "Consolidation candidates (stale)", ("a_t2", "g_t1_2")),
    ("#bhg-queues", "Not in the vector index yet", ("a_t2", "a_t3_1", "a_t3_3", "g_t1_2")),
], ids=["namespace-tier", "global-T1", "namespace", "tier", "expiring", "review", "stale", "unsynced"])
def test_a_dashboard_number_opens_exactly_its_memories(page: Page, live_server, curator: User, seeded: dict[str, str],
                                                       where: str, link: Any, expected: tuple[str, ...]) -> None:
    log_in(page, live_server.url)
    if isinstance(link, str):  # a queue card: its label and its count
        target = page.locator(where).get_by_role("link").filter(has_text=link)
        shown = target.inner_text().split()[-1]
    else:  # a table cell: the row named link[0], column link[1]
        row = page.locator(f"{where} tr").filter(has=page.get_by_role("link", name=link[0], exact=True))
        target = row.locator("td").nth(link[1]).get_by_role("link")
        shown = target.inner_text() if link[1] else row.locator("td").nth(5).inner_text()  # a name: its total
    assert shown == str(len(expected))
    target.click()
    expect(page).to_have_url(re.compile(r"/admin/memories/memory/\?"))
    expect(page.locator("#result_list")).to_be_visible()
    assert result_ids(page) == {seeded[name] for name in expected}


# --------------------------------------------------------------------------- curators limited to namespaces


@pytest.fixture
def charlie() -> User:
    """A staff user who curates alice only, with the Django permissions to view and change every
    memories model, the archive, backups and users: what hides bob and the store-wide pages from
    him is his scope, not a missing permission."""
    user = User.objects.create_user(CHARLIE, "charlie@example.com", CHARLIE_PASSWORD, is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label__in=["memories", "categories"],
                                                        codename__regex=r"^(view|change)_"))
    user.user_permissions.add(*Permission.objects.filter(codename__in=[
        "view_archivedmemory", "view_backuprecord", "view_user", "change_user", "view_group"]))
    curator_scope_set(user_id=user.pk, namespaces=["alice"], actor="test")
    return user


@pytest.fixture
def two_namespaces(hash_embedder) -> dict[str, Any]:
    """Live and archived memories and a category in alice and in bob."""
    alice_old = remember("Alice retired the old build server", namespace="alice", retention_tier="T3").id
    bob_old = remember("Bob retired the legacy mail relay", namespace="bob", retention_tier="T3").id
    assert expire(alice_old, bob_old) == 2
    rows = {
        "alice": [remember("Alice's deploy checklist lives in the team wiki", namespace="alice", retention_tier="T2").id,
                  remember("Alice prefers squash merges for small fixes", namespace="alice", retention_tier="T3").id],
        "bob": [remember("Bob's pager rotation starts on Mondays", namespace="bob", retention_tier="T1").id,
                remember("Bob ships the mobile app on Thursdays", namespace="bob", retention_tier="T3").id,
                remember("Bob's team uses trunk-based development", namespace="bob", retention_tier="T2").id],
    }
    category_set(namespace="alice", name="alice-stack", slot="architecture", content="Django", actor="test")
    category_set(namespace="bob", name="bob-stack", slot="architecture", content="Rails", actor="test")
    return {"live": rows, "archived": {"alice": alice_old, "bob": bob_old}}


def test_scoped_curator_sees_only_their_namespace(page: Page, live_server, charlie: User,
                                                  two_namespaces: dict[str, Any]) -> None:
    alice = two_namespaces["live"]["alice"]
    log_in(page, live_server.url, CHARLIE, CHARLIE_PASSWORD)

    # the dashboard: alice's numbers only, no backups
    expect(page.locator("#bhg-scope")).to_be_visible()
    assert table(page.locator("#bhg-namespaces")) == [["namespace", "T0", "T1", "T2", "T3", "total", "superseded"],
                                                      ["alice", "0", "0", "1", "1", "2", "0"]]
    assert [row[:2] for row in table(page.locator("#bhg-budgets"))] == [
        ["tier", "memories"], ["T0", "0"], ["T1", "0"], ["T2", "1"], ["T3", "1"], ["all", "2"]]
    assert chart_data(page, "bar")["datasets"][0]["data"] == [0, 0, 1, 1]
    audit = table(page.locator("#bhg-audit"))
    assert len(audit) > 1 and {row[2] for row in audit[1:]} == {"alice"}
    expect(page.locator("#bhg-backups a[href='/admin/retention/backuprecord/']")).to_have_count(0)
    expect(page.locator("#bhg-dashboard")).not_to_contain_text("bob")

    # the sidebar: no tokens, backups or users, and their URLs refuse him
    expect(sidebar_link(page, "memories", "memory")).to_have_count(1)
    store_wide = [("memories", "apitoken"), ("retention", "backuprecord"), ("auth", "user"), ("auth", "group")]
    for app, model in store_wide:
        expect(sidebar_link(page, app, model)).to_have_count(0)
    for app, model in store_wide:
        response = page.goto(f"{live_server.url}/admin/{app}/{model}/")
        assert response is not None and response.status == 403, (app, model, response and response.status)

    # memories: alice's only, and the namespace filter offers nothing else
    page.goto(f"{live_server.url}/admin/memories/memory/")
    assert result_ids(page) == set(alice)
    assert filter_choices(page, "By namespace") == ["alice"]
    page.goto(f"{live_server.url}/admin/memories/memory/?namespace__exact=bob")
    assert result_ids(page) == set()

    # the audit log, the archive, the categories
    page.goto(f"{live_server.url}/admin/memories/auditlog/")
    assert result_ids(page) == {str(pk) for pk in AuditLog.objects.filter(namespace="alice").values_list("pk", flat=True)}
    assert filter_choices(page, "By namespace") == ["alice"]
    page.goto(f"{live_server.url}/admin/retention/archivedmemory/")
    alice_archived = ArchivedMemory.objects.get(memory_id=two_namespaces["archived"]["alice"])
    assert result_ids(page) == {str(alice_archived.pk)}
    assert filter_choices(page, "By namespace") == ["alice"]
    page.goto(f"{live_server.url}/admin/categories/category/")
    expect(page.locator("#result_list")).to_contain_text("alice-stack")
    expect(page.locator("#result_list")).not_to_contain_text("bob-stack")
    expect(page.locator("body")).not_to_contain_text("Bob")


def test_scoped_curator_cannot_open_another_namespaces_pages_by_url(page: Page, live_server, charlie: User,
                                                                    two_namespaces: dict[str, Any]) -> None:
    """A change page of bob's memory, archive entry or audit row answers 404 (or 403) to alice's
    curator, and shows none of it."""
    bob_memory = two_namespaces["live"]["bob"][0]
    bob_archived = ArchivedMemory.objects.get(memory_id=two_namespaces["archived"]["bob"]).pk
    bob_audit = AuditLog.objects.filter(namespace="bob").first().pk
    log_in(page, live_server.url, CHARLIE, CHARLIE_PASSWORD)
    answers = {}
    for path in [f"/admin/memories/memory/{bob_memory}/change/", f"/admin/memories/memory/{bob_memory}/history/",
                 f"/admin/memories/memory/{bob_memory}/delete/", f"/admin/retention/archivedmemory/{bob_archived}/change/",
                 f"/admin/memories/auditlog/{bob_audit}/change/"]:
        answers[path] = status_without_redirect(page, f"{live_server.url}{path}")
        expect(page.locator("body")).not_to_contain_text("Bob")
    wrong = [f"{path}: HTTP {status}, ended at {landed}" for path, (status, landed) in answers.items()
             if status not in (403, 404)]
    assert not wrong, "; ".join(wrong)


def test_scoped_curator_cannot_read_another_namespaces_thread(page: Page, live_server, charlie: User,
                                                              hash_embedder) -> None:
    """The thread view is a memory list too: alice's curator must not read bob's conversation."""
    from memories.remember import RememberInput, thread_append

    thread_append(messages=[RememberInput(content="Bob: the launch code word is heron", namespace="bob",
                                          collection="general", thread="launch", speaker="Bob", message_id="b1")],
                  actor="test")
    log_in(page, live_server.url, CHARLIE, CHARLIE_PASSWORD)
    response = page.goto(f"{live_server.url}/admin/memories/memory/thread/?namespace=bob&thread=launch")
    assert response is not None
    expect(page.locator("body")).not_to_contain_text("heron")
    assert response.status in (403, 404) or page.locator("#thread-transcript tbody tr.turn").count() == 0


def test_scoped_curators_dashboard_counts_only_their_archive(page: Page, live_server, charlie: User,
                                                             two_namespaces: dict[str, Any]) -> None:
    """The dashboard's "Archive (n kept)" is a count of memories: for alice's curator, alice's."""
    bob_extra = remember("Bob's old VPN endpoint was vpn1", namespace="bob", retention_tier="T3").id
    assert expire(bob_extra) == 1  # bob has 2 archived memories, alice 1
    log_in(page, live_server.url, CHARLIE, CHARLIE_PASSWORD)
    expect(page.locator("#bhg-backups").get_by_role("link", name=re.compile(r"^Archive"))).to_have_text("Archive (1 kept)")


# --------------------------------------------------------------------------- a curator's namespaces, set by a superuser


def test_superuser_sets_a_curators_namespaces_on_the_user_page_and_it_is_audited(page: Page, live_server,
                                                                                 curator: User) -> None:
    dana = User.objects.create_user("dana", "dana@example.com", "dana's password", is_staff=True)
    log_in(page, live_server.url)
    sidebar_link(page, "auth", "user").click()
    page.locator("#result_list").get_by_role("link", name="dana", exact=True).click()
    expect(page).to_have_url(re.compile(rf"/admin/auth/user/{dana.pk}/change/$"))
    inline = page.locator("#curator_scope-group")
    expect(inline).to_contain_text("Namespaces this user curates")
    inline.get_by_role("link", name=re.compile(r"Add another")).click()

    page.fill("#id_curator_scope-0-namespaces", "alice bob")  # a space: not a namespace
    assert save(page).status == 200
    expect(page.locator(".field-namespaces .errorlist")).to_contain_text("not a valid namespace")
    assert not CuratorScope.objects.exists()
    assert not AuditLog.objects.filter(operation="CURATOR_SCOPE").exists()

    page.fill("#id_curator_scope-0-namespaces", "project/alpha, alice")
    assert save(page).status == 302
    expect(message(page, "was changed successfully")).to_be_visible()
    assert CuratorScope.objects.get(user=dana).namespaces == ["alice", "project/alpha"]
    assert curator_namespaces(User.objects.get(pk=dana.pk)) == frozenset({"alice", "project/alpha"})
    audit = AuditLog.objects.get(operation="CURATOR_SCOPE")
    assert (audit.client_id, audit.namespace) == (f"admin:{USERNAME}", "*")
    assert audit.details == {"user_id": dana.pk, "namespaces": ["alice", "project/alpha"]}

    page.goto(f"{live_server.url}/admin/auth/user/{dana.pk}/change/")  # shown as typed, and removable
    expect(page.locator("#id_curator_scope-0-namespaces")).to_have_value("alice,project/alpha")
    inline.locator("label").filter(has=page.locator("#id_curator_scope-0-DELETE")).click()  # its "delete" icon
    expect(page.locator("#id_curator_scope-0-DELETE")).to_be_checked()
    expect(inline.get_by_text("This item will be deleted.")).to_be_visible()
    assert save(page).status == 302
    assert not CuratorScope.objects.filter(user=dana).exists()
    last = AuditLog.objects.filter(operation="CURATOR_SCOPE").order_by("id").last()
    assert last.details == {"user_id": dana.pk, "namespaces": None}
    assert AuditLog.objects.filter(operation="CURATOR_SCOPE").count() == 2


# --------------------------------------------------------------------------- login throttling


def test_five_wrong_passwords_lock_the_login_even_for_the_right_one(page: Page, live_server, curator: User,
                                                                    screenshot: Screenshot) -> None:
    other = User.objects.create_superuser("erin", "erin@example.com", "erin's own password")
    for attempt in range(1, 6):
        submit_login(page, live_server.url, USERNAME, f"wrong password {attempt}")
        if attempt < 5:
            expect(page.locator(".errornote").filter(has_text="Please enter the correct username")).to_be_visible()

    page.goto(f"{live_server.url}/admin/login/?next=/admin/")
    response = submit_login_form(page, USERNAME, PASSWORD)  # the 6th attempt, with the right password
    assert response is not None and response.status in (403, 429), response and response.status
    expect(page.get_by_role("heading", name="Too many failed sign-ins")).to_be_visible()
    screenshot(page, "lockout")
    assert not any(cookie["name"] == "sessionid" for cookie in page.context.cookies())
    page.goto(f"{live_server.url}/admin/")
    expect(page).to_have_url(re.compile(r"/admin/login/\?next=/admin/$"))
    assert User.objects.get(username=USERNAME).last_login is None

    page.context.clear_cookies()  # the lock is for that username from this address, not for everyone
    log_in(page, live_server.url, other.username, "erin's own password")


# --------------------------------------------------------------------------- CJK text


CHINESE = "记忆服务器在欧洲西部运行"  # "the memory server runs in western Europe"


def platform_fonts(page: Page, selector: str) -> list[dict[str, Any]]:
    """The fonts Chromium drew a node's text with, and how many glyphs each (DevTools' "Rendered
    fonts"): a web font without CJK glyphs draws "tofu" boxes and is still listed."""
    cdp = page.context.new_cdp_session(page)
    cdp.send("DOM.enable")
    cdp.send("CSS.enable")
    root = cdp.send("DOM.getDocument", {"depth": -1})["root"]["nodeId"]
    node = cdp.send("DOM.querySelector", {"nodeId": root, "selector": selector})["nodeId"]
    fonts = cdp.send("CSS.getPlatformFontsForNode", {"nodeId": node})["fonts"]
    cdp.detach()
    return fonts


def test_chinese_memory_renders_with_real_glyphs_in_the_list(page: Page, live_server, curator: User, hash_embedder,
                                                             screenshot: Screenshot) -> None:
    """Needs a CJK font on the machine (fonts-noto-cjk, installed by .ci/run). Without one,
    Chromium draws each character as a narrow hex box in the page's Latin web font."""
    memory = remember(CHINESE, namespace="global")
    log_in(page, live_server.url)
    sidebar_link(page, "memories", "memory").click()
    link = page.locator("#result_list").get_by_role("link", name=CHINESE, exact=True)
    expect(link).to_have_text(CHINESE)
    selector = f'#result_list a[href="/admin/memories/memory/{memory.id}/change/"]'

    fonts = platform_fonts(page, selector)
    system_glyphs = sum(font["glyphCount"] for font in fonts if not font["isCustomFont"])
    assert system_glyphs == len(CHINESE), f"glyphs drawn by a system (CJK) font: {system_glyphs} of {len(CHINESE)}: {fonts}"

    # each character is full-width (1 em), as CJK glyphs are; tofu boxes are about half that
    width, font_size = link.evaluate("""a => {
        const range = document.createRange();
        range.selectNodeContents(a);
        const width = [...range.getClientRects()].reduce((sum, r) => sum + r.width, 0);
        return [width, parseFloat(getComputedStyle(a).fontSize)];
    }""")
    assert width >= 0.9 * len(CHINESE) * font_size, f"{width:.1f}px for {len(CHINESE)} characters at {font_size}px"
    shot = screenshot(page, "list")
    link.screenshot(path=str(shot.with_name(f"{shot.stem}-crop.png")))
