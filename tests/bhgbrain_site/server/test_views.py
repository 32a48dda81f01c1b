"""The real server over real HTTP: /health, POST /tool/remember|forget, validation, auth, fail-closed."""
from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.live_server import LiveServer, server_env

JWT_EXAMPLE = {
    "content": "Authentication uses JWT tokens signed with RS256. Public keys are rotated every 90 days "
               "and published at /.well-known/jwks.json",
    "type": "semantic", "tags": ["auth", "jwt", "architecture"], "importance": 0.9, "retention_tier": "T0",
}
RETRO_EXAMPLE = {
    "content": "Sprint 14 retrospective: team agreed to add integration tests before merging new endpoints",
    "type": "episodic", "tags": ["sprint", "retrospective"], "source": "agent",
}
RUNBOOK_EXAMPLE = {
    "content": "## Deployment Runbook\n1. Run `npm run build`\n2. Push to staging\n3. Run smoke tests\n4. Tag release\n5. Deploy to prod",
    "type": "procedural", "tags": ["deployment", "runbook"], "source": "import", "importance": 0.8,
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    security = {"max_request_size_bytes": 200_000, "rate_limit_rpm": 100_000}
    live = LiveServer(home=tmp_path_factory.mktemp("live"), config={"security": security}).start()
    yield live
    live.stop()


def _error(response: httpx.Response, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "retryable"}
    assert body["error"]["code"] == code
    return body["error"]["message"]


def test_health_is_200_with_components(server: LiveServer) -> None:
    response = httpx.get(server.url + "/health")
    body = response.json()
    assert response.status_code == 200
    assert body["status"] == "healthy"
    assert {"sqlite", "vector_index", "embedding", "retention"} <= set(body["components"])
    assert body["retention"]["counts_by_tier"].keys() == {"T0", "T1", "T2", "T3"}
    assert isinstance(body["db_size_bytes"], int) and body["db_size_bytes"] > 0


def test_seed_examples_then_noop(server: LiveServer) -> None:
    results = {}
    for name, example in (("jwt", JWT_EXAMPLE), ("retro", RETRO_EXAMPLE), ("runbook", RUNBOOK_EXAMPLE)):
        response = server.post("remember", {**example, "namespace": "seed-examples"})
        assert response.status_code == 200, response.text
        results[name] = response.json()
    assert {k: (v["operation"], v["retention_tier"]) for k, v in results.items()} == {
        "jwt": ("ADD", "T0"), "retro": ("ADD", "T2"), "runbook": ("ADD", "T0"),
    }
    assert set(results["jwt"]) >= {"id", "summary", "type", "operation", "created_at"}
    assert results["jwt"]["created_at"].endswith("Z")
    again = server.post("remember", {**RETRO_EXAMPLE, "namespace": "seed-examples"}).json()
    assert again["operation"] == "NOOP" and again["id"] == results["retro"]["id"]
    health = httpx.get(server.url + "/health").json()
    assert health["memory_count"] >= 3


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"content": "x", "bogus": 1}, "bogus"),
        ({}, "content"),
        ({"content": ""}, "content"),
        ({"content": 42}, "content"),
        ({"content": "x", "tags": "auth"}, "tags"),
        ({"content": "x", "tags": ["has space"]}, "tags.0"),
        ({"content": "x", "tags": [f"t{i}" for i in range(21)]}, "tags"),
        ({"content": "x", "importance": 1.5}, "importance"),
        ({"content": "x", "importance": "high"}, "importance"),
        ({"content": "x", "type": "diary"}, "type"),
        ({"content": "x", "source": "email"}, "source"),
        ({"content": "x", "retention_tier": "T9"}, "retention_tier"),
        ({"content": "x", "namespace": "bad namespace"}, "namespace"),
        ({"content": "x", "collection": "a/b"}, "collection"),
        ({"content": "x" * 100_001}, "content"),
        ({"content": "x", "category": "c" * 101}, "category"),
    ],
)
def test_invalid_input_is_400_naming_the_field(server: LiveServer, body: dict, field: str) -> None:
    message = _error(server.post("remember", body), 400, "INVALID_INPUT")
    assert field in message


@pytest.mark.parametrize(
    "content",
    [
        "openai key sk-" + "A1b2C3d4E5f6G7h8I9j0K1l2",
        "aws AKIA" + "Q2W3E4R5T6Y7U2I3",  # not AWS's documented ...EXAMPLE id: that one is a placeholder
        "gh token ghp_" + "a" * 36,
        "config: password=hunter2hunter2",
        "-----BEGIN RSA PRIVATE KEY-----\nMIIB...",
    ],
)
def test_secrets_are_400_and_not_echoed(server: LiveServer, content: str) -> None:
    message = _error(server.post("remember", {"content": content, "namespace": "secrets"}), 400, "INVALID_INPUT")
    assert message == "Content appears to contain credentials or secrets. Memory rejected for safety."
    secret = content.split()[-1]
    logs = server.stderr() + (server.home / "logs" / "bhgbrain.log").read_text()
    assert secret not in logs


