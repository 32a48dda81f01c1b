"""The hot endpoints answered on the ASGI level (bhgbrain_site.server.asgi_routes), over real HTTP:
the same headers, envelopes and access rules as through Django; everything else still Django's."""
from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.live_server import LiveServer

TOKEN = "fast-path-token-value"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SECURITY_HEADERS = {
    "content-type": "application/json", "x-frame-options": "DENY", "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin", "cross-origin-opener-policy": "same-origin",
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    live = LiveServer(home=tmp_path_factory.mktemp("fast"), env={"BHGBRAIN_TOKEN": TOKEN},
                      config={"security": {"rate_limit_rpm": 100_000}}).start()
    yield live
    live.stop()


def _code(response: httpx.Response, status: int) -> str:
    assert response.status_code == status, response.text
    return response.json()["error"]["code"]


def test_tool_calls_carry_the_security_headers_and_the_guards_headers(server: LiveServer) -> None:
    response = server.post("remember", {"content": "The fast path keeps Django's headers"}, headers=AUTH)
    assert response.status_code == 200, response.text
    for name, value in SECURITY_HEADERS.items():
        assert response.headers[name] == value, name
    assert int(response.headers["content-length"]) == len(response.content)
    assert response.headers["x-bhgbrain-worker"].isdigit() and "x-ratelimit-remaining" in response.headers
    assert response.json()["operation"] == "ADD"


def test_tokens_are_checked_on_tools_and_resources_but_not_health(server: LiveServer) -> None:
    assert _code(server.post("search", {"query": "fast"}), 401) == "AUTH_REQUIRED"
    assert _code(server.post("search", {"query": "fast"}, headers={"Authorization": "Bearer nope"}), 401) == "AUTH_REQUIRED"
    assert _code(httpx.get(server.url + "/resource", params={"uri": "memory://list"}), 401) == "AUTH_REQUIRED"
    listed = httpx.get(server.url + "/resource", params={"uri": "memory://list?limit=5"}, headers=AUTH)
    assert listed.status_code == 200 and listed.headers["x-content-type-options"] == "nosniff"
    assert httpx.get(server.url + "/health").status_code == 200


def test_wrong_methods_get_the_envelope(server: LiveServer) -> None:
    assert _code(httpx.get(server.url + "/tool/search", headers=AUTH), 405) == "INVALID_INPUT"
    assert _code(httpx.post(server.url + "/health"), 405) == "INVALID_INPUT"
    assert _code(httpx.post(server.url + "/resource", headers=AUTH), 405) == "INVALID_INPUT"
    head = httpx.head(server.url + "/health")
    assert head.status_code == 200 and head.content == b""


def test_bad_bodies_and_unknown_tools_get_the_envelope(server: LiveServer) -> None:
    assert _code(server.post("search", raw=b"{not json", headers=AUTH), 400) == "INVALID_INPUT"
    assert _code(server.post("no_such_tool", {}, headers=AUTH), 404) == "NOT_FOUND"
    empty = httpx.post(server.url + "/tool/search", headers=AUTH)  # no body: an empty object
    assert _code(empty, 400) == "INVALID_INPUT"


def test_rest_operation_views_keep_djangos_headers_access_rules_and_envelopes(server: LiveServer) -> None:
    created = httpx.post(server.url + "/api/memories/", json={"content": "REST on the fast path", "namespace": "fastrest"},
                         headers=AUTH)
    assert created.status_code == 201, created.text
    for name, value in SECURITY_HEADERS.items():
        assert created.headers[name] == value, name
    assert int(created.headers["content-length"]) == len(created.content) and "x-ratelimit-remaining" in created.headers
    memory_id = created.json()["id"]
    found = httpx.post(server.url + "/api/search/", json={"query": "fast path", "mode": "fulltext", "namespace": "fastrest"},
                       headers=AUTH)
    assert [hit["id"] for hit in found.json()["results"]] == [memory_id]
    assert httpx.get(server.url + f"/api/memories/{memory_id}/", params={"namespace": "fastrest"},
                     headers=AUTH).json()["content"] == "REST on the fast path"
    assert _code(httpx.post(server.url + "/api/search/", json={"query": "fast"}), 401) == "AUTH_REQUIRED"
    assert _code(httpx.post(server.url + "/api/search/", content=b"{not json", headers={**AUTH, "content-type": "application/json"}),
                 400) == "INVALID_INPUT"
    assert _code(httpx.post(server.url + "/api/search/", json={"query": "x", "surprise": 1}, headers=AUTH), 400) == "INVALID_INPUT"
    assert _code(httpx.get(server.url + "/api/memories/00000000-0000-0000-0000-000000000000/", headers=AUTH), 404) == "NOT_FOUND"
    assert _code(httpx.put(server.url + "/api/search/", json={"query": "x"}, headers=AUTH), 405) == "INVALID_INPUT"
    deleted = httpx.delete(server.url + f"/api/memories/{memory_id}/", params={"namespace": "fastrest"}, headers=AUTH)
    assert deleted.status_code == 200, deleted.text


def test_other_paths_are_still_djangos(server: LiveServer) -> None:
    assert _code(httpx.post(server.url + "/tool/search/extra", headers=AUTH), 404) == "NOT_FOUND"
    no_slash = httpx.get(server.url + "/api/collections", headers=AUTH)  # CommonMiddleware's APPEND_SLASH
    assert no_slash.status_code == 301 and no_slash.headers["location"].endswith("/api/collections/")
    schema = httpx.get(server.url + "/api/schema/", headers=AUTH)
    assert schema.status_code == 200 and b"openapi" in schema.content
    assert httpx.get(server.url + "/api/no-such-thing/", headers=AUTH).status_code == 404
    static = httpx.get(server.url + "/static/admin/css/base.css")
    assert static.status_code == 200 and static.headers["content-type"].startswith("text/css")


def test_health_is_a_snapshot_that_follows_this_servers_writes(server: LiveServer) -> None:
    first = httpx.get(server.url + "/health").json()
    assert "checked_at" in first and first["snapshot_age_ms"] >= 0
    server.post("remember", {"content": "Another memory for the health count, quite distinct"}, headers=AUTH)
    after = httpx.get(server.url + "/health").json()
    assert after["memory_count"] == first["memory_count"] + 1  # this server's write: never a stale count
