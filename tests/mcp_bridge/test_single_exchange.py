"""Stateless MCP over HTTP answers a plain call in one exchange (mcp_bridge/single_exchange.py) with
exactly what the SDK's stateless transport answers: the same status, content type and JSON-RPC body,
request for request. Each request goes to the same app twice, once with the single exchange and once
with it switched off, and the test checks which of the two paths answered."""
from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from bhgbrain_site.core.calls import Principal
from mcp_bridge import single_exchange
from mcp_bridge.server import PRINCIPAL_SCOPE_KEY, build_server
from mcp_bridge.streamable_http import http_app

pytestmark = pytest.mark.django_db(transaction=True)

URL = "http://127.0.0.1:3721"
HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json",
           "mcp-protocol-version": "2025-11-25"}
EVERYONE = Principal(name="test", namespaces=None)


def _call(method: str, params: Any, request_id: Any = 1) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def _tool(name: str, arguments: Any) -> dict[str, Any]:
    return _call("tools/call", {"name": name, "arguments": arguments})


class Stateless:
    """The stateless MCP app (as several workers run it) behind a caller (by default, one with every
    namespace)."""

    def __init__(self, principal: Principal = EVERYONE) -> None:
        self.principal = principal
        server = build_server("http", sessions=False)
        self.app = http_app(server, sessions=False, host="127.0.0.1", transport_security=None,
                            max_request_body_size=64 * 1024)
        self.server = server
        self.exchanges = 0

    async def asgi(self, scope: dict[str, Any], receive: Callable[[], Awaitable[Any]], send: Any) -> None:
        scope[PRINCIPAL_SCOPE_KEY] = self.principal
        await self.app(scope, receive, send)

    async def post(self, body: Any, headers: dict[str, str] | None = None) -> httpx.Response:
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=self.asgi), base_url=URL) as client:
            return await client.post("/mcp", content=content, headers=headers or HEADERS)


def _both(requests: list[tuple[Any, dict[str, str] | None]], monkeypatch: pytest.MonkeyPatch,
          principal: Principal = EVERYONE) -> list[tuple[httpx.Response, httpx.Response, bool]]:
    """Each request answered with the single exchange on, then off: (on, off, whether it answered)."""
    real = single_exchange.serve_one
    app = Stateless(principal)

    async def counted(*args: Any, **kwargs: Any) -> dict[str, Any]:
        app.exchanges += 1
        return await real(*args, **kwargs)

    monkeypatch.setattr(single_exchange, "serve_one", counted)

    async def run() -> list[tuple[httpx.Response, httpx.Response, bool]]:
        answers = []
        async with app.server.session_manager.run():
            for body, headers in requests:
                before = app.exchanges
                on = await app.post(body, headers)
                answered = app.exchanges > before
                with monkeypatch.context() as off_switch:
                    off_switch.setattr(single_exchange, "METHODS", frozenset())
                    off = await app.post(body, headers)
                answers.append((on, off, answered))
        return answers

    return asyncio.run(run())


MOVING = ("last_accessed", "expires_at")  # a search's access moves a hit's sliding window on


def _settled(answer: Any) -> Any:
    """``answer`` without the fields each access moves on (the text block's JSON too)."""
    if isinstance(answer, list):
        return [_settled(item) for item in answer]
    if not isinstance(answer, dict):
        return answer
    if answer.get("type") == "text":
        return {**answer, "text": _settled(json.loads(answer["text"]))}
    return {key: _settled(value) for key, value in answer.items() if key not in MOVING}


def _same(on: httpx.Response, off: httpx.Response) -> None:
    assert (on.status_code, on.headers.get("content-type")) == (off.status_code, off.headers.get("content-type"))
    if on.headers.get("content-type") == "application/json" and on.content:
        assert _settled(on.json()) == _settled(off.json())
    else:
        assert on.content == off.content
    assert "mcp-session-id" not in on.headers


def test_plain_calls_are_answered_in_one_exchange_exactly_as_the_sdk_answers_them(monkeypatch: pytest.MonkeyPatch) -> None:
    requests = [
        (_tool("remember", {"content": "The deploy window is Tuesday 14:00 UTC", "namespace": "single"}), None),
        (_tool("search", {"query": "deploy window", "namespace": "single", "mode": "fulltext"}), None),
        (_tool("search", {"query": ""}), None),  # the tool's own error result (INVALID_INPUT)
        (_tool("no_such_tool", {}), None),
        (_tool("search", "not an object"), None),  # the SDK's INVALID_PARAMS
        (_call("tools/call", {"arguments": {}}, request_id="text-id"), None),  # no tool name
        (_call("resources/read", {"uri": "memory://inject"}), None),
        (_call("resources/read", {"uri": "memory://nowhere/x"}), None),
    ]
    answers = _both([(body, headers) for body, headers in requests], monkeypatch)
    for (on, off, answered), (body, _headers) in zip(answers, requests, strict=True):
        assert answered, body
        if body["params"] != {"name": "remember", "arguments": requests[0][0]["params"]["arguments"]}:
            _same(on, off)  # a second remember of the same content answers NOOP instead of ADD
    remembered, found = answers[0][0].json()["result"], answers[1][0].json()["result"]
    assert remembered["structuredContent"]["operation"] == "ADD"
    assert answers[0][1].json()["result"]["structuredContent"]["operation"] == "NOOP"
    assert [hit["id"] for hit in found["structuredContent"]["results"]] == [remembered["structuredContent"]["id"]]
    assert json.loads(answers[2][0].json()["result"]["content"][0]["text"])["error"]["code"] == "INVALID_INPUT"
    assert answers[4][0].json()["error"]["code"] == -32602


