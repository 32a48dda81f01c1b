"""The hot endpoints straight on ASGI: ``POST /tool/<name>``, ``GET /resource``, ``GET /health``.

Through Django, every request pays for a thread created for it (``ThreadSensitiveContext``,
where the request signals and ``response.close`` run), a spooled temporary file for its body,
a task watching for the client's disconnect and ten middleware: about as much as a full-text
search on a small store. These three endpoints need none of it. Here they get what the
middleware gave them: the caller's principal (bhgbrain_site.security, the same check as
Django's bearer middleware), the security headers of Django's SecurityMiddleware and
X-Frame-Options, and the error envelope for everything that goes wrong; http_guard, around
both paths, still rate-limits, bounds the body and names the worker. The work itself is
bhgbrain_site.http's (the functions its Django views wrap too), in the registry's pools.

Anything else, or a request these handlers would not recognise (``/tool/a/b``), goes to Django.
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs

from django.conf import settings

from bhgbrain_site import http, registry
from bhgbrain_site.errors import AuthRequired, error_for_status
from bhgbrain_site.registry import CallContext
from bhgbrain_site.security import authenticate_scope, scope_peer

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def _static_headers() -> list[tuple[bytes, bytes]]:
    """What SecurityMiddleware and XFrameOptionsMiddleware add to a JSON response, from the same settings."""
    headers = [(b"content-type", b"application/json")]
    if settings.X_FRAME_OPTIONS:
        headers.append((b"x-frame-options", settings.X_FRAME_OPTIONS.upper().encode()))
    if settings.SECURE_CONTENT_TYPE_NOSNIFF:
        headers.append((b"x-content-type-options", b"nosniff"))
    if settings.SECURE_REFERRER_POLICY:
        policy = settings.SECURE_REFERRER_POLICY
        value = policy if isinstance(policy, str) else ",".join(policy)
        headers.append((b"referrer-policy", value.encode()))
    if settings.SECURE_CROSS_ORIGIN_OPENER_POLICY:
        headers.append((b"cross-origin-opener-policy", settings.SECURE_CROSS_ORIGIN_OPENER_POLICY.encode()))
    return headers


_HEADERS = _static_headers()


async def _respond(send: Send, status: int, body: bytes, *, head: bool = False) -> None:
    headers = [*_HEADERS, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b"" if head else body})


async def _error(send: Send, exc: BaseException) -> None:
    await _respond(send, *http.encoded_error(exc))


async def _body(receive: Receive) -> bytes | None:
    """The whole request body (http_guard bounded it already); None when the client went away."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


async def _caller(scope: Scope, send: Send) -> CallContext | None:
    """The caller of a guarded endpoint, or None once a refusal was sent."""
    try:
        principal = await authenticate_scope(scope)
    except Exception as exc:  # noqa: BLE001 - the token table unreachable: the envelope, not a bare 500
        await _error(send, exc)
        return None
    if principal is None:
        await _error(send, AuthRequired("Missing or invalid bearer token"))
        return None
    return CallContext(actor=f"http:{scope_peer(scope)}", principal=principal)


async def _tool(scope: Scope, receive: Receive, send: Send, name: str) -> None:
    if scope.get("method") != "POST":
        await _error(send, error_for_status(405, "Use POST for tool calls"))
        return
    raw = await _body(receive)
    if raw is None:
        return
    ctx = await _caller(scope, send)
    if ctx is not None:
        await _respond(send, *await registry.in_pool(registry.executor_for(name), http.tool_call_body, name, raw, ctx))


async def _resource(scope: Scope, receive: Receive, send: Send) -> None:
    if scope.get("method") != "GET":
        await _error(send, error_for_status(405, "Use GET for resources"))
        return
    ctx = await _caller(scope, send)
    if ctx is None:
        return
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
    uri = (query.get("uri") or [""])[-1]
    await _respond(send, *await registry.in_pool(registry.READ_POOL, http.resource_body, uri, ctx))


async def _health(scope: Scope, send: Send) -> None:
    if scope.get("method") not in ("GET", "HEAD"):
        await _error(send, error_for_status(405, "Use GET for /health"))
        return
    snapshot = await http.health_snapshots.current()
    await _respond(send, http.health_status(snapshot), http.encode(snapshot), head=scope.get("method") == "HEAD")


async def handle(scope: Scope, receive: Receive, send: Send) -> bool:
    """Answer the request if it is one of the hot endpoints; False to leave it to Django."""
    path = scope.get("path", "")
    if path == "/health":
        await _health(scope, send)
    elif path.startswith("/tool/") and len(path) > 6 and "/" not in path[6:]:
        await _tool(scope, receive, send, path[6:])
    elif path == "/resource":
        await _resource(scope, receive, send)
    else:
        return False
    return True
