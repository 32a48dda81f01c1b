"""ASGI entry point (uvicorn): Django for everything, the MCP streamable-HTTP app at /mcp."""
from __future__ import annotations

import os
from collections.abc import Awaitable, Callable
from typing import Any

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bhgbrain_site.settings")
django_app = get_asgi_application()

from django.conf import settings  # noqa: E402 - needs the app registry

from bhgbrain_site.core.errors import AuthRequired  # noqa: E402
from bhgbrain_site.server import asgi_routes  # noqa: E402
from bhgbrain_site.server.security import authenticate_scope, http_guard, is_loopback, respond_error  # noqa: E402
from bhgbrain_site.server.views import health_snapshots  # noqa: E402
from mcp_bridge.server import PRINCIPAL_SCOPE_KEY, build_server  # noqa: E402
from mcp_bridge.streamable_http import http_app  # noqa: E402

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def _mcp_app() -> Any:
    from mcp.server.transport_security import TransportSecuritySettings

    host = settings.BHGBRAIN.transport.http.host
    security = None if is_loopback(host) else TransportSecuritySettings(enable_dns_rebinding_protection=False)
    # MCP sessions live in the process that opened them; with several workers the next request
    # may reach another one, so each request stands alone (every tool call carries its caller):
    # no sessions, no subscriptions, no resumable streams (mcp_bridge/streamable_http.py).
    sessions = settings.BHGBRAIN_WORKERS == 1
    return http_app(build_server("http", sessions=sessions), sessions=sessions, host=host,
                    transport_security=security, max_request_body_size=settings.BHGBRAIN.security.max_request_size_bytes)


mcp_app = _mcp_app()


async def _authenticate(scope: Scope) -> bool:
    """Find the caller's principal and leave it in the scope for the MCP server; False if none."""
    principal = await authenticate_scope(scope)
    if principal is None:
        return False
    scope[PRINCIPAL_SCOPE_KEY] = principal
    return True


async def _route(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "lifespan":
        await mcp_app(scope, receive, send)  # runs the MCP session manager
        return
    path = scope.get("path", "")
    if path == "/mcp" or path.startswith("/mcp/"):
        if not await _authenticate(scope):
            await respond_error(send, AuthRequired("Missing or invalid bearer token"))
            return
        await mcp_app(scope, receive, send)
        return
    if scope["type"] == "http" and await asgi_routes.handle(scope, receive, send):
        return
    await django_app(scope, receive, send)


health_snapshots.start_background()  # the server: /health answers from a snapshot in memory
application = http_guard(_route)
