"""Facts over time over REST (in process): remember with key / supersedes / valid_from, GET
/api/memories/{id}/history/, the temporal fields of get and list, errors in the envelope, scoped
tokens that never see another namespace's chain, and the OpenAPI schema."""
from __future__ import annotations

import json
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

from memories.api_tokens import token_create
from memories.models import Memory

pytestmark = pytest.mark.django_db

KEY = "gateway/product"


def _call(client: Client, method: str, path: str, body: Any = None, **headers: str) -> tuple[int, dict[str, Any]]:
    kwargs = {"data": json.dumps(body), "content_type": "application/json"} if body is not None else {}
    response = getattr(client, method)(path, **kwargs, **headers)
    return response.status_code, response.json()


@pytest.fixture
def client(hash_embedder) -> Client:  # noqa: ANN001
    return Client()


def _chain(client: Client, namespace: str = "rest") -> tuple[str, str, str]:
    ns = {"namespace": namespace}
    _, kong = _call(client, "post", "/api/memories/", {"content": "The API gateway is Kong", "key": KEY,
                                                       "valid_from": "2026-01-10", **ns})
    _, envoy = _call(client, "post", "/api/memories/", {"content": "We moved the API gateway to Envoy", "key": KEY,
                                                        "valid_from": "2026-03-01T12:00:00Z", **ns})
    _, late = _call(client, "post", "/api/memories/", {"content": "The API gateway ran on Tyk for a while",
                                                       "key": KEY, "valid_from": "2026-02-01", **ns})
    return kong["id"], late["id"], envoy["id"]


def test_history_lists_the_versions_with_validity_and_reasons(client: Client) -> None:
    kong, tyk, envoy = _chain(client)
    status, body = _call(client, "get", f"/api/memories/{kong}/history/?namespace=rest")
    assert status == 200
    assert (body["id"], body["key"], body["current_id"]) == (kong, KEY, envoy)
    versions = body["versions"]
    assert [v["id"] for v in versions] == [kong, tyk, envoy]
    assert [(v["valid_from"], v["valid_until"]) for v in versions] == [
        ("2026-01-10T00:00:00Z", "2026-02-01T00:00:00Z"),
        ("2026-02-01T00:00:00Z", "2026-03-01T12:00:00Z"),
        ("2026-03-01T12:00:00Z", None),
    ]
    assert [v["current"] for v in versions] == [False, False, True]
    assert versions[0]["superseded"]["reason"] == "key" and versions[1]["superseded"]["late"] is True
    assert versions[2]["superseded"] is None
    shown = _call(client, "get", f"/api/memories/{kong}/?namespace=rest")[1]
    assert (shown["superseded_by"], shown["current"], shown["key"]) == (tyk, False, KEY)


def test_remember_supersedes_one_id_or_a_list(client: Client) -> None:
    ns = {"namespace": "rest"}
    _, a = _call(client, "post", "/api/memories/", {"content": "Standups are at 9:30", **ns})
    _, b = _call(client, "post", "/api/memories/", {"content": "Standups are on Slack huddles", **ns})
    status, c = _call(client, "post", "/api/memories/", {"content": "Standups moved to 10:00 in the big room",
                                                         "supersedes": [a["id"], b["id"]], **ns})
    assert status == 201 and sorted(c["superseded"]) == sorted([a["id"], b["id"]]) and c["current"] is True
    _, d = _call(client, "post", "/api/memories/", {"content": "Standups are cancelled in August",
                                                    "supersedes": c["id"], **ns})
    assert d["superseded"] == [c["id"]]
    history = _call(client, "get", f"/api/memories/{d['id']}/history/?namespace=rest")[1]
    assert {v["id"] for v in history["versions"]} == {a["id"], b["id"], c["id"], d["id"]}
    assert history["versions"][-1]["id"] == d["id"]


@pytest.mark.parametrize(("body", "status", "code", "field"), [
    ({"valid_from": "last tuesday"}, 400, "INVALID_INPUT", "valid_from"),
    ({"key": "k" * 201}, 400, "INVALID_INPUT", "key"),
    ({"key": "   "}, 400, "INVALID_INPUT", "key"),
    ({"supersedes": "not-a-uuid"}, 400, "INVALID_INPUT", "supersedes"),
    ({"supersedes": "00000000-0000-4000-8000-000000000000"}, 404, "NOT_FOUND", "supersedes"),
    ({"supersedes": [f"00000000-0000-4000-8000-{i:012d}" for i in range(101)]}, 400, "INVALID_INPUT", "supersedes"),
    ({"thread": "t1", "key": KEY}, 400, "INVALID_INPUT", "key"),
])
def test_bad_input_answers_the_envelope(client: Client, body: dict[str, Any], status: int, code: str, field: str) -> None:
    got, answer = _call(client, "post", "/api/memories/", {"content": "The gateway is Envoy", "namespace": "rest", **body})
    assert (got, answer["error"]["code"]) == (status, code), answer
    assert field in answer["error"]["message"]


def test_a_memory_cannot_supersede_itself(client: Client) -> None:
    _, first = _call(client, "post", "/api/memories/", {"content": "The gateway is Envoy", "namespace": "rest"})
    status, body = _call(client, "post", "/api/memories/", {"content": "The gateway is Envoy", "namespace": "rest",
                                                            "supersedes": first["id"]})
    assert (status, body["error"]["code"]) == (400, "INVALID_INPUT") and "itself" in body["error"]["message"]


def test_history_errors(client: Client) -> None:
    status, body = _call(client, "get", "/api/memories/not-a-uuid/history/")
    assert (status, body["error"]["code"]) == (400, "INVALID_INPUT")
    status, body = _call(client, "get", "/api/memories/00000000-0000-4000-8000-000000000000/history/")
    assert (status, body["error"]["code"]) == (404, "NOT_FOUND")


def test_a_scoped_token_never_sees_another_namespaces_chain(client: Client) -> None:
    kong, _tyk, envoy = _chain(client, namespace="alice")
    _, bob_token = token_create(name="bob", namespaces=["bob"], read_only=False)
    bob = {"HTTP_AUTHORIZATION": f"Bearer {bob_token}"}
    for path in (f"/api/memories/{kong}/history/", f"/api/memories/{kong}/history/?namespace=bob"):
        status, body = _call(client, "get", path, **bob)
        assert status == 404 and body["error"]["code"] == "NOT_FOUND", body
        assert "Kong" not in json.dumps(body)
    status, body = _call(client, "get", f"/api/memories/{kong}/history/?namespace=alice", **bob)
    assert status == 403, body
    status, body = _call(client, "post", "/api/memories/", {"content": "Bob's gateway is Traefik", "supersedes": envoy}, **bob)
    assert (status, body["error"]["code"]) == (404, "NOT_FOUND")
    status, mine = _call(client, "post", "/api/memories/", {"content": "Bob's gateway is Traefik", "key": KEY}, **bob)
    assert status == 201 and mine["key"] == KEY and "superseded" not in mine  # nothing of alice's closed
    assert Memory.objects.get(pk=envoy).superseded_by is None


def test_the_openapi_schema_is_valid() -> None:
    out = StringIO()
    call_command("spectacular", "--validate", "--fail-on-warn", stdout=out)
    schema = out.getvalue()
    assert "/api/memories/{memory_id}/history/" in schema and "MemoryHistory" in schema
