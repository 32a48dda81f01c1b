"""MCP streamable HTTP, fully: a JSON body or an SSE stream per request, resumable streams.

**JSON or SSE, per request.** A POST whose answer is one JSON body costs ~2.5 ms less than an SSE
stream (docs/performance.md), so plain calls get JSON. A request that asks for progress
(``_meta.progressToken``) is answered with an SSE stream, so its notifications can flow before the
result; so is a session's opening request (``initialize``), see :func:`_streams`. The SDK decides
JSON or SSE per transport (``json_response``); :class:`_JsonUnlessStreamed` stands in for that
flag and answers, in each request's own context, what :func:`response_mode` decided for it.

**Resumable streams.** :class:`BoundedEventStore` keeps the last EVENTS_KEPT events of the
process's SSE streams. Each POST stream starts with a priming event (an id, empty data and a
``retry`` field, SEP-1699); a client that lost a stream reconnects with ``GET`` and
``Last-Event-ID`` and gets the events it missed, its own session's only. The store is in memory:
with several workers the MCP endpoint is stateless (no sessions, no event store), since the next
request may reach another process.

**Stateless calls in one exchange.** Without sessions, a plain call answered with JSON is
answered by :class:`~mcp_bridge.single_exchange.SingleExchange` in the request's own task; a
2026-07-28 request (no session, with one worker or several) is the SDK's single exchange already.

**A session belongs to its caller.** The SDK would let anyone who holds a session id use the
session (it binds one to a credential only through Starlette's ``scope["user"]``, which this
shell does not set). :class:`SessionOwners` remembers which principal opened each session and
answers a request that carries another principal's session id as if the id were unknown (404):
its subscriptions, log level and replayable events stay its opener's.
"""
from __future__ import annotations

import contextvars
import itertools
import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

from mcp.server.lowlevel import Server
from mcp.server.streamable_http import GET_STREAM_KEY, EventCallback, EventId, EventMessage, EventStore, StreamId
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import JSONRPCMessage
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from bhgbrain_site.core.calls import Principal
from mcp_bridge.notifications import STREAMED_KEY
from mcp_bridge.server import PRINCIPAL_SCOPE_KEY
from mcp_bridge.single_exchange import VERSION_HEADER, SingleExchange

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

EVENTS_KEPT = 2000  # SSE events kept for resumption, all sessions of the process together
RETRY_MS = 2000  # the `retry` field of priming events: how soon a client reconnects a lost stream
SESSION_HEADER = b"mcp-session-id"

_streamed: contextvars.ContextVar[bool] = contextvars.ContextVar("bhgbrain_mcp_streamed", default=True)


class _Session:
    """The MCP session a request (and, copied with its context, a session's message router)
    belongs to: known from the request header, or from the answer to the opening request."""

    def __init__(self, session_id: str | None) -> None:
        self.id = session_id


_session: contextvars.ContextVar[_Session | None] = contextvars.ContextVar("bhgbrain_mcp_session", default=None)


def _session_id() -> str | None:
    session = _session.get()
    return session.id if session is not None else None


class SessionOwners:
    """Which principal opened each session of this process (the newest ``kept``)."""

    def __init__(self, kept: int = 10_000) -> None:
        self.kept = kept
        self.owners: OrderedDict[str, Principal | None] = OrderedDict()

    def opened(self, session_id: str, principal: Principal | None) -> None:
        self.owners[session_id] = principal
        while len(self.owners) > self.kept:
            self.owners.popitem(last=False)

    def closed(self, session_id: str) -> None:
        self.owners.pop(session_id, None)

    def refuses(self, session_id: str, principal: Principal | None) -> bool:
        """Whether a request by ``principal`` must not use the session (another caller opened it)."""
        return session_id in self.owners and self.owners[session_id] != principal


_UNKNOWN_SESSION = json.dumps({"jsonrpc": "2.0", "id": None, "error": {
    "code": -32600, "message": "Not Found: Invalid or expired session ID"}}).encode()


async def _unknown_session(send: Send) -> None:
    """The SDK's answer to a session id it does not know."""
    await send({"type": "http.response.start", "status": 404, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(_UNKNOWN_SESSION)).encode())]})
    await send({"type": "http.response.body", "body": _UNKNOWN_SESSION})


class _JsonUnlessStreamed:
    """The transport's ``is_json_response_enabled``, decided per request (read in the request's
    context; a session's message router reads it in the context of the request that opened the
    session, which is streamed, so the router never drops a streamed request's notifications)."""

    def __bool__(self) -> bool:
        return not _streamed.get()


def _wants_progress(body: bytes) -> bool:
    if b"progressToken" not in body:  # the common case costs one substring search
        return False
    try:
        message = json.loads(body)
    except ValueError:
        return False
    meta = (message.get("params") or {}).get("_meta") if isinstance(message, dict) else None
    return isinstance(meta, dict) and meta.get("progressToken") is not None


def _accepts_sse(scope: Scope) -> bool:
    accept = b",".join(value for key, value in scope.get("headers", []) if key == b"accept")
    return b"text/event-stream" in accept or b"*/*" in accept


def _header(scope: Scope, name: bytes) -> str | None:
    return next((value.decode("latin-1") for key, value in scope.get("headers", []) if key == name), None)


