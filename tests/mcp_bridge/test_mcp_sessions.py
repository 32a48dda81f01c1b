"""Real MCP client sessions (the mcp SDK client) against the real server: stdio and streamable HTTP."""
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
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from tests.live_server import LiveServer, server_env

TOOLS = {"remember", "recall", "search", "forget", "tag", "collections", "category", "bootstrap", "import", "backup", "repair",
         "thread_append", "event", "handoff"}
RESOURCES = {"memory://list", "memory://inject", "memory://handoff", "category://list", "collection://list",
             "health://status"}
TEMPLATES = {"memory://{id}", "category://{name}", "collection://{name}", "memory://{id}/history"}


def _text(result: Any) -> dict[str, Any]:
    return json.loads(result.contents[0].text)


async def _exercise(session: ClientSession, server: str | None = None) -> dict[str, Any]:
    """Everything an agent does: list, call every tool, read every resource, hit errors. ``server``:
    the server's name if the session is already open (2026-07-28: no initialize)."""
    seen: dict[str, Any] = {}
    seen["server"] = server or (await session.initialize()).server_info.name
    seen["tools"] = {t.name for t in (await session.list_tools()).tools}
    seen["resources"] = {str(r.uri) for r in (await session.list_resources()).resources}
    seen["templates"] = {t.uri_template for t in (await session.list_resource_templates()).resource_templates}
    ns = {"namespace": "mcp-test"}

    async def call(name: str, args: dict[str, Any]) -> Any:
        return await session.call_tool(name, args)

    first = await call("remember", {"content": "The staging VPN uses WireGuard on port 51820", "tags": ["vpn"], **ns})
    assert first.is_error is not True, first
    memory_id = first.structured_content["id"]
    assert json.loads(first.content[0].text) == first.structured_content
    seen["recall"] = (await call("recall", {"query": "which VPN does staging use?", **ns})).structured_content
    seen["search"] = (await call("search", {"query": "WireGuard port", "mode": "fulltext", **ns})).structured_content
    seen["tag"] = (await call("tag", {"id": memory_id, "add": ["network"], **ns})).structured_content
    seen["collections"] = (await call("collections", {"action": "list", **ns})).structured_content
    seen["category"] = (await call("category", {"action": "set", "name": "net-policy", "slot": "architecture",
                                                "content": "All remote access goes through the VPN", **ns})).structured_content
    seen["bootstrap"] = (await call("bootstrap", {"action": "start", "namespace": "mcp-profile"})).structured_content
    seen["import"] = (await call("import", {"format": "freeform", "content": "One.\n\nTwo.", "dry_run": True})).structured_content
    seen["backup"] = (await call("backup", {"action": "create"})).structured_content
    seen["backup_list"] = (await call("backup", {"action": "list"})).structured_content
    seen["memory_list"] = _text(await session.read_resource("memory://list?namespace=mcp-test&limit=5"))
    seen["inject"] = _text(await session.read_resource("memory://inject?namespace=mcp-test"))
    seen["category_list"] = _text(await session.read_resource("category://list?namespace=mcp-test"))
    seen["collection_list"] = _text(await session.read_resource("collection://list?namespace=mcp-test"))
    seen["health"] = _text(await session.read_resource("health://status"))
    seen["memory"] = _text(await session.read_resource(f"memory://{memory_id}?namespace=mcp-test"))
    seen["memory_other_ns"] = _text(await session.read_resource(f"memory://{memory_id}?namespace=elsewhere"))
    seen["category"] = _text(await session.read_resource("category://net-policy?namespace=mcp-test"))
    seen["collection"] = _text(await session.read_resource("collection://general?namespace=mcp-test"))
    seen["bad_limit"] = _text(await session.read_resource("memory://list?limit=101"))
    seen["bad_input"] = await call("remember", {"content": "x", "surprise": True})
    seen["secret"] = await call("remember", {"content": "key sk-" + "a" * 30})
    seen["unknown_tool"] = await call("teleport", {})
    seen["repair"] = await call("repair", {"dry_run": True})  # the embedded index has nothing to repair from
    seen["forget"] = (await call("forget", {"id": memory_id, **ns})).structured_content
    seen["forget_again"] = await call("forget", {"id": memory_id, **ns})
    seen["restore"] = (await call("backup", {"action": "restore", "path": seen["backup"]["path"]})).structured_content
    seen["restored_memory"] = _text(await session.read_resource(f"memory://{memory_id}?namespace=mcp-test"))
    seen["memory_id"] = memory_id
    return seen


