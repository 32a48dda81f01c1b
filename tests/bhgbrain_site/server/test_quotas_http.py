"""Namespace quotas and token write rates against the real server over real HTTP and a real MCP
client session: reject and trim over ``POST /tool``, REST and MCP; a tier's budget; the default of
namespaces not listed; a quota set with the CLI while the server runs; ``/health``'s quotas section
for anonymous, scoped and master callers; a token's write rate with Retry-After."""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.live_server import LiveServer, server_env

MASTER = "quota-master-token"
CONFIG = {
    "security": {"rate_limit_rpm": 1_000_000},
    "namespace_defaults": {"max_memories": 3},
    "namespaces": {
        "rej": {"max_memories": 2},
        "trim": {"max_memories": 2, "on_quota_exceeded": "trim"},
        "tiers": {"tier_budgets": {"T3": 1}},
        "alice": {"max_memories": 100},
        "bob": {"max_memories": 100},
    },
}


def _cli(live: LiveServer, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bhgbrain_site.cli.main", f"--config={live.config_path}", *args],
                          capture_output=True, text=True, env=server_env(), timeout=120)


def _token(live: LiveServer, *args: str) -> str:
    proc = _cli(live, "token", "create", *args)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, dict[str, str]]]:
    live = LiveServer(home=tmp_path_factory.mktemp("quotas"), config=CONFIG, env={"BHGBRAIN_TOKEN": MASTER})
    live.home.mkdir(parents=True, exist_ok=True)
    live.config_path.write_text(json.dumps(CONFIG))
    tokens = {"alice": _token(live, "--namespace", "alice", "--name", "alice", "--write-rate", "3"),
              "bob": _token(live, "--namespace", "bob", "--name", "bob")}
    live.start()
    yield live, tokens
    live.stop()