def _streams(scope: Scope, body: bytes, *, sessions: bool) -> bool:
    """SSE for a request that asks for progress, and for a session's opening request: the
    session's message router runs in that request's context, and must see "streamed" (a JSON
    request's router drops every notification about a request). A 2026-07-28 request carries no
    session id yet opens none: it is one exchange (the SDK's ``handle_modern_request``)."""
    if not _accepts_sse(scope):
        return False
    opens_session = sessions and _header(scope, SESSION_HEADER) is None and not _modern(scope)
    return _wants_progress(body) or opens_session


def _modern(scope: Scope) -> bool:
    return _header(scope, VERSION_HEADER) in MODERN_PROTOCOL_VERSIONS


async def _read_body(receive: Receive) -> tuple[list[dict[str, Any]], bytes]:
    messages, chunks = [], []
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            return messages, b"".join(chunks)
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return messages, b"".join(chunks)


def response_mode(app: Callable[..., Awaitable[None]], *, sessions: bool, owners: SessionOwners | None = None,
                  exchange: SingleExchange | None = None) -> Callable[..., Awaitable[None]]:
    """ASGI wrapper around the SDK's app: decides JSON or SSE for each POST, which session each
    request belongs to (for the event store), and refuses another caller's session. With an
    ``exchange`` (stateless), a plain call answered with JSON is answered there."""
    owners = owners or SessionOwners()

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        principal = scope.get(PRINCIPAL_SCOPE_KEY)
        session = _Session(_header(scope, SESSION_HEADER))
        if session.id is not None and owners.refuses(session.id, principal):
            await _unknown_session(send)
            return
        session_token = _session.set(session)
        streamed, downstream, body = scope.get("method") == "GET", receive, b""
        if scope.get("method") == "POST":
            messages, body = await _read_body(receive)
            streamed = _streams(scope, body, sessions=sessions)

            async def replay() -> dict[str, Any]:
                return messages.pop(0) if messages else await receive()

            downstream = replay
        scope[STREAMED_KEY] = streamed
        streamed_token = _streamed.set(streamed)

        async def learn_session(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start" and session.id is None:
                session.id = next((v.decode("latin-1") for k, v in message.get("headers", []) if k.lower() == SESSION_HEADER),
                                  None)
                if session.id is not None:
                    owners.opened(session.id, principal)
            elif message["type"] == "http.response.start" and scope.get("method") == "DELETE" and message["status"] < 300:
                owners.closed(session.id)
            await send(message)

        try:
            if exchange is not None and body and not streamed and await exchange.answer(scope, body, send):
                return
            await app(scope, downstream, learn_session)
        finally:
            _streamed.reset(streamed_token)
            _session.reset(session_token)

    return wrapped


class BoundedEventStore(EventStore):
    """The last EVENTS_KEPT SSE events of this process, for ``Last-Event-ID`` reconnects. Stored:
    the events of streams that began with a priming event (SSE answers to POSTs) and of the
    session's GET stream; a JSON answer has no stream to resume and is not kept. Replays only the
    events of the reconnecting request's own session and stream."""

    def __init__(self, kept: int = EVENTS_KEPT) -> None:
        self.kept = kept
        self.events: OrderedDict[str, tuple[str | None, StreamId, JSONRPCMessage | None]] = OrderedDict()
        self.primed: set[tuple[str | None, StreamId]] = set()
        self.ids = itertools.count(1)

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        event_id = str(next(self.ids))
        session = _session_id()
        if message is None:
            self.primed.add((session, stream_id))
        elif stream_id != GET_STREAM_KEY and (session, stream_id) not in self.primed:
            return event_id  # a JSON answer: nothing to resume
        self.events[event_id] = (session, stream_id, message)
        while len(self.events) > self.kept:
            _id, (old_session, old_stream, old_message) = self.events.popitem(last=False)
            if old_message is None:
                self.primed.discard((old_session, old_stream))
        return event_id

    async def replay_events_after(self, last_event_id: EventId, send_callback: EventCallback) -> StreamId | None:
        found = self.events.get(last_event_id)
        session = _session_id()
        if found is None or session is None or found[0] != session:
            return None
        stream = found[1]
        after = False
        for event_id, (event_session, event_stream, message) in list(self.events.items()):
            if event_id == last_event_id:
                after = True
            elif after and (event_session, event_stream) == (session, stream) and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream


def http_app(server: Server[Any], *, sessions: bool, host: str, transport_security: TransportSecuritySettings | None,
             max_request_body_size: int) -> Callable[..., Awaitable[None]]:
    """The SDK's streamable-HTTP app for ``server`` at /mcp: with ``sessions`` (one worker)
    stateful and resumable; without, stateless. Wrapped by :func:`response_mode`."""
    app = server.streamable_http_app(
        stateless_http=not sessions,
        streamable_http_path="/mcp",
        json_response=_JsonUnlessStreamed(),  # type: ignore[arg-type]  # truthy per request
        event_store=BoundedEventStore() if sessions else None,
        retry_interval=RETRY_MS,
        host=host,
        transport_security=transport_security,
        max_request_body_size=max_request_body_size,
    )
    return response_mode(app, sessions=sessions, exchange=None if sessions else SingleExchange(server))