def _check(seen: dict[str, Any]) -> None:
    assert seen["server"] == "bhgbrain"
    assert seen["tools"] == TOOLS
    assert seen["resources"] == RESOURCES
    assert seen["templates"] == TEMPLATES
    assert seen["recall"]["results"][0]["id"] == seen["memory_id"]
    assert seen["search"]["results"][0]["id"] == seen["memory_id"]
    assert seen["tag"] == {"id": seen["memory_id"], "tags": ["vpn", "network"]}
    assert seen["collections"] == {"collections": [{"name": "general", "count": 1}]}
    assert seen["bootstrap"]["next"]["section"] == 1
    assert seen["import"]["dry_run"] is True and len(seen["import"]["previews"]) == 2
    assert seen["backup"]["path"].endswith(".bhgb") and seen["backup"]["memory_count"] >= 1
    assert seen["backup"]["path"] in {b["path"] for b in seen["backup_list"]["backups"]}
    assert seen["restore"]["activated"] is True
    assert seen["restored_memory"]["id"] == seen["memory_id"]  # forgotten, then brought back by the restore
    assert seen["memory_list"]["items"][0]["id"] == seen["memory_id"] and seen["memory_list"]["total_results"] == 1
    assert seen["inject"]["content"].startswith("## net-policy (architecture)\nAll remote access goes through the VPN")
    assert "WireGuard" in seen["inject"]["content"] and seen["inject"]["memories_count"] == 1
    assert seen["category_list"]["categories"][0]["name"] == "net-policy"
    assert seen["collection_list"] == {"collections": [{"name": "general", "count": 1}]}
    assert seen["health"]["status"] in ("healthy", "degraded")
    assert seen["memory"]["id"] == seen["memory_id"] and seen["memory"]["tags"] == ["vpn", "network"]
    assert seen["memory_other_ns"]["error"]["code"] == "NOT_FOUND"
    assert seen["category"]["content"] == "All remote access goes through the VPN"
    assert seen["collection"]["items"][0]["id"] == seen["memory_id"]
    assert seen["bad_limit"]["error"]["code"] == "INVALID_INPUT"
    for key, code in (("bad_input", "INVALID_INPUT"), ("secret", "INVALID_INPUT"), ("unknown_tool", "NOT_FOUND"),
                      ("repair", "INVALID_INPUT"), ("forget_again", "NOT_FOUND")):
        result = seen[key]
        assert result.is_error is True, key
        assert result.structured_content["error"]["code"] == code, key
    assert "surprise" in seen["bad_input"].structured_content["error"]["message"]
    assert seen["forget"] == {"deleted": True, "id": seen["memory_id"]}


def _run(coro_factory: Callable[[], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
    return asyncio.run(asyncio.wait_for(coro_factory(), timeout=120))


def _stdio_params(home: Path) -> StdioServerParameters:
    home.mkdir(parents=True, exist_ok=True)
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "bhgbrain_site.cli.main", f"--config={home / 'config.json'}", "server", "start", "--stdio"],
        env=server_env(), cwd=str(Path(__file__).resolve().parents[2]),
    )


def test_stdio_session_lists_calls_and_reads_everything(tmp_path: Path) -> None:
    async def session() -> dict[str, Any]:
        async with stdio_client(_stdio_params(tmp_path)) as (read, write):
            async with ClientSession(read, write) as client:
                return await _exercise(client)

    _check(_run(session))


def test_stdio_stdout_carries_only_protocol(tmp_path: Path) -> None:
    """Raw check: every line the server writes to stdout is a JSON-RPC message."""
    params = _stdio_params(tmp_path)
    request = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}
    proc = subprocess.run(
        [params.command, *params.args], input=json.dumps(request) + "\n", capture_output=True, text=True,
        env=params.env, cwd=params.cwd, timeout=90,
    )
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert lines, proc.stderr
    for line in lines:
        assert json.loads(line)["jsonrpc"] == "2.0"
    assert json.loads(lines[0])["result"]["serverInfo"]["name"] == "bhgbrain"


@pytest.fixture(scope="module")
def http_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    live = LiveServer(home=tmp_path_factory.mktemp("mcp-http")).start()
    yield live
    live.stop()


def test_streamable_http_session_lists_calls_and_reads_everything(http_server: LiveServer) -> None:
    async def session() -> dict[str, Any]:
        async with streamable_http_client(http_server.url + "/mcp") as streams:
            async with ClientSession(streams[0], streams[1]) as client:
                return await _exercise(client)

    _check(_run(session))


