"""The REST API under /api/ over real HTTP, its OpenAPI schema, and schemathesis fuzzing for 5xx."""
from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.live_server import LiveServer


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    live = LiveServer(home=tmp_path_factory.mktemp("api"), config={"security": {"rate_limit_rpm": 1_000_000}}).start()
    yield live
    live.stop()


def test_memories_crud_and_filters(api: LiveServer) -> None:
    url = api.url + "/api"
    fact = "REST: the ledger service uses event sourcing"
    created = httpx.post(f"{url}/memories/", json={"content": fact, "tags": ["ledger"], "namespace": "rest"})
    assert created.status_code == 201 and created.json()["operation"] == "ADD"
    memory_id = created.json()["id"]
    assert httpx.post(f"{url}/memories/", json={"content": fact, "namespace": "rest"}).status_code == 200
    page = httpx.get(f"{url}/memories/", params={"namespace": "rest", "limit": 1, "tag": "ledger"}).json()
    assert page["items"][0]["id"] == memory_id and page["total_results"] == 1
    assert httpx.get(f"{url}/memories/", params={"namespace": "rest", "tier": "T0"}).json()["items"] == []
    assert httpx.get(f"{url}/memories/{memory_id}/", params={"namespace": "rest"}).json()["id"] == memory_id
    tagged = httpx.post(f"{url}/memories/{memory_id}/tags/", json={"add": ["events"], "namespace": "rest"}).json()
    assert tagged["tags"] == ["ledger", "events"]
    found = httpx.post(f"{url}/search/", json={"query": "event sourcing", "namespace": "rest"}).json()["results"]
    assert found[0]["id"] == memory_id
    recalled = httpx.post(f"{url}/recall/", json={"query": "how does the ledger store changes?", "namespace": "rest"}).json()
    assert recalled["results"][0]["id"] == memory_id
    audit = httpx.get(f"{url}/audit/", params={"namespace": "rest"}).json()["entries"]
    assert [e["operation"] for e in audit][:2] == ["TAG", "ADD"]
    assert httpx.delete(f"{url}/memories/{memory_id}/", params={"namespace": "rest"}).json() == {"deleted": True, "id": memory_id}
    gone = httpx.get(f"{url}/memories/{memory_id}/", params={"namespace": "rest"})
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "NOT_FOUND"


def test_search_and_recall_as_of_and_with_history(api: LiveServer) -> None:
    url = api.url + "/api"
    ids = []
    for content, since in (("REST: the build runs on Jenkins", "2026-01-05"), ("REST: the build moved to GitHub Actions",
                                                                                "2026-03-10T09:30:00Z")):
        created = httpx.post(f"{url}/memories/", json={"content": content, "key": "ci/runner", "valid_from": since,
                                                       "namespace": "rest-time"})
        assert created.status_code == 201, created.text
        ids.append(created.json()["id"])
    jenkins, actions = ids
    body = {"query": "where does the build run?", "namespace": "rest-time"}
    now = httpx.post(f"{url}/search/", json=body).json()["results"]
    assert [(r["id"], r["current"], r["key"]) for r in now] == [(actions, True, "ci/runner")]
    then = httpx.post(f"{url}/search/", json={**body, "as_of": "2026-02-01"}).json()["results"]
    assert [(r["id"], r["superseded_by"]) for r in then] == [(jenkins, actions)]
    history = httpx.post(f"{url}/search/", json={**body, "include_history": True}).json()["results"]
    assert [r["id"] for r in history] == [actions, jenkins]
    recalled = httpx.post(f"{url}/recall/", json={**body, "as_of": "2026-02-01", "min_score": 0}).json()["results"]
    assert [r["id"] for r in recalled] == [jenkins]
    tool = httpx.post(api.url + "/tool/search", json={**body, "as_of": "2026-03-10"}).json()["results"]
    assert [r["id"] for r in tool] == [actions]  # a bare date: the end of that day