def _as(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _remember(live: LiveServer, content: str, namespace: str, token: str = MASTER, **extra: Any) -> httpx.Response:
    return live.post("remember", {"content": content, "namespace": namespace, **extra}, headers=_as(token))


async def _mcp_calls(url: str, calls: list[tuple[str, dict[str, Any]]], token: str = MASTER) -> list[Any]:
    client = create_mcp_http_client(headers=_as(token))
    async with client, streamable_http_client(url + "/mcp", http_client=client) as streams:
        async with ClientSession(streams[0], streams[1]) as mcp:
            await mcp.initialize()
            return [await mcp.call_tool(name, arguments) for name, arguments in calls]


def _mcp(live: LiveServer, calls: list[tuple[str, dict[str, Any]]], token: str = MASTER) -> list[Any]:
    return asyncio.run(asyncio.wait_for(_mcp_calls(live.url, calls, token), timeout=60))


def _envelope(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    return response.json()["error"]


def _count(live: LiveServer, namespace: str) -> int:
    response = httpx.get(f"{live.url}/api/memories/", params={"namespace": namespace, "limit": 100}, headers=_as(MASTER))
    return len(response.json()["items"])


def test_reject_over_tool_rest_and_mcp_names_namespace_limit_and_count(server) -> None:  # noqa: ANN001
    live, _tokens = server
    for i in range(2):
        assert _remember(live, f"rejecting namespace note {i}", "rej").json()["operation"] == "ADD"
    refused = _envelope(_remember(live, "one too many over /tool", "rej"), 409)
    assert refused["code"] == "QUOTA_EXCEEDED" and refused["retryable"] is False
    assert (refused["namespace"], refused["limit"], refused["count"]) == ("rej", 2, 2)
    assert 'Namespace "rej"' in refused["message"] and "2" in refused["message"]
    rest = httpx.post(f"{live.url}/api/memories/", json={"content": "one too many over REST", "namespace": "rej"},
                      headers=_as(MASTER))
    assert _envelope(rest, 409) == {**refused, "message": _envelope(rest, 409)["message"]}
    (mcp,) = _mcp(live, [("remember", {"content": "one too many over MCP", "namespace": "rej"})])
    assert mcp.is_error is True
    assert mcp.structured_content["error"]["code"] == "QUOTA_EXCEEDED"
    assert mcp.structured_content["error"]["namespace"] == "rej" and mcp.structured_content["error"]["count"] == 2
    again = _remember(live, "rejecting namespace note 0", "rej")  # a duplicate is no new memory
    assert again.status_code == 200 and again.json()["operation"] == "NOOP"
    assert _count(live, "rej") == 2


def test_trim_over_tool_rest_and_mcp_keeps_the_namespace_at_its_limit(server) -> None:  # noqa: ANN001
    live, _tokens = server
    others = [_remember(live, f"another namespace's note {i}", "bystander").json()["id"] for i in range(3)]
    first = [_remember(live, f"trimmed namespace note {i}", "trim").json()["id"] for i in range(2)]
    assert _remember(live, "trim over /tool", "trim").json()["operation"] == "ADD"
    rest = httpx.post(f"{live.url}/api/memories/", json={"content": "trim over REST", "namespace": "trim"},
                      headers=_as(MASTER))
    assert rest.status_code == 201 and rest.json()["operation"] == "ADD"
    (mcp,) = _mcp(live, [("remember", {"content": "trim over MCP", "namespace": "trim"})])
    assert mcp.is_error is not True and mcp.structured_content["operation"] == "ADD"
    assert _count(live, "trim") == 2
    archived = httpx.get(f"{live.url}/api/archive/", params={"namespace": "trim"}, headers=_as(MASTER)).json()
    assert set(first) <= {entry["id"] for entry in archived["entries"]}  # the oldest, never read: archived first
    assert _count(live, "bystander") == 3 and others


def test_a_tier_budget_and_the_default_of_namespaces_not_listed(server) -> None:  # noqa: ANN001
    live, _tokens = server
    assert _remember(live, "standup notes for today", "tiers", retention_tier="T3").status_code == 200
    tier = _envelope(_remember(live, "meeting minutes of this week", "tiers", retention_tier="T3"), 409)
    assert (tier["tier"], tier["limit"], tier["count"]) == ("T3", 1, 1)
    assert _remember(live, "a T2 fact still fits", "tiers", retention_tier="T2").status_code == 200
    for i in range(3):
        assert _remember(live, f"a brand-new namespace's note {i}", "brand-new").status_code == 200
    default = _envelope(_remember(live, "its fourth note", "brand-new"), 409)
    assert (default["namespace"], default["limit"]) == ("brand-new", 3)


def test_a_quota_set_with_the_cli_applies_to_the_running_server_at_once(server) -> None:  # noqa: ANN001
    live, _tokens = server
    assert _remember(live, "cli-set namespace: first", "cli-set").status_code == 200
    proc = _cli(live, "namespace", "quota", "cli-set", "--max-memories", "1")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["total"] == {"used": 1, "limit": 1}
    assert _envelope(_remember(live, "cli-set namespace: second", "cli-set"), 409)["limit"] == 1
    shown = json.loads(_cli(live, "namespace", "quota", "cli-set").stdout)
    assert (shown["source"], shown["state"], shown["on_quota_exceeded"]) == ("admin", "at_limit", "reject")
    assert _cli(live, "namespace", "quota", "cli-set", "--policy", "trim", "--tier", "T2=none").returncode == 0
    assert _remember(live, "cli-set namespace: second", "cli-set").json()["operation"] == "ADD"
    listing = json.loads(_cli(live, "namespace", "quota").stdout)["namespaces"]
    assert {"rej", "trim", "cli-set"} <= {entry["namespace"] for entry in listing}
    bad = _cli(live, "namespace", "quota", "cli-set", "--tier", "T9=4")
    assert bad.returncode == 2 and "TIER" in bad.stderr
    assert _cli(live, "namespace", "quota", "cli-set", "--reset").returncode == 0
    assert json.loads(_cli(live, "namespace", "quota", "cli-set").stdout)["source"] == "default"


def test_health_shows_quotas_per_namespace_only_to_callers_with_access(server) -> None:  # noqa: ANN001
    live, tokens = server
    _remember(live, "bob's first note", "bob", tokens["bob"])
    anonymous = httpx.get(live.url + "/health").json()
    assert {"status", "components", "memory_count", "retention"} <= set(anonymous)  # its shape is kept
    assert anonymous["quotas"]["namespaces_limited"] >= 5 and "namespaces" not in anonymous["quotas"]
    assert anonymous["quotas"]["at_limit"] >= 1
    full = httpx.get(live.url + "/health", headers=_as(MASTER)).json()["quotas"]
    assert full["namespaces"]["rej"]["total"] == {"used": 2, "limit": 2} and full["namespaces"]["rej"]["state"] == "at_limit"
    assert full["namespaces"]["tiers"]["tiers"]["T3"] == {"used": 1, "limit": 1}
    scoped = httpx.get(live.url + "/health", headers=_as(tokens["bob"])).json()["quotas"]
    assert set(scoped["namespaces"]) == {"bob"} and scoped["namespaces"]["bob"]["total"] == {"used": 1, "limit": 100}
    wrong = httpx.get(live.url + "/health", headers=_as("bhg_not-a-token"))
    assert wrong.status_code == 200 and "namespaces" not in wrong.json()["quotas"]
    resource = httpx.get(live.url + "/resource", params={"uri": "health://status"}, headers=_as(tokens["bob"])).json()
    assert set(resource["quotas"]["namespaces"]) == {"bob"}


def _fresh_minute(margin: float = 20.0) -> None:
    """Wait until at least ``margin`` seconds of the current minute are left (a burst in one window)."""
    left = 60 - time.time() % 60
    if left < margin:
        time.sleep(left + 0.5)


def test_a_tokens_write_rate_is_429_with_retry_after_over_tool_rest_and_mcp(server) -> None:  # noqa: ANN001
    live, tokens = server
    _fresh_minute()
    alice = tokens["alice"]
    writes = [_remember(live, f"alice rate note {i}", "alice", alice) for i in range(3)]
    assert [w.status_code for w in writes] == [200, 200, 200]
    limited = live.post("remember", {"content": "alice: a fourth write"}, headers=_as(alice))
    error = _envelope(limited, 429)
    assert error["code"] == "RATE_LIMITED" and error["retryable"] is True and 1 <= error["retry_after"] <= 120
    assert limited.headers["retry-after"] == str(error["retry_after"])
    rest = httpx.post(f"{live.url}/api/memories/", json={"content": "alice over REST"}, headers=_as(alice))
    assert _envelope(rest, 429)["code"] == "RATE_LIMITED" and rest.headers["retry-after"].isdigit()
    (mcp,) = _mcp(live, [("remember", {"content": "alice over MCP"})], alice)
    assert mcp.is_error is True and mcp.structured_content["error"]["code"] == "RATE_LIMITED"
    assert live.post("search", {"query": "rate note"}, headers=_as(alice)).status_code == 200  # reads still pass
    assert _remember(live, "bob is not limited by alice's rate", "bob", tokens["bob"]).status_code == 200
