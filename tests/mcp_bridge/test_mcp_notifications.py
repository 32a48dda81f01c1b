"""What the server tells an MCP client unasked, through real SDK client sessions over stdio and
streamable HTTP: progress, log messages at the level the client set, resource updates caused by
another process, and resumable HTTP streams (httpx, for the Last-Event-ID reconnect)."""
from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import ClientSession, types
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from tests.live_server import LiveServer, server_env

MASTER = "master-token-for-notifications"
CONFIG = {"embedding": {"provider": "none"}, "security": {"rate_limit_rpm": 100_000}}  # no model: remember logs a warning
ROOT = Path(__file__).resolve().parents[2]


class Heard:
    """Everything a client session received unasked."""

    def __init__(self) -> None:
        self.logs: list[types.LoggingMessageNotificationParams] = []
        self.updated: list[str] = []
        self.changed = asyncio.Event()
        self.init: types.InitializeResult | None = None

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        self.logs.append(params)
        self.changed.set()

    async def message(self, message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            self.updated.append(message.params.uri)
            self.changed.set()

    async def until(self, test: Callable[[], bool], timeout: float = 30) -> None:
        async with asyncio.timeout(timeout):
            while not test():
                self.changed.clear()
                await self.changed.wait()


def _cli(config: Path, *args: str) -> str:
    """The CLI in a process of its own (another writer than the server)."""
    proc = subprocess.run([sys.executable, "-m", "bhgbrain_site.cli.main", f"--config={config}", *args], capture_output=True,
                          text=True, env=server_env(), cwd=str(ROOT), timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@contextlib.asynccontextmanager
async def _stdio(home: Path, heard: Heard) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "bhgbrain_site.cli.main", f"--config={home / 'config.json'}", "server", "start", "--stdio"],
                                   env=server_env(), cwd=str(ROOT))
    async with stdio_client(params) as (read, write), \
            ClientSession(read, write, logging_callback=heard.log, message_handler=heard.message) as client:
        heard.init = await client.initialize()
        yield client


@contextlib.asynccontextmanager
async def _http(live: LiveServer, heard: Heard, token: str = MASTER) -> AsyncIterator[ClientSession]:
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with http, streamable_http_client(live.url + "/mcp", http_client=http) as streams, \
            ClientSession(streams[0], streams[1], logging_callback=heard.log, message_handler=heard.message) as client:
        heard.init = await client.initialize()
        yield client


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server = LiveServer(home=tmp_path_factory.mktemp("mcp-notify"), config=CONFIG, env={"BHGBRAIN_TOKEN": MASTER})
    server.home.mkdir(parents=True, exist_ok=True)
    server.config_path.write_text(json.dumps(CONFIG))
    server.alice = _cli(server.config_path, "token", "create", "--namespace", "alice", "--name", "alice")  # type: ignore[attr-defined]
    yield server.start()
    server.stop()


@pytest.fixture
def stdio_home(tmp_path: Path) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    return tmp_path


Opener = Callable[[Heard], contextlib.AbstractAsyncContextManager[ClientSession]]


@pytest.fixture(params=["stdio", "http"])
def transport(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Opener, Path]:
    """Opens a session (and names the config a second process writes through)."""
    if request.param == "stdio":
        (tmp_path / "config.json").write_text(json.dumps(CONFIG))
        return (lambda heard: _stdio(tmp_path, heard)), tmp_path / "config.json"
    server: LiveServer = request.getfixturevalue("live")
    return (lambda heard: _http(server, heard)), server.config_path


