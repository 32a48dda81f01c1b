"""Facts over time in the console (issue 42), through the admin's URLs (Django's test client): a
fact's timeline on its page (live and archived versions, validity, who superseded each and why),
the list filter current / superseded, the action "Supersede by a newer memory…" and its checks
(same namespace, the curator's namespaces only, never itself), and the dashboard's count of
superseded facts per namespace. The browser: tests/admin/test_temporal_browser.py."""
from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime

import pytest
from django.test import Client

from memories.models import AuditLog, Memory
from memories.temporal import supersede
from retention.archive import memory_archive
from tests.admin.conftest import client_for
from tests.admin.test_curation import _staff, act, apply, notes
from tests.conftest import remember

pytestmark = pytest.mark.django_db

LIST = "/admin/memories/memory/"
JAN, MAR, MAY = (datetime(2026, month, 1, tzinfo=UTC) for month in (1, 3, 5))


def _listed(response) -> set[str]:  # noqa: ANN001
    return {str(m.pk) for m in response.context["cl"].result_list}


def _timeline(client: Client, memory_id: str) -> list[tuple[str, str]]:
    """(id, state) of each version the memory's page shows, top to bottom."""
    html = client.get(f"{LIST}{memory_id}/change/").content.decode()
    return re.findall(r'<li data-id="([0-9a-f-]{36})" data-state="(\w+)"', html)


@pytest.fixture
def homes(hash_embedder) -> dict[str, str]:
    """Alice's home city over time (a key: Lyon in March, Berlin in May, Paris a late arrival for
    January), and one unrelated memory."""
    return {
        "lyon": remember("Alice lives in Lyon", namespace="alice", key="alice/home-city", valid_from=MAR).id,
        "berlin": remember("Alice lives in Berlin", namespace="alice", key="alice/home-city", valid_from=MAY).id,
        "paris": remember("Alice lives in Paris", namespace="alice", key="alice/home-city", valid_from=JAN).id,
        "other": remember("Alice plays the cello", namespace="alice").id,
    }


def test_a_memorys_page_shows_its_facts_timeline_with_the_archived_versions(root: Client, homes: dict[str, str]) -> None:
    kong = remember("The API gateway is Kong", namespace="alice").id
    envoy = remember("We moved the API gateway to Envoy", namespace="alice").id
    mesh = remember("The gateway runs in the service mesh", namespace="alice").id
    supersede(older=[uuid.UUID(kong)], newer=uuid.UUID(envoy), actor="admin:someone")
    supersede(older=[uuid.UUID(envoy)], newer=uuid.UUID(mesh), actor="agent-7")
    memory_archive(memory_id=envoy, actor="test", namespace="alice")  # kong goes with it

    assert _timeline(root, homes["lyon"]) == [(homes["paris"], "superseded"), (homes["lyon"], "superseded"),
                                              (homes["berlin"], "current")]
    assert _timeline(root, mesh) == [(kong, "archived"), (envoy, "archived"), (mesh, "current")]
    page = root.get(f"{LIST}{homes['paris']}/change/").content.decode()
    assert f"superseded by <code>{homes['lyon']}</code>, key, by test" in page
    assert "2026-01-01 00:00 → 2026-03-01 00:00" in page and "2026-05-01 00:00 → open" in page
    page = root.get(f"{LIST}{mesh}/change/").content.decode()
    assert f"superseded by <code>{mesh}</code>, explicit, by agent-7" in page
    assert "One version" in root.get(f"{LIST}{homes['other']}/change/").content.decode()


def test_the_list_filters_current_and_superseded_facts(root: Client, homes: dict[str, str]) -> None:
    assert _listed(root.get(LIST, {"fact": "current"})) == {homes["berlin"], homes["other"]}
    assert _listed(root.get(LIST, {"fact": "superseded"})) == {homes["paris"], homes["lyon"]}
    assert len(_listed(root.get(LIST))) == 4


