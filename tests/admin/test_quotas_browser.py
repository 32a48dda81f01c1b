"""Namespace quotas in a real headless browser (Debian's Chromium driven by Playwright): a
superuser follows the dashboard's "edit" link of a namespace, sets its quota in the form, and the
next write over it is refused; the dashboard then shows the namespace at its limit."""
from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import Page, expect

from bhgbrain_site.core.config import NamespaceQuotaConfig
from bhgbrain_site.core.errors import QuotaExceeded
from memories.models import AuditLog, Memory, NamespaceQuota
from tests.admin.conftest import log_in, save
from tests.conftest import remember

pytestmark = pytest.mark.django_db(transaction=True)  # the server thread must see committed rows


def test_a_superuser_sets_a_quota_from_the_dashboard_and_the_next_write_is_refused(
        page: Page, live_server, curator: User, hash_embedder, bhg_config) -> None:
    bhg_config.namespace_defaults = NamespaceQuotaConfig(max_memories=50)  # every namespace is listed
    remember("alice keeps her first note", namespace="alice")
    remember("alice keeps a second note", namespace="alice")
    log_in(page, live_server.url)
    row = page.locator("#bhg-quotas tr").filter(has=page.get_by_role("link", name="alice", exact=True))
    expect(row).to_contain_text("2 / 50")
    row.get_by_role("link", name="edit").click()
    expect(page).to_have_url(re.compile(r"/admin/memories/namespacequota/add/\?namespace=alice$"))
    expect(page.locator("#id_max_memories")).to_have_value("50")  # starts from the config's quota
    page.locator("#id_max_memories").fill("2")
    page.locator("#id_on_quota_exceeded").select_option("reject")
    assert save(page).status == 302

    quota = NamespaceQuota.objects.get(namespace="alice")
    assert (quota.max_memories, quota.on_quota_exceeded, quota.updated_by) == (2, "reject", f"admin:{curator.username}")
    assert AuditLog.objects.get(operation="QUOTA_SET").details["after"]["max_memories"] == 2
    with pytest.raises(QuotaExceeded):
        remember("alice tries a third note", namespace="alice")
    assert Memory.objects.filter(namespace="alice").count() == 2

    page.goto(f"{live_server.url}/admin/")
    row = page.locator("#bhg-quotas tr").filter(has=page.get_by_role("link", name="alice", exact=True))
    expect(row).to_contain_text("2 / 2")
    expect(row).to_contain_text("at limit")
    expect(row).to_contain_text("reject")
