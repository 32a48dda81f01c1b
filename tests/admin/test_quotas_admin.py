"""Namespace quotas in the console (Django's test client): a superuser sets and resets a namespace's
quota, audited, and it takes effect at once; staff, even with every Django permission on the model,
see quotas read-only and only for the namespaces they curate; the dashboard shows each namespace's
use against its quota, with edit links for a superuser only."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from bhgbrain_site.core.config import NamespaceQuotaConfig
from bhgbrain_site.core.errors import QuotaExceeded
from memories.models import AuditLog, CuratorScope, NamespaceQuota
from tests.admin.conftest import client_for
from tests.conftest import remember

pytestmark = pytest.mark.django_db

QUOTAS = "/admin/memories/namespacequota/"
FORM = {"max_memories": "2", "t0_budget": "", "t1_budget": "", "t2_budget": "", "t3_budget": "1",
        "on_quota_exceeded": "reject"}


@pytest.fixture
def staff() -> Client:
    """Staff curating alice, with every permission Django has on quotas (add, change, delete, view)."""
    user = User.objects.create_user("staff", "staff@example.com", "pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__model="namespacequota"))
    user.user_permissions.add(*Permission.objects.filter(codename="view_memory"))
    CuratorScope.objects.create(user=user, namespaces=["alice"])
    return client_for(user)


def test_a_superuser_sets_a_quota_that_applies_at_once_and_resets_it(root: Client, hash_embedder, bhg_config) -> None:
    bhg_config.namespaces = {"alice": NamespaceQuotaConfig(max_memories=5, on_quota_exceeded="trim")}
    form = root.get(f"{QUOTAS}add/?namespace=alice")
    assert form.status_code == 200
    assert form.context["adminform"].form.initial["max_memories"] == 5  # starts from the config's quota
    saved = root.post(f"{QUOTAS}add/", {"namespace": "alice", **FORM})
    assert saved.status_code == 302, saved.content[:2000]
    row = NamespaceQuota.objects.get(namespace="alice")
    assert (row.max_memories, row.t3_budget, row.on_quota_exceeded, row.updated_by) == (2, 1, "reject", "admin:root")
    assert AuditLog.objects.get(operation="QUOTA_SET").details["after"]["max_memories"] == 2
    remember("alice note one", namespace="alice")
    remember("alice note two", namespace="alice")
    with pytest.raises(QuotaExceeded):
        remember("alice note three", namespace="alice")
    zero = root.post(f"{QUOTAS}{row.pk}/change/", {**FORM, "max_memories": "0"})
    assert zero.status_code == 200 and "at least 1" in zero.content.decode()
    assert root.post(f"{QUOTAS}{row.pk}/delete/", {"post": "yes"}).status_code == 302
    assert not NamespaceQuota.objects.exists() and AuditLog.objects.filter(operation="QUOTA_RESET").count() == 1
    assert remember("alice note three", namespace="alice").operation == "ADD"  # the config's 5 again


def test_staff_see_quotas_read_only_and_only_their_namespaces(staff: Client, root: Client) -> None:
    for namespace in ("alice", "bob"):
        root.post(f"{QUOTAS}add/", {"namespace": namespace, **FORM})
    alice, bob = (NamespaceQuota.objects.get(namespace=n) for n in ("alice", "bob"))
    listing = staff.get(QUOTAS)
    assert listing.status_code == 200
    assert [r.namespace for r in listing.context["cl"].result_list] == ["alice"]
    page = staff.get(f"{QUOTAS}{alice.pk}/change/")
    assert page.status_code == 200 and page.context["has_change_permission"] is False
    assert staff.post(f"{QUOTAS}{alice.pk}/change/", {**FORM, "max_memories": "900"}).status_code == 403
    assert staff.post(f"{QUOTAS}add/", {"namespace": "alice", **FORM}).status_code == 403
    assert staff.post(f"{QUOTAS}{alice.pk}/delete/", {"post": "yes"}).status_code == 403
    assert staff.get(f"{QUOTAS}{bob.pk}/change/").status_code == 404
    assert NamespaceQuota.objects.get(namespace="alice").max_memories == 2


def test_the_dashboard_shows_quota_use_with_edit_links_for_a_superuser_only(root: Client, staff: Client,
                                                                             hash_embedder, bhg_config) -> None:
    bhg_config.namespaces = {"alice": NamespaceQuotaConfig(max_memories=3),
                             "bob": NamespaceQuotaConfig(tier_budgets={"T2": 1})}
    remember("alice keeps one note", namespace="alice")
    remember("bob keeps one note", namespace="bob")
    board = root.get("/admin/").content.decode()
    assert 'id="bhg-quotas"' in board
    rows = {row["namespace"]: row for row in root.get("/admin/").context["quota_rows"]}
    assert rows["alice"]["total"] == {"used": 1, "limit": 3} and rows["alice"]["state"] == "ok"
    assert rows["bob"]["tiers"]["T2"] == {"used": 1, "limit": 1} and rows["bob"]["state"] == "at_limit"
    assert rows["alice"]["edit"] == f"{QUOTAS}add/?namespace=alice"
    seen = staff.get("/admin/").context["quota_rows"]
    assert [row["namespace"] for row in seen] == ["alice"] and seen[0]["edit"] is None