def test_the_sdks_own_client_speaks_2026_07_28_and_does_everything_in_single_exchanges(tmp_path: Path) -> None:
    """The SDK's ``Client`` (mode "auto", its default) finds through ``server/discover`` that this
    server speaks 2026-07-28, and then sends every request as one self-contained POST: no
    initialize, no session. Everything an agent does works the same way on that protocol."""
    from mcp.client.client import Client

    live = LiveServer(home=tmp_path).start()
    sessions: list[str | None] = []

    async def note_session(response: Any) -> None:
        sessions.append(response.headers.get("mcp-session-id"))

    async def session() -> dict[str, Any]:
        http = create_mcp_http_client()
        http.event_hooks["response"].append(note_session)
        async with http, Client(streamable_http_client(live.url + "/mcp", http_client=http)) as client:
            assert client.protocol_version == "2026-07-28"
            return await _exercise(client.session, server=client.server_info.name)

    try:
        _check(_run(session))
    finally:
        live.stop()
    assert len(sessions) > 30 and set(sessions) == {None}


def test_streamable_http_requires_the_bearer_token_when_configured(tmp_path: Path) -> None:
    live = LiveServer(home=tmp_path, env={"BHGBRAIN_TOKEN": "mcp-secret-token"}).start()
    try:
        import httpx

        denied = httpx.post(live.url + "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert denied.status_code == 401 and denied.json()["error"]["code"] == "AUTH_REQUIRED"

        async def session() -> dict[str, Any]:
            client = create_mcp_http_client(headers={"Authorization": "Bearer mcp-secret-token"})
            async with client, streamable_http_client(live.url + "/mcp", http_client=client) as streams:
                async with ClientSession(streams[0], streams[1]) as mcp_client:
                    await mcp_client.initialize()
                    result = await mcp_client.call_tool("remember", {"content": "Authenticated over MCP HTTP"})
                    return {"result": result}

        assert _run(session)["result"].structured_content["operation"] == "ADD"
    finally:
        live.stop()


def test_started_as_claude_desktop_would_remember_and_recall(tmp_path: Path) -> None:
    """The console script, as in the README's claude_desktop_config.json: own cwd, minimal env."""
    script = Path(sys.executable).with_name("bhgbrain")
    env = {"HOME": str(tmp_path), "PATH": os.environ.get("PATH", "")}
    params = StdioServerParameters(command=str(script), args=["server", "start", "--stdio"], env=env, cwd=str(tmp_path))

    async def session() -> dict[str, Any]:
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as client:
                await client.initialize()
                stored = await client.call_tool("remember", {"content": "Claude Desktop stored this: deploy freeze starts Dec 20"})
                recalled = await client.call_tool("recall", {"query": "when does the deploy freeze start?"})
                return {"stored": stored, "recalled": recalled}

    seen = _run(session)
    assert seen["stored"].structured_content["operation"] == "ADD"
    assert seen["recalled"].structured_content["results"][0]["id"] == seen["stored"].structured_content["id"]
    assert (tmp_path / ".bhgbrain" / "config.json").exists()  # first run created the default config


CHAT = [
    {"speaker": "Bob", "content": "Did you try the new ramen place on Rua Augusta?", "message_id": "c-1",
     "occurred_at": "2024-03-01T12:00:00Z"},
    {"speaker": "Ann", "content": "Yes, went there last Friday with my sister.", "message_id": "c-2",
     "occurred_at": "2024-03-01T12:01:00Z"},
    {"speaker": "Bob", "content": "How was the broth?", "message_id": "c-3", "occurred_at": "2024-03-01T12:02:00Z"},
    {"speaker": "Ann", "content": "Rich and smoky, I prefer it to the one near the office.", "message_id": "c-4",
     "occurred_at": "2024-03-01T12:03:00Z"},
]


async def _conversation(session: ClientSession) -> dict[str, Any]:
    await session.initialize()
    seen: dict[str, Any] = {}
    appended = await session.call_tool("thread_append", {"thread": "lunch", "namespace": "chat", "messages": CHAT})
    seen["appended"] = appended.structured_content
    seen["recalled"] = (await session.call_tool("recall", {
        "query": "where did Ann go with her sister?", "namespace": "chat", "with_context": 1, "min_score": 0.0,
    })).structured_content
    seen["small_talk"] = (await session.call_tool("recall", {"query": "haha thanks!", "namespace": "chat",
                                                             "gate": True})).structured_content
    seen["handoff"] = json.loads((await session.read_resource("memory://handoff?namespace=chat&thread=lunch"))
                                 .contents[0].text)
    return seen


def _resend(session_factory: Callable[[], Any]) -> Callable[[], Awaitable[dict[str, Any]]]:
    async def run() -> dict[str, Any]:
        async with session_factory() as streams:
            async with ClientSession(streams[0], streams[1]) as client:
                await client.initialize()
                again = await client.call_tool("remember", {"thread": "lunch", "namespace": "chat", **CHAT[1]})
                return {"again": again.structured_content}

    return run


def test_a_conversation_over_mcp_and_a_resent_message_after_a_restart(tmp_path: Path) -> None:
    live = LiveServer(home=tmp_path).start()
    try:
        async def session() -> dict[str, Any]:
            async with streamable_http_client(live.url + "/mcp") as streams:
                async with ClientSession(streams[0], streams[1]) as client:
                    return await _conversation(client)

        seen = _run(session)
    finally:
        live.stop()
    assert seen["appended"]["added"] == 4 and seen["appended"]["noop"] == 0
    ids = [r["id"] for r in seen["appended"]["results"]]
    hits = {r["id"]: r for r in seen["recalled"]["results"][:2]}
    assert ids[1] in hits  # the turn that answers, or the one right after it, comes first
    hit = hits[ids[1]]
    assert hit["thread"] == "lunch" and hit["speaker"] == "Ann" and hit["occurred_at"] == "2024-03-01T12:01:00Z"
    assert [t["content"] for t in hit["context"]["before"]] == [CHAT[0]["content"]]
    assert [t["content"] for t in hit["context"]["after"]] == [CHAT[2]["content"]]
    assert seen["small_talk"] == {"results": [], "meta": {"skipped": "laughter"}}
    pack = seen["handoff"]
    assert "## Last turns" in pack["content"] and "Ann: Rich and smoky" in pack["content"] and pack["chars"] <= 1500
    assert "I prefer it to the one near the office" in pack["content"].split("## Preferences")[1]

    restarted = LiveServer(home=tmp_path, port=live.port).start()  # same store, new process
    try:
        again = _run(_resend(lambda: streamable_http_client(restarted.url + "/mcp")))["again"]
    finally:
        restarted.stop()
    assert (again["operation"], again["id"]) == ("NOOP", ids[1])


def _stdio_recall(home: Path, errlog: Path, *, remember: str | None = None) -> dict[str, Any]:
    """One short stdio session (it ends right after its first recall), its log in ``errlog``."""
    async def session() -> dict[str, Any]:
        with errlog.open("w") as log:
            async with stdio_client(_stdio_params(home), errlog=log) as (read, write):
                async with ClientSession(read, write) as client:
                    await client.initialize()
                    stored = None
                    if remember is not None:
                        stored = (await client.call_tool("remember", {"content": remember})).structured_content
                    recalled = await client.call_tool("recall", {"query": "when does the deploy freeze start?"})
                    return {"stored": stored, "recalled": recalled.structured_content}

    return _run(session)


def test_short_stdio_sessions_leave_open_and_check_the_index_snapshot(tmp_path: Path) -> None:
    """A session that ends right after its first recall still leaves its vector snapshot (the
    process lets the write finish); the next session opens it, its files hashed while it
    started; a corrupt file is still rejected and the index loaded from the database."""
    home, log = tmp_path / "home", tmp_path / "stderr.log"
    first = _stdio_recall(home, log, remember="The deploy freeze starts on December 20")
    memory_id = first["stored"]["id"]
    assert first["recalled"]["results"][0]["id"] == memory_id
    manifests = list((home / "index-snapshots").glob("vector-*.json"))
    assert len(manifests) == 1, log.read_text()

    second = _stdio_recall(home, log)
    assert second["recalled"]["results"][0]["id"] == memory_id
    assert "vector index: opened snapshot" in log.read_text()

    manifest = json.loads(manifests[0].read_text())
    matrix = home / "index-snapshots" / manifest["directory"] / "matrix.npy"
    data = bytearray(matrix.read_bytes())
    data[-3] ^= 0xFF
    matrix.write_bytes(bytes(data))
    third = _stdio_recall(home, log)
    assert third["recalled"]["results"][0]["id"] == memory_id
    assert "matrix.npy fails its checksum" in log.read_text()
