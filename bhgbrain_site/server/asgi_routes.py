"""The hot endpoints straight on ASGI: ``POST /tool/<name>``, ``GET /resource``, ``GET /health``
and the REST API's operation views.

Through Django, every request pays for a thread created for it (``ThreadSensitiveContext``,
where the request signals and ``response.close`` run), a spooled temporary file for its body,
a task watching for the client's disconnect and ten middleware: about as much as a full-text
search on a small store. These three endpoints need none of it. Here they get what the
middleware gave them: the caller's principal (bhgbrain_site.server.security, the same check as
Django's bearer middleware), the security headers of Django's SecurityMiddleware and
X-Frame-Options, and the error envelope for everything that goes wrong; http_guard, around
both paths, still rate-limits, bounds the body and names the worker. The work itself is
bhgbrain_site.server.views's (the functions its Django views wrap too), in the registry's pools.

The REST API (``/api/...``) is served the same way: Django's URL resolver finds the view, and
when it is one of bhgbrain_site.rest's pooled operation views (they use no session, cookie or
CSRF token: DRF authenticates nobody, the bearer token decides), the view gets an
``ASGIRequest`` built here, with the caller's principal on it, as the bearer middleware leaves
it. Every middleware of Django's stack would otherwise hop to the request's thread twice (its
``process_request`` and ``process_response`` are synchronous): measured, 3 ms of a 4.5 ms call.
The schema, Swagger UI and anything the resolver does not match (``/api/search`` without its
slash: CommonMiddleware's redirect) go to Django.

Anything else, or a request these handlers would not recognise (``/tool/a/b``), goes to Django.
"""
from __future__ import annotations

from collections.abc import Awaitable, Callable
from io import BytesIO
from typing import Any
from urllib.parse import parse_qs

from django.conf import settings
from django.core.handlers.asgi import ASGIRequest, get_script_prefix
from django.http import HttpResponse
from django.urls import Resolver404, ResolverMatch, resolve, set_script_prefix

from bhgbrain_site import registry, rest
from bhgbrain_site.core import calls, pools
from bhgbrain_site.core.errors import AuthRequired, error_for_status
from bhgbrain_site.server import views
from bhgbrain_site.server.security import authenticate_scope, scope_peer, viewer_of_scope

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


async def _respond(send: Send, status: int, body: bytes, *, head: bool = False,
                   headers: list[tuple[bytes, bytes]] = _HEADERS) -> None:
    headers = [*headers, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": b"" if head else body})


async def _error(send: Send, exc: BaseException) -> None:
    await _respond(send, *views.encoded_error(exc))


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


async def _principal(scope: Scope, send: Send) -> calls.Principal | None:
    """The principal of a guarded endpoint's caller, or None once a refusal was sent."""
    try:
        principal = await authenticate_scope(scope)
    except Exception as exc:  # noqa: BLE001 - the token table unreachable: the envelope, not a bare 500
        await _error(send, exc)
        return None
    if principal is None:
        await _error(send, AuthRequired("Missing or invalid bearer token"))
    return principal


async def _caller(scope: Scope, send: Send) -> calls.CallContext | None:
    """The caller of a guarded endpoint, or None once a refusal was sent."""
    principal = await _principal(scope, send)
    return None if principal is None else calls.CallContext(actor=f"http:{scope_peer(scope)}", principal=principal)


async def _tool(scope: Scope, receive: Receive, send: Send, name: str) -> None:
    if scope.get("method") != "POST":
        await _error(send, error_for_status(405, "Use POST for tool calls"))
        return
    raw = await _body(receive)
    if raw is None:
        return
    ctx = await _caller(scope, send)
    if ctx is not None:
        status, body = await pools.in_pool(registry.executor_for(name), views.tool_call_body, name, raw, ctx)
        await _respond(send, status, body, headers=[*_HEADERS, *views.retry_after_headers(status, body)])


async def _resource(scope: Scope, receive: Receive, send: Send) -> None:
    if scope.get("method") != "GET":
        await _error(send, error_for_status(405, "Use GET for resources"))
        return
    ctx = await _caller(scope, send)
    if ctx is None:
        return
    query = parse_qs(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
    uri = (query.get("uri") or [""])[-1]
    await _respond(send, *await pools.in_pool(pools.READ_POOL, views.resource_body, uri, ctx))


async def _health(scope: Scope, send: Send) -> None:
    if scope.get("method") not in ("GET", "HEAD"):
        await _error(send, error_for_status(405, "Use GET for /health"))
        return
    snapshot = await views.health_snapshots.current()
    body = views.health_for(snapshot, await viewer_of_scope(scope))
    await _respond(send, views.health_status(snapshot), views.encode(body), head=scope.get("method") == "HEAD")


def _rest_view(path: str) -> ResolverMatch | None:
    """The resolved REST operation view for ``path``; None for any other view or no match."""
    try:
        match = resolve(path)
    except Resolver404:
        return None
    return match if getattr(match.func, rest.POOLED, False) else None


def _django_headers(response: HttpResponse) -> list[tuple[bytes, bytes]]:
    """A Django response's headers and cookies, with the security headers it does not set itself."""
    headers = [(name.lower().encode("latin-1"), value.encode("latin-1")) for name, value in response.items()]
    present = {name for name, _value in headers}
    headers += [(name, value) for name, value in _HEADERS if name not in present]
    headers += [(b"set-cookie", cookie.output(header="").strip().encode("latin-1")) for cookie in response.cookies.values()]
    return [(name, value) for name, value in headers if name != b"content-length"]


async def _rest(scope: Scope, receive: Receive, send: Send, match: ResolverMatch) -> None:
    raw = await _body(receive)
    if raw is None:
        return
    principal = await _principal(scope, send)
    if principal is None:
        return
    set_script_prefix(get_script_prefix(scope))
    request = ASGIRequest(scope, BytesIO(raw))
    request.bhgbrain_principal = principal
    request.resolver_match = match
    try:
        response = await match.func(request, *match.args, **match.kwargs)
    except Exception as exc:  # noqa: BLE001 - DRF answers its own errors; anything else is a bug (INTERNAL)
        await _error(send, exc)
        return
    await _respond(send, response.status_code, response.content, head=scope.get("method") == "HEAD",
                   headers=_django_headers(response))


async def handle(scope: Scope, receive: Receive, send: Send) -> bool:
    """Answer the request if it is one of the hot endpoints; False to leave it to Django."""
    path = scope.get("path", "")
    if path == "/health":
        await _health(scope, send)
    elif path.startswith("/tool/") and len(path) > 6 and "/" not in path[6:]:
        await _tool(scope, receive, send, path[6:])
    elif path == "/resource":
        await _resource(scope, receive, send)
    elif path.startswith("/api/") and (match := _rest_view(path)) is not None:
        await _rest(scope, receive, send, match)
    else:
        return False
    return True
