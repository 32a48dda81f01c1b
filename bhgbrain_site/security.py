"""HTTP security: bearer token (constant-time) and the fail-closed start rule."""
from __future__ import annotations

import hmac
import ipaddress
import logging
import os
from typing import Awaitable, Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.decorators import sync_and_async_middleware

from bhgbrain_site.config import BHGBrainConfig
from bhgbrain_site.errors import envelope

logger = logging.getLogger("bhgbrain.security")
PUBLIC_PREFIXES = ("/health", "/admin", "/static")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def configured_token(config: BHGBrainConfig) -> str | None:
    return os.environ.get(config.transport.http.bearer_token_env) or None


class StartupRefused(RuntimeError):
    """The HTTP binding is not allowed by the security settings."""


def check_binding(config: BHGBrainConfig, host: str) -> list[str]:
    """Raise StartupRefused for an unsafe binding; return warnings to print loudly."""
    if is_loopback(host):
        return []
    if config.security.require_loopback_http:
        raise StartupRefused(
            f'SECURITY: HTTP binding to "{host}" is not loopback and security.require_loopback_http is true. '
            "Set it to false (and configure a bearer token) to listen on other interfaces."
        )
    if configured_token(config):
        return []
    if config.security.allow_unauthenticated_http:
        return [f'SECURITY WARNING: HTTP on "{host}" is externally reachable WITHOUT authentication '
                "(security.allow_unauthenticated_http=true)."]
    env = config.transport.http.bearer_token_env
    raise StartupRefused(
        f'SECURITY: HTTP binding to "{host}" is externally reachable but no bearer token is configured. '
        f"Set {env} or security.allow_unauthenticated_http=true."
    )


def _authorized(request: HttpRequest, token: str) -> bool:
    header = request.META.get("HTTP_AUTHORIZATION", "")
    scheme, _, supplied = header.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(supplied.strip().encode(), token.encode())


@sync_and_async_middleware
def bearer_auth_middleware(get_response: Callable) -> Callable:  # noqa: D103
    def denied() -> JsonResponse:
        return JsonResponse(envelope("AUTH_REQUIRED", "Missing or invalid bearer token", False), status=401)

    def needs_check(request: HttpRequest) -> str | None:
        if request.path.startswith(PUBLIC_PREFIXES):
            return None
        return configured_token(settings.BHGBRAIN)

    async def async_middleware(request: HttpRequest) -> HttpResponse:
        token = needs_check(request)
        if token and not _authorized(request, token):
            return denied()
        return await get_response(request)

    def middleware(request: HttpRequest) -> HttpResponse:
        token = needs_check(request)
        if token and not _authorized(request, token):
            return denied()
        return get_response(request)

    from asgiref.sync import iscoroutinefunction

    return async_middleware if iscoroutinefunction(get_response) else middleware


def asgi_bearer_ok(scope: dict) -> bool:
    """The bearer rule for raw ASGI routes (/mcp): same token, same constant-time compare."""
    token = configured_token(settings.BHGBRAIN)
    if not token:
        return True
    headers = dict(scope.get("headers") or [])
    scheme, _, supplied = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(supplied.strip().encode(), token.encode())
