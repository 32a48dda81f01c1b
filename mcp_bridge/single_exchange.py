"""Stateless MCP over HTTP: a plain call answered in the request's own task, by the SDK's ``serve_one``.

With several workers the MCP endpoint is stateless (mcp_bridge/streamable_http.py). For every POST the SDK's
stateless path then builds a transport, a JSON-RPC dispatcher and a server task joined by memory
streams, hands the request through them and tears it all down again: measured, about 1.3 ms more
server CPU per call than the same call on a session, so stateless MCP cost an agent more than
``/tool`` did (docs/performance.md).

The SDK has a driver for exactly one exchange, ``mcp.server.runner.serve_one``: the same
``ServerRunner.on_request`` the dispatcher calls, run once in the caller's task. The SDK uses it for
2026-07-28 requests (``_streamable_http_modern``); :func:`answer` uses it for a handshake-era
request the stateless transport would have answered with one JSON body. The request is checked as
that transport checks it (DNS-rebinding guard, ``Accept``, ``Content-Type``, size, protocol version,
the JSON-RPC envelope); the connection is born ready with the header's protocol version, as the
SDK's stateless path makes it; handler errors map as the SDK's dispatcher maps them; the answer is
serialized as the transport serializes it. Anything else (``initialize``, notifications, a request
that asks for progress, anything the SDK would refuse) returns False and goes to the SDK unchanged,
so its error answers stay its own.
"""
from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
from mcp.server.connection import Connection
from mcp.server.lowlevel import Server
from mcp.server.lowlevel.server import lifespan as default_lifespan
from mcp.server.runner import serve_one
from mcp.server.streamable_http import check_accept_headers
from mcp.server.transport_security import TransportSecurityMiddleware
from mcp.shared.dispatcher import CallOptions
from mcp.shared.exceptions import NoBackChannelError
from mcp.shared.jsonrpc_dispatcher import handler_exception_to_error_data, progress_token_from_params
from mcp.shared.message import ServerMessageMetadata
from mcp.shared.transport_context import TransportContext
from mcp_types import (
    DEFAULT_NEGOTIATED_VERSION,
    ErrorData,
    JSONRPCError,
    JSONRPCRequest,
    JSONRPCResponse,
    RequestId,
)
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from pydantic import ValidationError
from starlette.requests import Request

logger = logging.getLogger("bhgbrain.mcp")

Scope = dict[str, Any]
Send = Callable[[dict[str, Any]], Awaitable[None]]

# The calls an agent repeats; the rest (listings, prompts, completions) are rare and stay on the SDK's path.
METHODS = frozenset({"tools/call", "resources/read"})
VERSION_HEADER = b"mcp-protocol-version"  # also read by mcp_bridge/streamable_http.py


@dataclass
class _Exchange:
    """The dispatch context of one call answered with one JSON body (the SDK's ``DispatchContext``):
    no back-channel, and nowhere for a notification about the call to go, as on the SDK's path in
    JSON-response mode."""

    transport: TransportContext
    request_id: RequestId
    message_metadata: ServerMessageMetadata
    cancel_requested: anyio.Event = field(default_factory=anyio.Event)
    can_send_request: bool = False

    async def send_raw_request(self, method: str, params: Mapping[str, Any] | None,
                               opts: CallOptions | None = None) -> dict[str, Any]:
        raise NoBackChannelError(method)

    async def notify(self, method: str, params: Mapping[str, Any] | None, opts: CallOptions | None = None) -> None:
        return None

    async def progress(self, progress: float, total: float | None = None, message: str | None = None) -> None:
        return None


class SingleExchange:
    """:func:`answer` for one stateless server (its SDK session manager holds the HTTP settings)."""

    def __init__(self, server: Server[Any]) -> None:
        if server.lifespan is not default_lifespan:
            raise ValueError("a server with a lifespan needs the session manager's state: not supported here")
        manager = server.session_manager
        if not manager.stateless:
            raise ValueError("single exchanges are for a stateless server")
        self.server = server
        self.security = TransportSecurityMiddleware(manager.security_settings)
        self.max_body = manager.max_request_body_size

    async def answer(self, scope: Scope, body: bytes, send: Send) -> bool:
        """Answer a POST whose ``body`` is already read, if it is a plain call; False: not answered."""
        request = Request(scope)
        version = self._version(scope)
        if version is None or not await self._acceptable(request, body):
            return False
        call = _plain_call(body)
        if call is None:
            return False
        message = await self._run(call, request, version)
        payload = message.model_dump_json(by_alias=True, exclude_unset=True).encode()
        await send({"type": "http.response.start", "status": 200, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]})
        await send({"type": "http.response.body", "body": payload})
        return True

    @staticmethod
    def _version(scope: Scope) -> str | None:
        """The handshake-era version the call speaks (the SDK's default without the header); None for
        another header (a 2026-07-28 request: the SDK answers those in one exchange itself) or two."""
        values = [value for key, value in scope.get("headers", []) if key == VERSION_HEADER]
        if not values:
            return DEFAULT_NEGOTIATED_VERSION
        version = values[0].decode("latin-1")
        return version if len(values) == 1 and version in HANDSHAKE_PROTOCOL_VERSIONS else None

    async def _acceptable(self, request: Request, body: bytes) -> bool:
        """What the SDK's stateless transport checks before it reads a message, passed."""
        if len(body) > self.max_body or await self.security.validate_request(request, is_post=True) is not None:
            return False
        content_type = request.headers.get("content-type", "").split(";")[0]
        return check_accept_headers(request)[0] and "application/json" in (part.strip() for part in content_type.split(","))

    async def _run(self, call: JSONRPCRequest, request: Request, version: str) -> JSONRPCResponse | JSONRPCError:
        connection = Connection.from_envelope(version, None, None)  # born ready, as the SDK's stateless path
        exchange = _Exchange(transport=TransportContext(kind="streamable-http", can_send_request=False),
                             request_id=call.id,
                             message_metadata=ServerMessageMetadata(request_context=request, can_send_request=False))
        try:
            result = await serve_one(self.server, exchange, call.method, call.params, connection=connection,
                                     lifespan_state={})
        except Exception as exc:  # noqa: BLE001 - mapped to the wire as the SDK's dispatcher maps it
            return JSONRPCError(jsonrpc="2.0", id=call.id, error=_error_data(exc, call.method))
        return JSONRPCResponse(jsonrpc="2.0", id=call.id, result=result)


def _plain_call(body: bytes) -> JSONRPCRequest | None:
    """The body as one request of :data:`METHODS` that asks for no progress, else None."""
    try:
        decoded = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not (isinstance(decoded, dict) and "id" in decoded and decoded.get("method") in METHODS):
        return None
    try:
        call = JSONRPCRequest.model_validate(decoded)
    except ValidationError:
        return None
    return call if progress_token_from_params(call.params) is None else None


def _error_data(exc: Exception, method: str) -> ErrorData:
    """``JSONRPCDispatcher``'s mapping: the SDK's two rungs, then its catch-all (code 0, logged)."""
    error = handler_exception_to_error_data(exc)
    if error is None:
        logger.exception("handler for %r raised", method)
        error = ErrorData(code=0, message=str(exc))
    return error