def _run(coro: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(asyncio.wait_for(coro(), timeout=180))


async def _set_level(client: ClientSession, level: types.LoggingLevel) -> None:
    # The SDK marks its helpers for these deprecated (the 2026-07-28 protocol drops logging and
    # resources/subscribe); the handshake versions clients speak today have them.
    await client.send_request(types.SetLevelRequest(params=types.SetLevelRequestParams(level=level)), types.EmptyResult)


async def _subscribe(client: ClientSession, uri: str) -> None:
    await client.send_request(types.SubscribeRequest(params=types.SubscribeRequestParams(uri=uri)), types.EmptyResult)


async def _unsubscribe(client: ClientSession, uri: str) -> None:
    await client.send_request(types.UnsubscribeRequest(params=types.UnsubscribeRequestParams(uri=uri)), types.EmptyResult)


def _increasing(values: list[float]) -> bool:
    return all(a < b for a, b in zip(values, values[1:], strict=False))


def test_capabilities_declare_logging_and_subscriptions(transport: tuple[Opener, Path]) -> None:
    opener, _config = transport

    async def session() -> types.InitializeResult | None:
        heard = Heard()
        async with opener(heard):
            return heard.init

    init = _run(session)
    assert init is not None and init.capabilities.logging is not None
    resources = init.capabilities.resources
    assert resources is not None and resources.subscribe is True
    assert not resources.list_changed  # resources/list never changes: the lists' content does (resources/updated)


def test_progress_for_import_and_backup(transport: tuple[Opener, Path]) -> None:
    opener, _config = transport

    async def session() -> dict[str, list[tuple[float, float | None, str | None]]]:
        seen: dict[str, list[tuple[float, float | None, str | None]]] = {"import": [], "backup": [], "plain": []}

        def recorder(name: str) -> Callable[[float, float | None, str | None], Awaitable[None]]:
            async def record(progress: float, total: float | None, message: str | None) -> None:
                seen[name].append((progress, total, message))
            return record

        async with opener(Heard()) as client:
            text = "\n\n".join(f"Paragraph {i} of the imported notes about the deploy pipeline." for i in range(1, 6))
            imported = await client.call_tool("import", {"format": "freeform", "content": text, "namespace": "progress"},
                                              progress_callback=recorder("import"))
            assert imported.is_error is not True, imported
            backup = await client.call_tool("backup", {"action": "create"}, progress_callback=recorder("backup"))
            assert backup.structured_content["path"].endswith(".bhgb")
            await client.call_tool("backup", {"action": "list"})  # no token: no progress, and nothing breaks
        return seen

    seen = _run(session)
    assert seen["import"] and seen["import"][-1] == (5, 5, "memories: 5/5")
    assert _increasing([p for p, _, _ in seen["import"]])
    last, total, message = seen["backup"][-1]
    assert total is not None and last == total and message is not None and message.startswith("memories: ")
    assert _increasing([p for p, _, _ in seen["backup"]])


def test_set_level_is_honoured(transport: tuple[Opener, Path]) -> None:
    """remember logs a warning (no embedding model here): not sent at "error", sent at "warning"."""
    opener, _config = transport

    async def noted(progress: float, total: float | None, message: str | None) -> None:
        return None

    async def session() -> list[types.LoggingMessageNotificationParams]:
        heard = Heard()
        async with opener(heard) as client:
            await _set_level(client, "error")
            # A progress token puts an HTTP call on a stream of its own: its log messages come before its result.
            await client.call_tool("remember", {"content": "Quiet fact: the build cache lives on the NAS", "namespace": "logs"},
                                   progress_callback=noted)
            await _set_level(client, "warning")
            await client.call_tool("remember", {"content": "Loud fact: the release train leaves on Tuesdays",
                                                "namespace": "logs"}, progress_callback=noted)
            await heard.until(lambda: any("embedding unavailable" in str(log.data) for log in heard.logs))
        return heard.logs

    logs = [log for log in _run(session) if "embedding unavailable" in str(log.data)]
    assert len(logs) == 1
    assert logs[0].level == "warning" and logs[0].logger == "bhgbrain.memories"


def test_a_change_from_another_process_reaches_the_subscriber(transport: tuple[Opener, Path]) -> None:
    opener, config = transport

    async def session() -> dict[str, Any]:
        heard = Heard()
        async with opener(heard) as client:
            stored = await client.call_tool("remember", {"content": "The staging database is db-stage-2", "namespace": "subs"})
            memory_id = stored.structured_content["id"]
            memory_uri, categories_uri = f"memory://{memory_id}?namespace=subs", "category://list?namespace=subs"
            await _subscribe(client, memory_uri)
            await _subscribe(client, categories_uri)
            tag = json.dumps({"id": memory_id, "add": ["changed"], "namespace": "subs"})
            await asyncio.to_thread(_cli, config, "tool", "tag", tag)
            await heard.until(lambda: memory_uri in heard.updated)
            await _unsubscribe(client, memory_uri)
            before = heard.updated.count(memory_uri)
            await asyncio.to_thread(_cli, config, "tool", "tag", json.dumps({"id": memory_id, "add": ["again"], "namespace": "subs"}))
            category = json.dumps({"action": "set", "name": "db-policy", "content": "Never write to prod by hand",
                                   "namespace": "subs"})
            await asyncio.to_thread(_cli, config, "tool", "category", category)
            await heard.until(lambda: categories_uri in heard.updated)  # fed after the tag: the tag was seen first
            return {"before": before, "after": heard.updated.count(memory_uri), "updated": heard.updated}

    seen = _run(session)
    assert seen["before"] == 1 and seen["after"] == 1, seen["updated"]


def test_a_scoped_token_subscribes_only_to_what_it_may_read(live: LiveServer) -> None:
    async def session() -> dict[str, Any]:
        async with _http(live, Heard()) as master:
            bobs = await master.call_tool("remember", {"content": "Bob's private note: the wifi password rotates monthly",
                                                       "namespace": "bob"})
            bob_id = bobs.structured_content["id"]
            alices = await master.call_tool("remember", {"content": "Alice's note about the demo", "namespace": "alice"})
        refused = []
        async with _http(live, Heard(), token=live.alice) as alice:  # type: ignore[attr-defined]
            for uri in (f"memory://{bob_id}", f"memory://{bob_id}?namespace=bob", "memory://list?namespace=bob",
                        "category://list?namespace=bob"):
                with pytest.raises(MCPError) as caught:
                    await _subscribe(alice, uri)
                refused.append(caught.value.message)
            await _subscribe(alice, f"memory://{alices.structured_content['id']}")
            await _subscribe(alice, "memory://list?namespace=alice")
        return {"refused": refused}

    refused = _run(session)["refused"]
    assert len(refused) == 4
    assert all("Cannot subscribe" in message for message in refused)


def _events(lines: Iterator[str]) -> Iterator[dict[str, str]]:
    """SSE events (id, data, retry) from a response's lines."""
    event: dict[str, str] = {}
    for line in lines:
        if not line:
            if event:
                yield event
            event = {}
        elif not line.startswith(":"):
            key, _, value = line.partition(":")
            event[key] = event.get(key, "") + value.removeprefix(" ")


def test_a_lost_stream_is_resumed_with_last_event_id(live: LiveServer) -> None:
    """Over raw HTTP: a call with a progress token answers on an SSE stream that starts with a
    priming event (id, retry); the client drops it at once, reconnects with Last-Event-ID and gets
    the rest, the result included. Another session cannot replay it; DELETE ends the session."""
    base = {"Authorization": f"Bearer {MASTER}", "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json", "MCP-Protocol-Version": "2025-11-25"}
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}

    def open_session(client: httpx.Client) -> dict[str, str]:
        with client.stream("POST", "/mcp", json=init, headers=base) as opened:
            assert opened.status_code == 200
            session = {**base, "Mcp-Session-Id": opened.headers["mcp-session-id"]}
            list(opened.iter_lines())
        client.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=session)
        return session

    call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "backup", "arguments": {"action": "create"}, "_meta": {"progressToken": "p-7"}}}
    with httpx.Client(base_url=live.url, timeout=60) as client:
        session = open_session(client)
        plain = client.post("/mcp", json={"jsonrpc": "2.0", "id": 2, "method": "ping"}, headers=session)
        assert plain.headers["content-type"].startswith("application/json")  # no token: a plain JSON answer
        with client.stream("POST", "/mcp", json=call, headers=session) as streamed:
            assert streamed.headers["content-type"].startswith("text/event-stream")
            priming = next(_events(streamed.iter_lines()))  # then the client goes away
        assert priming["data"] == "" and priming["retry"] == "2000" and priming["id"]

        stranger = open_session(client)
        with client.stream("GET", "/mcp", headers={**stranger, "Last-Event-ID": priming["id"]}) as replayed:
            assert not [e for e in _events(replayed.iter_lines()) if e.get("data")]  # not its stream

        messages = []
        with client.stream("GET", "/mcp", headers={**session, "Last-Event-ID": priming["id"]}) as resumed:
            assert resumed.status_code == 200
            for event in _events(resumed.iter_lines()):
                if event.get("data"):
                    messages.append(json.loads(event["data"]))
                    if messages[-1].get("id") == 7:
                        break
        assert messages[-1]["result"]["structuredContent"]["path"].endswith(".bhgb")
        progress = [m["params"] for m in messages if m.get("method") == "notifications/progress"]
        assert progress and all(p["progressToken"] == "p-7" for p in progress)

        assert client.delete("/mcp", headers=session).status_code == 200
        assert client.post("/mcp", json={"jsonrpc": "2.0", "id": 3, "method": "ping"}, headers=session).status_code == 404


