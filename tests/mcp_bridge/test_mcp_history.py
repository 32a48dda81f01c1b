"""Facts over time through a real mcp SDK ClientSession: remember with key / supersedes /
valid_from, the memory://{id}/history resource, the fact-history prompt, completion of fact keys,
errors as isError results; and over streamable HTTP with scoped tokens, a chain never leaks into
another namespace. (Search and recall "as of" questions: the read side's tests.)"""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, types
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.live_server import LiveServer, fresh_postgres, server_env

NS = {"namespace": "mcp-time"}
KEY = "alice/home-city"


@pytest.fixture(scope="module")
def backend() -> Iterator[dict[str, str]]:
    """The servers' store: their own SQLite, or a fresh PostgreSQL database when the suite runs on it."""
    if not os.environ.get("DATABASE_URL"):
        yield {}
        return
    with fresh_postgres("bhgbrain_history") as url:
        yield {"DATABASE_URL": url}


def _run(factory: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
    return asyncio.run(asyncio.wait_for(factory(), timeout=180))


async def _ok(session: ClientSession, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A successful call; the SDK has checked its structured result against the output schema."""
    result = await session.call_tool(name, arguments)
    assert result.is_error is not True, (name, arguments, result.content)
    assert result.structured_content is not None
    return result.structured_content


async def _error(session: ClientSession, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await session.call_tool("remember", arguments)
    assert result.is_error is True, arguments
    return json.loads(result.content[0].text)["error"]


async def _read(session: ClientSession, uri: str) -> dict[str, Any]:
    return json.loads((await session.read_resource(uri)).contents[0].text)


async def _history_session(session: ClientSession) -> dict[str, Any]:
    await session.initialize()
    seen: dict[str, Any] = {}
    paris = await _ok(session, "remember", {"content": "Alice lives in Paris", "key": KEY, "valid_from": "2025-06-01", **NS})
    berlin = await _ok(session, "remember", {"content": "Alice moved to Berlin", "key": "Alice/Home-City",
                                             "valid_from": "2026-03-15T08:00:00Z", **NS})
    lyon = await _ok(session, "remember", {"content": "Alice lived in Lyon for a year", "key": KEY,
                                           "valid_from": "2025-09-01", **NS})
    seen["writes"] = (paris, berlin, lyon)
    old = await _ok(session, "remember", {"content": "The gateway is Kong", **NS})
    new = await _ok(session, "remember", {"content": "The gateway is Envoy now", "supersedes": old["id"], **NS})
    seen["explicit"] = (old, new)
    seen["history"] = await _read(session, f"memory://{paris['id']}/history?namespace=mcp-time")
    seen["gateway"] = await _read(session, f"memory://{new['id']}/history?namespace=mcp-time")
    seen["templates"] = {t.uri_template for t in (await session.list_resource_templates()).resource_templates}
    seen["prompt"] = (await session.get_prompt("fact-history", {"key": KEY, **NS})).messages[0].content.text
    ref = types.PromptReference(type="ref/prompt", name="fact-history")
    seen["keys"] = (await session.complete(ref, {"name": "key", "value": "ALI"}, context_arguments=NS)).completion
    history_ref = types.ResourceTemplateReference(type="ref/resource", uri="memory://{id}/history")
    seen["ids"] = (await session.complete(history_ref, {"name": "id", "value": paris["id"][:8]},
                                          context_arguments=NS)).completion
    seen["errors"] = {
        "valid_from": await _error(session, {"content": "x fact", "valid_from": "soon", **NS}),
        "unknown": await _error(session, {"content": "y fact", "supersedes": ["00000000-0000-4000-8000-000000000001"], **NS}),
        "self": await _error(session, {"content": "The gateway is Envoy now", "supersedes": new["id"], **NS}),
        "long_key": await _error(session, {"content": "z fact", "key": "k" * 201, **NS}),
    }
    seen["missing"] = await _read(session, "memory://00000000-0000-4000-8000-000000000009/history")
    seen["malformed"] = await _read(session, "memory://nope/history")
    return seen


def test_a_stdio_session_records_and_reads_a_facts_history(tmp_path: Path, backend: dict[str, str]) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "bhgbrain_site.cli.main", f"--config={tmp_path / 'config.json'}", "server", "start", "--stdio"],
        env=server_env(backend), cwd=str(Path(__file__).resolve().parents[2]),
    )

    async def session() -> dict[str, Any]:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
            return await _history_session(client)

    seen = _run(session)
    paris, berlin, lyon = seen["writes"]
    assert (berlin["key"], berlin["superseded"], berlin["current"]) == (KEY, [paris["id"]], True)
    assert (lyon["current"], lyon["superseded_by"], lyon["superseded"]) == (False, berlin["id"], [paris["id"]])
    history = seen["history"]
    assert [v["id"] for v in history["versions"]] == [paris["id"], lyon["id"], berlin["id"]]
    assert history["current_id"] == berlin["id"] and history["key"] == KEY
    assert [(v["valid_from"], v["valid_until"]) for v in history["versions"]] == [
        ("2025-06-01T00:00:00Z", "2025-09-01T00:00:00Z"),
        ("2025-09-01T00:00:00Z", "2026-03-15T08:00:00Z"),
        ("2026-03-15T08:00:00Z", None),
    ]
    old, new = seen["explicit"]
    assert new["superseded"] == [old["id"]]
    assert [v["superseded"]["reason"] if v["superseded"] else None for v in seen["gateway"]["versions"]] == ["explicit", None]
    assert "memory://{id}/history" in seen["templates"]
    assert "Lyon" in seen["prompt"] and "current" in seen["prompt"] and seen["prompt"].index("Paris") < seen["prompt"].index("Berlin")
    assert seen["keys"].values == [KEY]
    assert seen["ids"].values == [paris["id"]]
    errors = seen["errors"]
    assert {name: e["code"] for name, e in errors.items()} == {
        "valid_from": "INVALID_INPUT", "unknown": "NOT_FOUND", "self": "INVALID_INPUT", "long_key": "INVALID_INPUT"}
    assert "valid_from" in errors["valid_from"]["message"] and "key" in errors["long_key"]["message"]
    assert (seen["missing"]["error"]["code"], seen["malformed"]["error"]["code"]) == ("NOT_FOUND", "INVALID_INPUT")


# --------------------------------------------------------------------------- scoped tokens


def _token(live: LiveServer, namespace: str, backend: dict[str, str]) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "bhgbrain_site.cli.main", f"--config={live.config_path}", "token", "create",
         "--namespace", namespace, "--name", namespace],
        capture_output=True, text=True, env=server_env(backend), timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@pytest.fixture(scope="module")
def scoped(tmp_path_factory: pytest.TempPathFactory, backend: dict[str, str]) -> Iterator[tuple[LiveServer, dict[str, str]]]:
    live = LiveServer(home=tmp_path_factory.mktemp("mcp-time"), env={"BHGBRAIN_TOKEN": "master-token-value", **backend})
    live.home.mkdir(parents=True, exist_ok=True)
    live.config_path.write_text(json.dumps(live.config))
    tokens = {"alice": _token(live, "alice", backend), "bob": _token(live, "bob", backend)}
    live.start()
    yield live, tokens
    live.stop()


def _as(live: LiveServer, token: str, work: Callable[[ClientSession], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
    async def session() -> dict[str, Any]:
        client = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
        async with client, streamable_http_client(live.url + "/mcp", http_client=client) as streams:
            async with ClientSession(streams[0], streams[1]) as mcp_client:
                await mcp_client.initialize()
                return await work(mcp_client)

    return _run(session)


async def _alice_moves(session: ClientSession) -> dict[str, Any]:
    first = await _ok(session, "remember", {"content": "Alice's salary band is B2", "key": "alice/salary-band",
                                            "valid_from": "2025-01-01"})
    second = await _ok(session, "remember", {"content": "Alice's salary band is B3", "key": "alice/salary-band"})
    return {"first": first["id"], "second": second["id"]}


def _bob_pries(alice: dict[str, Any]) -> Callable[[ClientSession], Awaitable[dict[str, Any]]]:
    async def work(session: ClientSession) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        seen["own_ns"] = await _read(session, f"memory://{alice['first']}/history")
        seen["alice_ns"] = await _read(session, f"memory://{alice['first']}/history?namespace=alice")
        result = await session.call_tool("remember", {"content": "Bob's band is C1", "supersedes": alice["second"]})
        seen["supersede"] = (result.is_error, result.content[0].text)
        ref = types.PromptReference(type="ref/prompt", name="fact-history")
        seen["keys"] = (await session.complete(ref, {"name": "key", "value": "alice"})).completion
        seen["alice_keys"] = (await session.complete(ref, {"name": "key", "value": "alice"},
                                                     context_arguments={"namespace": "alice"})).completion
        mine = await _ok(session, "remember", {"content": "Bob's band is C1", "key": "alice/salary-band"})
        seen["mine"] = mine
        return seen

    return work


def test_a_scoped_token_never_reads_or_closes_another_namespaces_chain(scoped) -> None:  # noqa: ANN001
    live, tokens = scoped
    alice = _as(live, tokens["alice"], _alice_moves)
    seen = _as(live, tokens["bob"], _bob_pries(alice))
    assert seen["own_ns"]["error"]["code"] == "NOT_FOUND" and "B2" not in json.dumps(seen["own_ns"])
    assert seen["alice_ns"]["error"]["code"] == "FORBIDDEN" and "B2" not in json.dumps(seen["alice_ns"])
    is_error, text = seen["supersede"]
    assert is_error is True and json.loads(text)["error"]["code"] == "NOT_FOUND"
    assert seen["keys"].values == [] and seen["alice_keys"].values == []
    assert seen["mine"]["current"] is True and "superseded" not in seen["mine"]  # bob's own slot of that name
    history = _as(live, tokens["alice"], lambda s: _read(s, f"memory://{alice['first']}/history"))
    assert [v["id"] for v in history["versions"]] == [alice["first"], alice["second"]]
    assert history["current_id"] == alice["second"]


def test_tool_and_resource_endpoints_take_the_same_arguments(scoped) -> None:  # noqa: ANN001
    import httpx

    live, tokens = scoped
    master = {"Authorization": "Bearer master-token-value"}
    body = {"content": "The carol team's standup is at 9:15", "key": "carol/standup", "valid_from": "2026-02-01",
            "namespace": "carol"}
    first = httpx.post(f"{live.url}/tool/remember", json=body, headers=master, timeout=30).json()
    later = httpx.post(f"{live.url}/tool/remember", json={**body, "content": "The carol team's standup moved to 9:45",
                                                          "valid_from": "2026-05-01"}, headers=master, timeout=30).json()
    assert later["superseded"] == [first["id"]] and later["key"] == "carol/standup"
    history = httpx.get(f"{live.url}/resource", params={"uri": f"memory://{first['id']}/history?namespace=carol"},
                        headers=master, timeout=30).json()
    assert [v["id"] for v in history["versions"]] == [first["id"], later["id"]]
    bad = httpx.post(f"{live.url}/tool/remember", json={**body, "valid_from": "tomorrow-ish"}, headers=master, timeout=30)
    assert bad.status_code == 400 and bad.json()["error"]["code"] == "INVALID_INPUT"
    foreign = httpx.get(f"{live.url}/resource", params={"uri": f"memory://{first['id']}/history"},
                        headers={"Authorization": f"Bearer {tokens['bob']}"}, timeout=30)
    assert foreign.json()["error"]["code"] == "NOT_FOUND" and "9:15" not in foreign.text
