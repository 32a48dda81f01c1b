"""Tool metadata (titles, annotations, output schemas), prompts and completions, seen by a real
mcp SDK ClientSession over stdio and over streamable HTTP.

The SDK client checks every successful tool result against the tool's ``outputSchema`` (and raises
on a mismatch), so calling every tool and action here checks the schemas against real results;
``_schemas_are_enforced`` shows that a result with a key the model lacks would fail.
"""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, MCPError, types
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.live_server import LiveServer, server_env

NS = "mcp-feat"
READ_ONLY = {"recall", "search", "handoff"}
DESTRUCTIVE = {"forget", "collections", "category", "backup", "bootstrap", "tag", "event"}
PROMPTS = {"bootstrap", "session-start", "remember-this", "fact-history"}


def _run(factory: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
    return asyncio.run(asyncio.wait_for(factory(), timeout=180))


async def _tools(session: ClientSession) -> dict[str, types.Tool]:
    return {tool.name: tool for tool in (await session.list_tools()).tools}


async def _ok(session: ClientSession, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A successful call; the SDK has already checked its structured result against the schema."""
    result = await session.call_tool(name, arguments)
    assert result.is_error is not True, (name, arguments, result.structured_content)
    assert result.structured_content is not None
    return result.structured_content


async def _schemas_are_enforced(session: ClientSession, good: dict[str, Any]) -> None:
    """The client refuses a remember result carrying a key its model does not name, or missing one."""
    for bad in ({**good, "surprise": 1}, {k: v for k, v in good.items() if k != "operation"}):
        with pytest.raises(RuntimeError, match="Invalid structured content"):
            await session.validate_tool_result("remember", types.CallToolResult(content=[], structured_content=bad))


async def _every_tool(session: ClientSession) -> dict[str, Any]:
    """Every tool, every action, successfully (repair needs a shared index: its own test below)."""
    ns = {"namespace": NS}
    seen: dict[str, Any] = {}
    first = await _ok(session, "remember", {"content": "The staging VPN uses WireGuard on port 51820",
                                            "tags": ["vpn", "network"], **ns})
    again = await _ok(session, "remember", {"content": "The staging VPN uses WireGuard on port 51820",
                                            "tags": ["vpn", "network"], **ns})
    assert (first["operation"], again["operation"], again["id"]) == ("ADD", "NOOP", first["id"])  # idempotent
    await _schemas_are_enforced(session, first)
    await _ok(session, "remember", {"content": "Ship the VPN rollout", "thread": "standup", "speaker": "Ann",
                                    "message_id": "s-1", "status": "planned", "event_at": "2030-01-01T09:00:00Z",
                                    "tags": ["vpn"], **ns})
    appended = await _ok(session, "thread_append", {"thread": "standup", **ns, "messages": [
        {"content": "I will test the WireGuard tunnel", "speaker": "Bob", "message_id": "s-2"}]})
    await _ok(session, "thread_append", {"thread": "standup", **ns, "messages": [
        {"content": "I will test the WireGuard tunnel", "speaker": "Bob", "message_id": "s-2"}]})
    await _ok(session, "event", {"id": appended["results"][0]["id"], "status": "done", **ns})
    await _ok(session, "recall", {"query": "which VPN does staging use?", "min_score": 0.0, "with_context": 1, **ns})
    await _ok(session, "recall", {"query": "thanks!", "gate": True, **ns})
    await _ok(session, "search", {"query": "WireGuard", "with_context": 2, **ns})
    await _ok(session, "tag", {"id": first["id"], "add": ["staging"], **ns})
    for action in ("list", "create", "delete"):
        await _ok(session, "collections", {"action": action, **({"name": "scratch"} if action != "list" else {}), **ns})
    await _ok(session, "category", {"action": "set", "name": "net-policy", "slot": "architecture",
                                    "content": "All remote access goes through the VPN", **ns})
    for action in ("list", "get"):
        await _ok(session, "category", {"action": action, **({"name": "net-policy"} if action == "get" else {}), **ns})
    await _ok(session, "category", {"action": "set", "name": "scratch", "content": "temporary", **ns})
    await _ok(session, "category", {"action": "delete", "name": "scratch", **ns})
    profile = {"namespace": "mcp-profile"}
    await _ok(session, "bootstrap", {"action": "start", **profile})
    await _ok(session, "bootstrap", {"action": "submit", "section": 1, "answers": "Ann leads infra.\n\nShe is SRE.", **profile})
    await _ok(session, "bootstrap", {"action": "status", **profile})
    await _ok(session, "bootstrap", {"action": "reset", "section": 1, **profile})
    await _ok(session, "import", {"format": "freeform", "content": "One.\n\nTwo.", "dry_run": True})
    await _ok(session, "import", {"format": "profile", "content": "# Tools\nAnn uses Grafana daily.", **profile})
    await _ok(session, "handoff", {"thread": "standup", **ns})
    backup = await _ok(session, "backup", {"action": "create"})
    await _ok(session, "backup", {"action": "list"})
    await _ok(session, "backup", {"action": "restore", "path": backup["path"]})
    scratch = await _ok(session, "remember", {"content": "A note to forget", **ns})
    await _ok(session, "forget", {"id": scratch["id"], **ns})
    seen["memory_id"] = first["id"]
    return seen


async def _prompts(session: ClientSession, memory_id: str) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    listed = {p.name: p for p in (await session.list_prompts()).prompts}
    seen["prompts"] = {name: (p.title, {a.name: a.required for a in p.arguments or []}) for name, p in listed.items()}
    seen["prompt_descriptions"] = all(p.description for p in listed.values())

    async def text(name: str, arguments: dict[str, str]) -> str:
        got = await session.get_prompt(name, arguments)
        assert got.messages[0].role == "user"
        return got.messages[0].content.text

    seen["bootstrap"] = await text("bootstrap", {"namespace": "mcp-profile", "section": "2"})
    seen["session"] = await text("session-start", {"namespace": NS, "thread": "standup", "query": "VPN setup"})
    seen["session_plain"] = await text("session-start", {"namespace": NS})
    seen["remember_this"] = await text("remember-this", {"passage": "We moved CI to GitHub Actions on May 3.",
                                                         "namespace": NS, "tag": "ci"})
    errors = {}
    for key, name, arguments in (("missing", "remember-this", {}), ("unknown_arg", "session-start", {"surprise": "x"}),
                                 ("bad_value", "bootstrap", {"section": "11"}), ("bad_type", "bootstrap", {"section": "two"}),
                                 ("bad_namespace", "session-start", {"namespace": "not a namespace"}),
                                 ("unknown", "teleport", {})):
        with pytest.raises(MCPError) as raised:
            await session.get_prompt(name, arguments)
        errors[key] = (raised.value.code, raised.value.message)
    seen["errors"] = errors
    seen["memory_id"] = memory_id
    return seen


async def _complete(session: ClientSession, ref: Any, argument: str, value: str,
                    context: dict[str, str] | None = None) -> types.Completion:
    return (await session.complete(ref, {"name": argument, "value": value}, context_arguments=context)).completion


def _prompt_ref(name: str) -> types.PromptReference:
    return types.PromptReference(type="ref/prompt", name=name)


def _template_ref(uri: str) -> types.ResourceTemplateReference:
    return types.ResourceTemplateReference(type="ref/resource", uri=uri)


async def _completions(session: ClientSession, memory_id: str) -> dict[str, Any]:
    ctx = {"namespace": NS}
    return {
        "namespace": await _complete(session, _prompt_ref("session-start"), "namespace", "mcp-"),
        "namespace_none": await _complete(session, _prompt_ref("session-start"), "namespace", "zzz"),
        "thread": await _complete(session, _prompt_ref("session-start"), "thread", "st", ctx),
        "collection": await _complete(session, _template_ref("collection://{name}"), "name", "", ctx),
        "collection_prompt": await _complete(session, _prompt_ref("remember-this"), "collection", "gen", ctx),
        "category": await _complete(session, _template_ref("category://{name}"), "name", "net", ctx),
        "tag": await _complete(session, _prompt_ref("remember-this"), "tag", "", ctx),
        "tag_prefix": await _complete(session, _prompt_ref("remember-this"), "tag", "ne", ctx),
        "memory": await _complete(session, _template_ref("memory://{id}"), "id", memory_id[:6], ctx),
        "memory_dashes": await _complete(session, _template_ref("memory://{id}"), "id", memory_id[:13], ctx),
        "memory_bad": await _complete(session, _template_ref("memory://{id}"), "id", "xyz", ctx),
        "no_kind": await _complete(session, _prompt_ref("remember-this"), "passage", "a", ctx),
    }


async def _everything(session: ClientSession) -> dict[str, Any]:
    init = await session.initialize()
    seen: dict[str, Any] = {"capabilities": init.capabilities, "tools": await _tools(session)}
    memory_id = (await _every_tool(session))["memory_id"]
    seen.update(await _prompts(session, memory_id))
    seen["completions"] = await _completions(session, memory_id)
    # a completion is a hint: an unknown prompt has nothing to offer (the conformance suite asks for one)
    seen["complete_unknown_prompt"] = await _complete(session, _prompt_ref("teleport"), "namespace", "")
    return seen


def _check_tools(tools: dict[str, types.Tool]) -> None:
    assert len(tools) == 14
    for name, tool in tools.items():
        hints = tool.annotations
        assert tool.title and hints is not None and hints.title == tool.title, name
        assert hints.open_world_hint is False, name
        assert hints.read_only_hint is (name in READ_ONLY), name
        assert hints.destructive_hint is (name in DESTRUCTIVE), name
        assert isinstance(hints.idempotent_hint, bool), name
        assert tool.output_schema is not None and tool.output_schema["type"] == "object", name
    assert tools["remember"].annotations.idempotent_hint is True
    assert tools["category"].annotations.idempotent_hint is False  # every set stores a revision
    assert tools["backup"].annotations.idempotent_hint is False  # every create writes a file
    assert tools["remember"].output_schema["additionalProperties"] is False
    assert "anyOf" in tools["collections"].output_schema  # the shape depends on the action


def _check(seen: dict[str, Any]) -> None:
    caps = seen["capabilities"]
    assert caps.prompts is not None and caps.completions is not None
    _check_tools(seen["tools"])
    assert set(seen["prompts"]) == PROMPTS and seen["prompt_descriptions"]
    assert seen["prompts"]["remember-this"] == ("Remember this", {"passage": True, "namespace": False,
                                                                  "collection": False, "tag": False})
    assert seen["prompts"]["session-start"][1] == {"namespace": False, "thread": False, "query": False}
    assert seen["prompts"]["bootstrap"][1] == {"namespace": False, "section": False}
    assert "Start with section 2" in seen["bootstrap"] and "Identity & Role" in seen["bootstrap"]
    assert 'action "submit", namespace "mcp-profile"' in seen["bootstrap"]
    assert "Bob: I will test the WireGuard tunnel" in seen["session"]  # the thread's last turns (hand-off)
    assert "All remote access goes through the VPN" in seen["session_plain"]  # the inject block's categories
    assert "WireGuard on port 51820" in seen["session_plain"]
    remember_this = seen["remember_this"]
    assert "We moved CI to GitHub Actions on May 3." in remember_this and 'the tag "ci"' in remember_this
    assert "Most used here: vpn, " in remember_this  # the namespace's tags, most used first
    errors = seen["errors"]
    assert {code for code, _ in errors.values()} == {types.INVALID_PARAMS}
    assert "passage" in errors["missing"][1] and "surprise" in errors["unknown_arg"][1]
    assert "section" in errors["bad_value"][1] and "section" in errors["bad_type"][1]
    assert "namespace" in errors["bad_namespace"][1] and "teleport" in errors["unknown"][1]
    done = seen["completions"]
    assert done["namespace"].values[:2] == [NS, "mcp-profile"]  # most memories first
    assert done["namespace_none"].values == [] and done["namespace_none"].total == 0
    assert done["thread"].values == ["standup"]
    assert done["collection"].values[0] == "general" and done["collection_prompt"].values == ["general"]
    assert done["category"].values == ["net-policy"]
    assert done["tag"].values[:2] == ["vpn", "network"] and done["tag"].has_more is False  # by use, then name
    assert done["tag_prefix"].values == ["network"]
    assert seen["memory_id"] in done["memory"].values and seen["memory_id"] in done["memory_dashes"].values
    assert all(v.startswith(seen["memory_id"][:6]) for v in done["memory"].values)
    assert done["memory_bad"].values == [] and done["no_kind"].values == []
    assert seen["complete_unknown_prompt"].values == [] and seen["complete_unknown_prompt"].total == 0


def test_stdio_session_sees_metadata_prompts_and_completions(tmp_path: Path) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "bhgbrain_site.cli.main", f"--config={tmp_path / 'config.json'}", "server", "start", "--stdio"],
        env=server_env(), cwd=str(Path(__file__).resolve().parents[2]),
    )

    async def session() -> dict[str, Any]:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
            return await _everything(client)

    _check(_run(session))


def test_streamable_http_session_sees_metadata_prompts_and_completions(tmp_path: Path) -> None:
    live = LiveServer(home=tmp_path).start()
    try:
        async def session() -> dict[str, Any]:
            async with streamable_http_client(live.url + "/mcp") as streams, ClientSession(streams[0], streams[1]) as client:
                return await _everything(client)

        _check(_run(session))
    finally:
        live.stop()


# --------------------------------------------------------------------------- scoped tokens


def _token(live: LiveServer, namespace: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "bhgbrain_site.cli.main", f"--config={live.config_path}", "token", "create",
         "--namespace", namespace, "--name", namespace],
        capture_output=True, text=True, env=server_env(), timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@pytest.fixture(scope="module")
def scoped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, dict[str, str]]]:
    live = LiveServer(home=tmp_path_factory.mktemp("mcp-scoped"), env={"BHGBRAIN_TOKEN": "master-token-value"})
    live.home.mkdir(parents=True, exist_ok=True)
    live.config_path.write_text(json.dumps(live.config))
    tokens = {"alice": _token(live, "alice"), "bob": _token(live, "bob")}
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


async def _alice_writes(session: ClientSession) -> dict[str, Any]:
    stored = await _ok(session, "remember", {"content": "Alice's salary review is on March 3rd",
                                             "tags": ["salary-review"], "collection": "hr"})
    await _ok(session, "category", {"action": "set", "name": "alice-rules", "content": "Private to Alice"})
    return {"id": stored["id"]}


def _bob_looks(alice_id: str) -> Callable[[ClientSession], Awaitable[dict[str, Any]]]:
    async def work(session: ClientSession) -> dict[str, Any]:
        await _ok(session, "remember", {"content": "Bob prefers tabs", "tags": ["style"]})
        alice = {"namespace": "alice"}
        seen = {
            "namespaces": await _complete(session, _prompt_ref("session-start"), "namespace", ""),
            "own_tags": await _complete(session, _prompt_ref("remember-this"), "tag", ""),
            "alice_tags": await _complete(session, _prompt_ref("remember-this"), "tag", "", alice),
            "alice_ids": await _complete(session, _template_ref("memory://{id}"), "id", alice_id[:4], alice),
            "alice_collections": await _complete(session, _template_ref("collection://{name}"), "name", "", alice),
            "alice_categories": await _complete(session, _template_ref("category://{name}"), "name", "", alice),
        }
        with pytest.raises(MCPError) as raised:
            await session.get_prompt("session-start", alice)
        seen["prompt_error"] = (raised.value.code, raised.value.message)
        seen["own_prompt"] = (await session.get_prompt("session-start", {})).messages[0].content.text
        return seen

    return work


def test_a_scoped_token_completes_and_prompts_only_its_own_namespace(scoped) -> None:  # noqa: ANN001
    live, tokens = scoped
    alice_id = _as(live, tokens["alice"], _alice_writes)["id"]
    seen = _as(live, tokens["bob"], _bob_looks(alice_id))
    assert seen["namespaces"].values == ["bob"] and seen["namespaces"].total == 1
    assert seen["own_tags"].values == ["style"]
    for key in ("alice_tags", "alice_ids", "alice_collections", "alice_categories"):
        assert seen[key].values == [] and seen[key].total == 0, key
    code, message = seen["prompt_error"]
    assert code == types.INVALID_PARAMS and "alice" in message
    assert 'namespace "bob"' in seen["own_prompt"] and "Bob prefers tabs" in seen["own_prompt"]
    assert "salary" not in seen["own_prompt"]
    # alice herself sees her values
    mine = _as(live, tokens["alice"], lambda s: _alice_completes(s, alice_id))
    assert mine["tags"] == ["salary-review"] and mine["ids"] == [alice_id] and mine["categories"] == ["alice-rules"]


async def _alice_completes(session: ClientSession, alice_id: str) -> dict[str, Any]:
    return {
        "tags": (await _complete(session, _prompt_ref("remember-this"), "tag", "sal")).values,
        "ids": (await _complete(session, _template_ref("memory://{id}"), "id", alice_id[:8])).values,
        "categories": (await _complete(session, _template_ref("category://{name}"), "name", "")).values,
    }