def test_a_session_belongs_to_the_caller_that_opened_it(live: LiveServer) -> None:
    """Alice's session id in another caller's request is an unknown session (404): the other
    caller cannot ride on alice's subscriptions, log level or replayable streams."""
    alice = {"Authorization": f"Bearer {live.alice}", "Accept": "application/json, text/event-stream",  # type: ignore[attr-defined]
             "Content-Type": "application/json", "MCP-Protocol-Version": "2025-11-25"}
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    with httpx.Client(base_url=live.url, timeout=60) as client:
        with client.stream("POST", "/mcp", json=init, headers=alice) as opened:
            session_id = opened.headers["mcp-session-id"]
            list(opened.iter_lines())
        alices = {**alice, "Mcp-Session-Id": session_id}
        client.post("/mcp", json={"jsonrpc": "2.0", "method": "notifications/initialized"}, headers=alices)
        as_master = {**alices, "Authorization": f"Bearer {MASTER}"}
        refused = client.post("/mcp", json=ping, headers=as_master)
        assert refused.status_code == 404 and "session" in refused.json()["error"]["message"].lower()
        assert client.get("/mcp", headers=as_master).status_code == 404  # nor its notification stream
        assert client.delete("/mcp", headers=as_master).status_code == 404  # nor may it end the session
        assert client.post("/mcp", json=ping, headers=alices).status_code == 200  # still alice's
        assert client.delete("/mcp", headers=alices).status_code == 200