def test_a_scoped_token_reaches_only_its_namespaces_in_one_exchange_too(monkeypatch: pytest.MonkeyPatch) -> None:
    _both([(_tool("remember", {"content": "Elsewhere: the vault key rotates monthly", "namespace": "elsewhere"}), None)],
          monkeypatch)  # written by a caller with every namespace
    scoped = Principal(name="scoped", namespaces=frozenset({"single"}))
    requests = [
        (_tool("search", {"query": "vault key", "namespace": "elsewhere", "mode": "fulltext"}), None),
        (_tool("search", {"query": "vault key", "mode": "fulltext"}), None),  # its own namespace: nothing there
        (_tool("remember", {"content": "Written where it may not write", "namespace": "elsewhere"}), None),
        (_call("resources/read", {"uri": "memory://list?namespace=elsewhere"}), None),
    ]
    answers = _both(requests, monkeypatch, scoped)
    for on, off, answered in answers:
        assert answered
        _same(on, off)
    refused = [answers[0][0].json()["result"], answers[2][0].json()["result"]]
    assert all(result["isError"] and result["structuredContent"]["error"]["code"] == "FORBIDDEN" for result in refused)
    assert answers[1][0].json()["result"]["structuredContent"]["results"] == []
    listed = json.loads(answers[3][0].json()["result"]["contents"][0]["text"])
    assert "vault" not in json.dumps(listed) and listed.get("error", {}).get("code") == "FORBIDDEN"


def test_what_is_not_a_plain_call_goes_to_the_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    search = _tool("search", {"query": "anything", "namespace": "single"})
    initialize = _call("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                      "clientInfo": {"name": "test", "version": "1"}})
    requests: list[tuple[Any, dict[str, str] | None]] = [
        (initialize, None),
        (_call("tools/list", {}), None),
        ({"jsonrpc": "2.0", "method": "notifications/initialized"}, None),
        ([search], None),  # a batch
        (b"{not json", None),
        (_call("tools/call", {"name": "search", "arguments": {"query": "x"}, "_meta": {"progressToken": 7}}), None),
        (search, {**HEADERS, "accept": "text/event-stream"}),  # cannot take a JSON answer: 406
        (search, {**HEADERS, "content-type": "text/plain"}),
        (search, {**HEADERS, "host": "evil.example"}),  # DNS rebinding guard: 421
        (search, {**HEADERS, "mcp-protocol-version": "1999-01-01"}),  # an unknown version
    ]
    answers = _both(requests, monkeypatch)
    for (on, off, answered), (body, headers) in zip(answers, requests, strict=True):
        assert not answered, (body, headers)
        if not (isinstance(body, dict) and body.get("method") == "initialize"):
            _same(on, off)
    statuses = [on.status_code for on, _off, _answered in answers]
    assert statuses[6:9] == [406, 400, 421]


MODERN_META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
               "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
               "io.modelcontextprotocol/clientCapabilities": {}}


@pytest.mark.parametrize("sessions", [True, False], ids=["one worker", "several workers"])
def test_a_2026_07_28_call_does_not_list_every_tool_first(sessions: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK checks a 2026-07-28 call's ``Mcp-Param-*`` headers against the tool's input schema.
    Given no lookup, it ran the whole ``tools/list`` handler before every call with arguments: a
    Python SDK ``Client`` call took 50 ms instead of 10. The server answers the lookup itself."""
    from mcp_bridge import server as mcp_server

    listed: list[int] = []
    real = mcp_server.tool_definitions
    monkeypatch.setattr(mcp_server, "tool_definitions", lambda: listed.append(1) or real())
    server = build_server("http", sessions=sessions)
    app = http_app(server, sessions=sessions, host="127.0.0.1", transport_security=None, max_request_body_size=65536)
    headers = {**HEADERS, "mcp-protocol-version": "2026-07-28", "mcp-method": "tools/call", "mcp-name": "search"}
    body = _call("tools/call", {"name": "search", "arguments": {"query": "anything", "namespace": "single"},
                                "_meta": MODERN_META})

    async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
        scope[PRINCIPAL_SCOPE_KEY] = EVERYONE
        await app(scope, receive, send)

    async def run() -> list[httpx.Response]:
        async with server.session_manager.run():
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=asgi), base_url=URL) as client:
                return [await client.post("/mcp", json=body, headers=headers) for _ in range(3)]

    answers = asyncio.run(run())
    assert [a.status_code for a in answers] == [200, 200, 200]
    assert all(a.headers["content-type"] == "application/json" for a in answers)  # one exchange, not a stream
    assert all(a.json()["result"]["structuredContent"]["results"] == [] for a in answers)
    assert listed == []
    assert server.get_tool_input_schema is not None
    assert server.get_tool_input_schema("search") == {t.name: t.input_schema for t in real()}["search"]
    assert server.get_tool_input_schema("no_such_tool") is None