def test_collections_and_categories(api: LiveServer) -> None:
    url = api.url + "/api"
    assert httpx.post(f"{url}/collections/", json={"name": "decisions", "namespace": "rest2"}).status_code == 201
    httpx.post(f"{url}/memories/", json={"content": "We chose Postgres", "collection": "decisions", "namespace": "rest2"})
    listing = httpx.get(f"{url}/collections/", params={"namespace": "rest2"}).json()
    assert {"name": "decisions", "count": 1} in listing["collections"]
    conflict = httpx.delete(f"{url}/collections/decisions/", params={"namespace": "rest2"})
    assert conflict.status_code == 409 and conflict.json()["error"]["code"] == "CONFLICT"
    deleted = httpx.delete(f"{url}/collections/decisions/", params={"namespace": "rest2", "force": "true"}).json()
    assert deleted["deleted_memory_count"] == 1
    values = {"name": "values", "slot": "company-values", "content": "Safety first", "namespace": "rest2"}
    category = httpx.post(f"{url}/categories/", json=values)
    assert category.json()["revision"] == 1
    assert httpx.get(f"{url}/categories/values/", params={"namespace": "rest2"}).json()["content"] == "Safety first"
    assert httpx.get(f"{url}/categories/", params={"namespace": "rest2"}).json()["categories"][0]["name"] == "values"
    assert httpx.delete(f"{url}/categories/values/", params={"namespace": "rest2"}).json() == {"ok": True, "name": "values"}


def test_backups_create_list_restore(api: LiveServer) -> None:
    url = api.url + "/api"
    memory = httpx.post(f"{url}/memories/", json={"content": "REST backup: the cache TTL is 300 seconds", "namespace": "rest-bk"}).json()
    created = httpx.post(f"{url}/backups/")
    assert created.status_code == 201
    path = created.json()["path"]
    assert path in [b["path"] for b in httpx.get(f"{url}/backups/").json()["backups"]]
    httpx.delete(f"{url}/memories/{memory['id']}/", params={"namespace": "rest-bk"})
    restored = httpx.post(f"{url}/backups/restore/", json={"path": path})
    assert restored.status_code == 200 and restored.json()["activated"] is True
    assert httpx.get(f"{url}/memories/{memory['id']}/", params={"namespace": "rest-bk"}).status_code == 200
    for body, status, code in (({}, 400, "INVALID_INPUT"), ({"path": "/etc/passwd"}, 400, "INVALID_INPUT"),
                               ({"path": path[:-5] + "-missing.bhgb"}, 404, "NOT_FOUND"), ([1], 400, "INVALID_INPUT")):
        refused = httpx.post(f"{url}/backups/restore/", json=body)
        assert refused.status_code == status and refused.json()["error"]["code"] == code, body


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "code"),
    [
        ("POST", "/api/memories/", {"content": "x", "nope": 1}, 400, "INVALID_INPUT"),
        ("POST", "/api/memories/", [1, 2], 400, "INVALID_INPUT"),
        ("POST", "/api/search/", {"query": ""}, 400, "INVALID_INPUT"),
        ("GET", "/api/memories/?limit=0", None, 400, "INVALID_INPUT"),
        ("GET", "/api/memories/?cursor=garbage", None, 400, "INVALID_INPUT"),
        ("GET", "/api/memories/not-a-uuid/", None, 400, "INVALID_INPUT"),
        ("GET", "/api/nowhere/", None, 404, "NOT_FOUND"),
        ("PUT", "/api/search/", {"query": "x"}, 405, "INVALID_INPUT"),
        ("POST", "/api/search/", {"query": "x", "as_of": "last winter"}, 400, "INVALID_INPUT"),
        ("POST", "/api/recall/", {"query": "x", "as_of": "2026-02-30"}, 400, "INVALID_INPUT"),
        ("POST", "/api/search/", {"query": "x", "include_history": "yes"}, 400, "INVALID_INPUT"),
        ("POST", "/tool/search", {"query": "x", "as_of": "2026-13-01"}, 400, "INVALID_INPUT"),
        ("POST", "/tool/recall", {"query": "x", "as_of": 10**30}, 400, "INVALID_INPUT"),
    ],
)
def test_errors_use_the_envelope(api: LiveServer, method: str, path: str, body: object, status: int, code: str) -> None:
    response = httpx.request(method, api.url + path, json=body)
    assert response.status_code == status, response.text
    assert response.json()["error"]["code"] == code