def test_supersede_action_asks_for_the_successor_then_closes_the_selection(root: Client, hash_embedder) -> None:
    kong = remember("The API gateway is Kong", namespace="alice").id
    tyk = remember("The internal gateway is Tyk", namespace="alice").id
    envoy = remember("We moved the API gateway to Envoy", namespace="alice").id

    page = act(root, "supersede_by", [kong, tyk])
    assert page.status_code == 200 and b'id="bhg-action-page"' in page.content and b'name="successor"' in page.content

    response = apply(root, "supersede_by", [kong, tyk], successor=envoy)

    assert response.status_code == 302
    assert notes(response) == ["Superseded by «We moved the API gateway to Envoy»: 2 memories."]
    successor = Memory.objects.get(pk=envoy)
    for old in (kong, tyk):
        closed = Memory.objects.get(pk=old)
        assert (closed.superseded_by, closed.valid_until) == (uuid.UUID(envoy), successor.valid_from)
        audit = AuditLog.objects.get(operation="SUPERSEDE", memory_id=old)
        assert (audit.client_id, audit.details["successor"], audit.details["reason"]) == ("admin:root", envoy, "explicit")
    assert successor.superseded_by is None
    again = apply(root, "supersede_by", [kong], successor=envoy)
    assert notes(again)[-1] == "1 memory left as they were: already superseded by it."  # (the first, unread, before it)


@pytest.mark.parametrize("case", ["other_namespace", "itself", "not_a_uuid", "unknown"])
def test_supersede_action_refuses_a_bad_successor_and_changes_nothing(root: Client, hash_embedder, case: str) -> None:
    old = remember("The API gateway is Kong", namespace="alice").id
    bobs = remember("Bob's gateway is Traefik", namespace="bob").id
    successor = {"other_namespace": bobs, "itself": old, "not_a_uuid": "kong", "unknown": str(uuid.uuid4())}[case]
    expected = {"other_namespace": "a fact is superseded within its namespace", "itself": "cannot supersede itself",
                "not_a_uuid": "must be a UUID", "unknown": "among the namespaces you curate"}[case]

    response = apply(root, "supersede_by", [old], successor=successor)

    assert response.status_code == 200 and b'class="errorlist"' in response.content
    assert expected in response.content.decode()
    assert Memory.objects.get(pk=old).superseded_by is None and not AuditLog.objects.filter(operation="SUPERSEDE").exists()


def test_a_limited_curator_cannot_name_or_supersede_another_namespaces_memory(hash_embedder) -> None:
    alice = client_for(_staff("alice-curator", ["alice"]))
    mine = remember("Alice's gateway is Kong", namespace="alice").id
    newer = remember("Alice moved the gateway to Envoy", namespace="alice").id
    theirs = remember("Bob's gateway is Traefik", namespace="bob").id
    bobs_newer = remember("Bob moved the gateway to Caddy", namespace="bob").id

    named = apply(alice, "supersede_by", [mine], successor=bobs_newer)
    assert "among the namespaces you curate" in named.content.decode()
    posted = apply(alice, "supersede_by", [theirs], successor=newer)  # bob's id posted by hand selects nothing
    assert posted.status_code in (200, 302)
    assert Memory.objects.get(pk=theirs).superseded_by is None and Memory.objects.get(pk=mine).superseded_by is None
    assert alice.get(f"{LIST}{theirs}/change/").status_code == 404  # nor its timeline


def test_the_dashboard_counts_superseded_facts_per_namespace(root: Client, homes: dict[str, str]) -> None:
    old = remember("Bob's gateway is Traefik", namespace="bob").id
    new = remember("Bob moved the gateway to Caddy", namespace="bob").id
    supersede(older=[uuid.UUID(old)], newer=uuid.UUID(new), actor="test")

    board = root.get("/admin/").context["board"]
    assert board.superseded == {"alice": 2, "bob": 1} and board.superseded_total == 3
    html = root.get("/admin/").content.decode()
    assert "Superseded facts kept as history: 3" in html and "fact=superseded" in html

    scoped = client_for(_staff("alice-curator", ["alice"])).get("/admin/").context["board"]
    assert scoped.superseded == {"alice": 2} and scoped.superseded_total == 2