@pytest.mark.parametrize(
    ("raw", "status"),
    [(b"{not json", 400), (b"[1, 2]", 400), (b"\xff\xfe", 400), (b"null", 400)],
)
def test_malformed_bodies(server: LiveServer, raw: bytes, status: int) -> None:
    _error(server.post("remember", raw=raw), status, "INVALID_INPUT")


def test_oversized_body_is_413(server: LiveServer) -> None:
    _error(server.post("remember", {"content": "y" * 300_000}), 413, "INVALID_INPUT")


def test_unknown_tool_and_wrong_method(server: LiveServer) -> None:
    _error(server.post("teleport", {}), 404, "NOT_FOUND")
    _error(httpx.get(server.url + "/tool/remember"), 405, "INVALID_INPUT")


def test_forget_round_trip(server: LiveServer) -> None:
    created = server.post("remember", {"content": "Forget me: the staging VPN uses WireGuard", "namespace": "forget"}).json()
    _error(server.post("forget", {"id": created["id"], "namespace": "other"}), 404, "NOT_FOUND")
    response = server.post("forget", {"id": created["id"]})
    assert response.status_code == 200 and response.json() == {"deleted": True, "id": created["id"]}
    _error(server.post("forget", {"id": created["id"]}), 404, "NOT_FOUND")
    _error(server.post("forget", {"id": "not-a-uuid"}), 400, "INVALID_INPUT")
    _error(server.post("forget", {}), 400, "INVALID_INPUT")


def test_bearer_token_guards_tools_but_not_health(tmp_path: Path) -> None:
    live = LiveServer(home=tmp_path, env={"BHGBRAIN_TOKEN": "s3cret-token-value"}).start()
    try:
        assert httpx.get(live.url + "/health").status_code == 200
        _error(live.post("remember", {"content": "hello"}), 401, "AUTH_REQUIRED")
        _error(live.post("remember", {"content": "hello"}, headers={"Authorization": "Bearer wrong"}), 401, "AUTH_REQUIRED")
        ok = live.post("remember", {"content": "hello there"}, headers={"Authorization": "Bearer s3cret-token-value"})
        assert ok.status_code == 200 and ok.json()["operation"] == "ADD"
    finally:
        live.stop()


def test_degraded_embeddings_still_store(tmp_path: Path) -> None:
    live = LiveServer(home=tmp_path, config={"embedding": {"provider": "none"}}).start()
    try:
        health = httpx.get(live.url + "/health")
        assert health.status_code == 200 and health.json()["status"] == "degraded"
        first = live.post("remember", {"content": "Degraded but stored"}).json()
        again = live.post("remember", {"content": "Degraded but stored"}).json()
        assert first["operation"] == "ADD" and again == {**first, "operation": "NOOP"}
        assert httpx.get(live.url + "/health").json()["retention"]["unsynced_vectors"] == 1
    finally:
        live.stop()


def test_degraded_without_fallback_is_503(tmp_path: Path) -> None:
    live = LiveServer(home=tmp_path, config={"embedding": {"provider": "none"}, "pipeline": {"fallback_to_threshold_dedup": False}}).start()
    try:
        message = _error(live.post("remember", {"content": "Needs an embedder"}), 503, "EMBEDDING_UNAVAILABLE")
        assert message
        assert live.post("remember", {"content": "Needs an embedder"}).json()["error"]["retryable"] is True
    finally:
        live.stop()


@pytest.mark.parametrize(
    ("config", "env", "needle"),
    [
        ({}, {}, "not loopback"),
        ({"security": {"require_loopback_http": False}}, {}, "no bearer token is configured"),
    ],
)
def test_non_loopback_bind_fails_closed(tmp_path: Path, config: dict, env: dict, needle: str) -> None:
    live = LiveServer(home=tmp_path, config=config)
    live.home.mkdir(parents=True, exist_ok=True)
    live.config_path.write_text(__import__("json").dumps(config))
    proc = subprocess.run(live.command("--host=0.0.0.0"), capture_output=True, text=True, env=server_env(env), timeout=60)
    assert proc.returncode == 2
    assert needle in proc.stderr
    assert proc.stdout == ""


def test_full_server_starts_the_scheduler_and_stops_cleanly(tmp_path: Path) -> None:
    live = LiveServer(home=tmp_path, scheduler=True).start()
    try:
        assert httpx.get(live.url + "/health").json()["status"] == "healthy"
        deadline = time.monotonic() + 30
        while "Q Cluster" not in live.stderr() or "running" not in live.stderr():
            assert time.monotonic() < deadline, live.stderr()
            time.sleep(0.3)
        banner = live.stderr()
        for needle in ("config", str(live.config_path), "logs", "createsuperuser --noinput", "DJANGO_SUPERUSER_PASSWORD"):
            assert needle in banner
        tree = _running_cluster(live)
    finally:
        assert live.stop() == 0
    _wait_all_gone(tree, "scheduler outlived the server")