def test_schema_and_swagger_ui_are_served_offline(api: LiveServer) -> None:
    schema = httpx.get(api.url + "/api/schema/", headers={"accept": "application/json"})
    assert schema.status_code == 200
    paths = schema.json()["paths"]
    assert {"/api/memories/", "/api/search/", "/api/recall/", "/api/categories/", "/api/collections/", "/api/audit/"} <= set(paths)
    docs = httpx.get(api.url + "/api/docs/")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()
    asset = [line for line in docs.text.split('"') if line.endswith("swagger-ui-bundle.js")][0]
    assert httpx.get(api.url + asset).status_code == 200  # bundled, not from a CDN


HTTP_METHODS = {"get", "put", "post", "delete", "patch", "head", "options", "trace"}


def test_schemathesis_finds_no_server_error(api: LiveServer) -> None:
    """Property-based fuzzing of every operation in /api/schema/: no response may be a 5xx."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    cli = shutil.which("schemathesis", path=str(Path(sys.executable).parent)) or "schemathesis"
    proc = subprocess.run(
        [cli, "run", api.url + "/api/schema/?format=json", "--checks", "not_a_server_error",
         "--max-examples", "25", "--generation-deterministic", "--request-timeout", "30", "--workers", "1"],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    paths = httpx.get(api.url + "/api/schema/?format=json").json()["paths"]
    operations = sum(len(HTTP_METHODS & set(methods)) for methods in paths.values())
    assert operations >= 20  # the schema really lists the API
    assert f"Tested: {operations}" in proc.stdout, proc.stdout[-4000:]  # every operation of the schema was fuzzed
    assert " passed" in proc.stdout and "Rate limited" not in proc.stdout


def test_threads_append_list_and_transcript(api: LiveServer) -> None:
    url = api.url + "/api/threads"
    messages = [{"speaker": "Ann", "content": f"turn number {i}", "message_id": f"r-{i}",
                 "occurred_at": f"2024-01-01T10:0{i}:00Z"} for i in range(3)]
    created = httpx.post(f"{url}/standup/messages/", json={"namespace": "rest-chat", "messages": messages})
    assert created.status_code == 201 and created.json()["added"] == 3
    again = httpx.post(f"{url}/standup/messages/", json={"namespace": "rest-chat", "messages": messages})
    assert again.status_code == 200 and again.json()["noop"] == 3
    listing = httpx.get(f"{url}/", params={"namespace": "rest-chat"}).json()["threads"]
    assert listing == [{"thread": "standup", "messages": 3, "first_at": "2024-01-01T10:00:00Z",
                        "last_at": "2024-01-01T10:02:00Z", "speakers": ["Ann"]}]
    page = httpx.get(f"{url}/standup/", params={"namespace": "rest-chat", "limit": 2}).json()
    assert [m["content"] for m in page["messages"]] == ["turn number 0", "turn number 1"] and page["cursor"] == "2"
    rest = httpx.get(f"{url}/standup/", params={"namespace": "rest-chat", "cursor": page["cursor"]}).json()
    assert [m["content"] for m in rest["messages"]] == ["turn number 2"] and rest["cursor"] is None
    missing = httpx.get(f"{url}/nobody/", params={"namespace": "rest-chat"})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "NOT_FOUND"
    too_many = httpx.post(f"{url}/standup/messages/", json={"messages": [{"content": "x"}] * 501})
    assert too_many.status_code == 400 and too_many.json()["error"]["code"] == "INVALID_INPUT"
    remembered = httpx.post(api.url + "/api/memories/", json={"content": "turn number 9", "namespace": "rest-chat",
                                                              "thread": "standup", "message_id": "r-9"})
    assert remembered.status_code == 201
