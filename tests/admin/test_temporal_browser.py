"""Facts over time in a real headless browser (issue 42): a curator supersedes a memory by a newer
one through the list action and its intermediate page, finds it under the filter "superseded",
reads the fact's timeline on both versions' pages (following the link from one to the other),
and sees the count on the dashboard. The finer cases: tests/admin/test_temporal_admin.py."""
from __future__ import annotations

import re
import uuid

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from memories.models import AuditLog, Memory
from tests.admin.conftest import Screenshot, log_in, message, open_filters, result_ids, results
from tests.admin.test_curation_browser import ACTOR, LIST, act_on, action_page
from tests.conftest import remember

pytestmark = pytest.mark.django_db(transaction=True)  # the server thread must see committed rows

SUPERSEDE = "Supersede by a newer memory…"


def _timeline(page: Page) -> list[tuple[str, str]]:
    items = page.locator("#bhg-timeline li")
    return [tuple(pair) for pair in items.evaluate_all("items => items.map(li => [li.dataset.id, li.dataset.state])")]


def test_a_curator_supersedes_a_fact_then_reads_its_timeline(page: Page, live_server, curator: User, hash_embedder,
                                                             screenshot: Screenshot) -> None:
    kong = remember("The API gateway is Kong", namespace="alice").id
    envoy = remember("We moved the API gateway to Envoy", namespace="alice").id
    other = remember("The design system uses an 8 px grid", namespace="alice").id
    log_in(page, live_server.url)
    act_on(page, live_server.url, SUPERSEDE, kong)

    apply = action_page(page, "supersede_by", [kong], "Supersede")
    assert Memory.objects.get(pk=kong).superseded_by is None  # nothing before the successor is named
    page.fill("#id_successor", kong)
    apply.click()
    expect(page.locator(".errorlist")).to_contain_text("cannot supersede itself")
    page.fill("#id_successor", envoy)
    screenshot(page, "successor")
    page.locator("#bhg-action-apply").click()

    expect(page).to_have_url(re.compile(rf"{LIST}$"))
    expect(message(page, "Superseded by «We moved the API gateway to Envoy»: 1 memory.")).to_be_visible()
    closed = Memory.objects.get(pk=kong)
    assert closed.superseded_by == uuid.UUID(envoy)
    assert AuditLog.objects.get(operation="SUPERSEDE", memory_id=kong).client_id == ACTOR

    open_filters(page).get_by_role("link", name="superseded (history)").click()
    expect(page).to_have_url(re.compile(r"fact=superseded"))
    expect(results(page)).to_have_count(1)
    assert result_ids(page) == {kong}
    page.goto(f"{live_server.url}{LIST}?fact=current")
    expect(results(page)).to_have_count(2)
    assert result_ids(page) == {envoy, other}

    page.goto(f"{live_server.url}{LIST}{kong}/change/")
    timeline = page.locator("#bhg-timeline")
    expect(timeline).to_have_attribute("data-versions", "2")
    assert _timeline(page) == [(kong, "superseded"), (envoy, "current")]
    expect(timeline.locator("li[data-this]")).to_have_attribute("data-id", kong)
    expect(timeline.locator(f'li[data-id="{kong}"]')).to_contain_text(f"superseded by {envoy}, explicit, by {ACTOR}")
    screenshot(page, "timeline")
    timeline.get_by_role("link", name="We moved the API gateway to Envoy").click()
    expect(page).to_have_url(re.compile(rf"/{envoy}/change/$"))
    expect(page.locator("#bhg-timeline li[data-this]")).to_have_attribute("data-id", envoy)  # the new page is in
    assert _timeline(page) == [(kong, "superseded"), (envoy, "current")]

    page.goto(f"{live_server.url}/admin/")
    expect(page.locator("#bhg-superseded-total")).to_have_text("Superseded facts kept as history: 1")
    expect(page.locator("#bhg-namespaces .bhg-superseded")).to_have_text("1")