def _descendants(pid: int) -> set[int]:
    found: set[int] = set()
    pending = [pid]
    while pending:
        current = pending.pop()
        for task in Path(f"/proc/{current}/task").glob("*"):
            try:
                children = [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
            for child in children:
                if child not in found:
                    found.add(child)
                    pending.append(child)
    return found


def _running_cluster(live: LiveServer) -> set[int]:
    """The scheduler's pid from the banner and, once django-q2 has started them, every process
    under it (the cluster, its sentinel, workers, pusher and monitor)."""
    deadline = time.monotonic() + 60
    while not (found := re.search(r"django-q2 cluster \(pid (\d+)\)", live.stderr())):
        assert time.monotonic() < deadline, live.stderr()
        time.sleep(0.2)
    scheduler_pid = int(found.group(1))
    while len(tree := _descendants(scheduler_pid)) < 5:  # qcluster, sentinel, worker, pusher, monitor
        assert time.monotonic() < deadline, (tree, live.stderr())
        time.sleep(0.2)
    return {scheduler_pid} | tree


def _wait_all_gone(pids: set[int], message: str) -> None:
    deadline = time.monotonic() + 20
    while alive := {pid for pid in pids if _is_running(pid)}:
        assert time.monotonic() < deadline, f"{message}: {sorted(alive)} still running"
        time.sleep(0.2)


def _is_running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_search_and_recall_over_http(server: LiveServer) -> None:
    ns = {"namespace": "http-search"}
    created = server.post("remember", {"content": "The payments API retries failed webhooks five times", **ns}).json()
    server.post("remember", {"content": "我们的认证服务使用JWT令牌", **ns})
    for mode in ("hybrid", "fulltext", "semantic"):
        response = server.post("search", {"query": "how often are webhooks retried?", "mode": mode, **ns})
        assert response.status_code == 200, response.text
        assert response.json()["results"][0]["id"] == created["id"]
    chinese = server.post("search", {"query": "认证服务", "mode": "fulltext", **ns}).json()["results"]
    assert [r["summary"] for r in chinese] == ["我们的认证服务使用JWT令牌"]
    recalled = server.post("recall", {"query": "webhook retry policy", **ns}).json()["results"]
    assert recalled and recalled[0]["id"] == created["id"]
    assert {"score", "semantic_score", "fulltext_score", "retention_tier", "expiring_soon", "device_id"} <= set(recalled[0])


@pytest.mark.parametrize("query", ['"', "AND", "NEAR(a b)", "%_*-:()", "'; DROP TABLE memories; --", "🙂", "a" * 500])
def test_hostile_search_queries_are_answered(server: LiveServer, query: str) -> None:
    response = server.post("search", {"query": query, "namespace": "http-search"})
    assert response.status_code == 200, response.text
    assert isinstance(response.json()["results"], list)


def test_search_input_limits(server: LiveServer) -> None:
    assert "query" in _error(server.post("search", {"query": "x" * 501}), 400, "INVALID_INPUT")
    assert "limit" in _error(server.post("search", {"query": "x", "limit": 51}), 400, "INVALID_INPUT")
    assert "limit" in _error(server.post("recall", {"query": "x", "limit": 21}), 400, "INVALID_INPUT")
    assert "mode" in _error(server.post("search", {"query": "x", "mode": "fuzzy"}), 400, "INVALID_INPUT")


def test_accesses_are_flushed_on_a_clean_shutdown(tmp_path: Path) -> None:
    """Search results count as accesses; a SIGTERM right after must not lose them."""
    import sqlite3

    live = LiveServer(home=tmp_path).start()
    try:
        created = live.post("remember", {"content": "Shutdown test: the archive bucket is in eu-west-1"}).json()
        for _ in range(3):
            results = live.post("search", {"query": "archive bucket region", "mode": "fulltext"}).json()["results"]
            assert results[0]["id"] == created["id"]
    finally:
        assert live.stop() == 0  # immediately: well inside the flush interval
    with sqlite3.connect(tmp_path / "bhgbrain.sqlite3") as db:
        count, last = db.execute("SELECT access_count, last_accessed FROM memories").fetchone()
    assert count == 3 and last is not None


def test_scheduler_does_not_outlive_a_killed_server(tmp_path: Path) -> None:
    live = LiveServer(home=tmp_path, scheduler=True).start()
    tree = _running_cluster(live)
    live.proc.kill()  # SIGKILL: no chance to clean up
    live.proc.wait(timeout=10)
    _wait_all_gone(tree, "scheduler orphaned by a killed server")
