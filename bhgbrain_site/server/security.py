"""HTTP security: bearer token (constant-time) and the fail-closed start rule."""
from __future__ import annotations

import ipaddress
import json
import logging
import os
import time
from collections.abc import Callable, Sequence

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.cache import BaseCache, caches
from django.core.cache.backends.locmem import LocMemCache
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.decorators import sync_and_async_middleware

from bhgbrain_site.core.calls import FULL_ACCESS, Principal
from bhgbrain_site.core.config import BHGBrainConfig
from bhgbrain_site.core.errors import AuthRequired, PayloadTooLarge, RateLimited, to_envelope
from bhgbrain_site.core.metrics import metrics
from bhgbrain_site.core.pools import drop_broken_connections
from bhgbrain_site.core.shared_cache import SharedCounterCache
from memories.api_tokens import auth_required, known_open, principal_for

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


def token_preview(token: str) -> str:
    """A failed token as the logs show it: at most 8 characters and never more than a third of
    it (a short token is not given away), then an ellipsis."""
    return token[: min(8, len(token) // 3)] + "…"


def authenticate(authorization: str | None, *, peer: str, path: str) -> Principal | None:
    """The principal of an Authorization header; a refusal is logged with a shortened token
    (the seed: failed authentication shows only a truncated preview of the invalid token)."""
    principal = principal_for(authorization)
    if principal is None:
        scheme, _, supplied = (authorization or "").partition(" ")
        if scheme.lower() == "bearer" and supplied.strip():
            offered = f"invalid token {token_preview(supplied.strip())}"
        else:  # never echo another scheme's header: it may be a bare token (and "bearer <word>" is redacted)
            offered = "no token" if not authorization else "no token (an Authorization header of another scheme than 'bearer')"
        logger.warning("authentication failed: %s from %s for %s", offered, peer, path[:200])
    return principal


def _authenticate_in_thread(authorization: str | None, peer: str, path: str) -> Principal | None:
    drop_broken_connections()  # tokens live in the database; this thread's connection may have failed before
    return authenticate(authorization, peer=peer, path=path)


async def authenticate_async(authorization: str | None, *, peer: str, path: str) -> Principal | None:
    """:func:`authenticate` from the event loop: inline when no token is configured (nothing to
    look up), in a worker thread otherwise (tokens live in the database)."""
    if known_open():
        return FULL_ACCESS
    return await sync_to_async(_authenticate_in_thread, thread_sensitive=False)(authorization, peer, path)


def viewer(authorization: str | None) -> Principal | None:
    """Who reads a public endpoint (``/health``): full access when no token is needed, the token's
    principal when one is sent, else None (anonymous). Never refuses and, without a token, never
    logs: probes call it every few seconds."""
    drop_broken_connections()
    try:
        if not auth_required():
            return FULL_ACCESS
        return principal_for(authorization) if authorization else None
    except Exception:  # noqa: BLE001 - the token table unreachable: anonymous, and /health reports the database
        return None


async def viewer_of_scope(scope: dict) -> Principal | None:
    """:func:`viewer` for an ASGI request (inline when the server is known to be open)."""
    if known_open():
        return FULL_ACCESS
    return await sync_to_async(viewer, thread_sensitive=False)(scope_header(scope, b"authorization"))


def scope_peer(scope: dict) -> str:
    """The client address of an ASGI request (uvicorn's, after its proxy-header handling)."""
    return (scope.get("client") or ("unknown", 0))[0]


def scope_header(scope: dict, name: bytes) -> str | None:
    for key, value in scope.get("headers") or []:
        if key == name:
            return value.decode("latin-1")
    return None


async def authenticate_scope(scope: dict) -> Principal | None:
    """:func:`authenticate_async` for an ASGI request (MCP and the hot endpoints)."""
    return await authenticate_async(scope_header(scope, b"authorization"), peer=scope_peer(scope),
                                    path=scope.get("path", ""))


def _principal(request: HttpRequest) -> Principal | None:
    peer = request.META.get("REMOTE_ADDR") or "unknown"
    return _authenticate_in_thread(request.META.get("HTTP_AUTHORIZATION"), peer, request.path)


def _denied() -> JsonResponse:
    status, body = to_envelope(AuthRequired("Missing or invalid bearer token"))
    return JsonResponse(body, status=status)


@sync_and_async_middleware
def bearer_auth_middleware(get_response: Callable) -> Callable:
    """Attach the caller's principal to the request; refuse a missing/invalid token.

    /health and /admin/ (which has its own session login) stay open.
    """
    from asgiref.sync import iscoroutinefunction

    async def async_middleware(request: HttpRequest) -> HttpResponse:
        if not request.path.startswith(PUBLIC_PREFIXES):
            try:
                peer = request.META.get("REMOTE_ADDR") or "unknown"
                principal = await authenticate_async(request.META.get("HTTP_AUTHORIZATION"), peer=peer, path=request.path)
            except Exception as exc:  # noqa: BLE001 - the database down: the envelope, not Django's bare 500
                status, body = to_envelope(exc)
                return JsonResponse(body, status=status)
            if principal is None:
                return _denied()
            request.bhgbrain_principal = principal
        return await get_response(request)

    def middleware(request: HttpRequest) -> HttpResponse:
        if not request.path.startswith(PUBLIC_PREFIXES):
            principal = _principal(request)
            if principal is None:
                return _denied()
            request.bhgbrain_principal = principal
        return get_response(request)

    return async_middleware if iscoroutinefunction(get_response) else middleware


class RateLimiter:
    """At most ``limit`` requests per client address in a 60 s window opened by its first request.

    The count lives in Django's ``ratelimit`` cache (settings.CACHES): Redis when configured;
    with several workers and no Redis a counter file (SQLite) or the database (PostgreSQL);
    memory for one process. ``add`` opens the
    window (only if none is open) and ``incr`` counts atomically in every one of them, so N
    workers admit ``limit`` requests in all, not ``limit`` each.
    """

    WINDOW = 60
    SLOT = 10  # windows opened are counted per 10 s slot, for the metrics' bucket gauge

    @staticmethod
    def counter() -> BaseCache:
        """This thread's ``ratelimit`` cache."""
        return caches["ratelimit"]

    @staticmethod
    def inline(cache: BaseCache) -> bool:
        """Counted without network or database I/O (this process's memory, or the counter file of
        several workers on SQLite): microseconds, so callable on the event loop."""
        return isinstance(cache, LocMemCache | SharedCounterCache)

    def hit(self, key: str, limit: int, cache: BaseCache | None = None) -> tuple[bool, int]:
        """Record one request in ``cache`` (default: this thread's counter); (allowed, remaining)."""
        cache, name = self.counter() if cache is None else cache, f"rl:{key}"
        for _ in range(3):
            if cache.add(name, 0, timeout=self.WINDOW):
                self._opened(cache)
            try:
                count = cache.incr(name)
                break
            except ValueError:  # the window closed between add and incr: open the next one
                continue
        else:
            raise RuntimeError("rate limiter: the window kept closing")
        if count > limit:
            metrics.rate_limited()
            return False, 0
        return True, limit - count

    def _slot(self) -> int:
        return int(time.time() // self.SLOT)

    def _opened(self, cache: BaseCache) -> None:
        name = f"rl-opened:{self._slot()}"
        cache.add(name, 0, timeout=self.WINDOW + 2 * self.SLOT)
        try:
            cache.incr(name)
        except ValueError:
            pass  # the slot's counter expired this instant: the gauge misses one window

    def buckets(self) -> int:
        """Client addresses that opened a window in the last 60-70 s (windows last 60 s)."""
        now = self._slot()
        names = [f"rl-opened:{slot}" for slot in range(now - self.WINDOW // self.SLOT, now + 1)]
        return sum(self.counter().get_many(names).values())


rate_limiter = RateLimiter()


def _hit_in_thread(key: str, limit: int) -> tuple[bool, int]:
    drop_broken_connections()  # counted in the database (several workers on PostgreSQL): this thread's may have failed
    return rate_limiter.hit(key, limit)
UNLIMITED_PREFIXES = ("/health",)


async def respond_error(send: Callable, error: BaseException, headers: Sequence[tuple[bytes, bytes]] = ()) -> None:
    """An ASGI response carrying ``error``'s envelope (for refusals and failures before Django runs)."""
    status, body = to_envelope(error)
    raw = json.dumps(body).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), *headers]})
    await send({"type": "http.response.body", "body": raw})


def _with_headers(send: Callable, extra: list[tuple[bytes, bytes]]) -> Callable:
    async def wrapped(message: dict) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), *extra]}
        await send(message)

    return wrapped


async def _bounded_body(receive: Callable, limit: int) -> tuple[list[dict], bool]:
    """Read the body up to ``limit`` bytes; True when it is larger (nothing more is read)."""
    messages, size = [], 0
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            return messages, False
        size += len(message.get("body", b""))
        if size > limit:
            return messages, True
        if not message.get("more_body"):
            return messages, False


def http_guard(app: Callable) -> Callable:
    """ASGI wrapper for every HTTP route: per-IP fixed-window rate limit (keyed on the peer
    address, never on a client-supplied header) with X-RateLimit-* headers, and 413 for bodies
    over security.max_request_size_bytes before they are read whole. Every response names the
    worker process that served it (``X-BHGBrain-Worker``: its pid)."""
    worker = (b"x-bhgbrain-worker", str(os.getpid()).encode())
    hit = sync_to_async(_hit_in_thread, thread_sensitive=False)  # the cache may be Redis or the database

    async def guarded(scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        security = settings.BHGBRAIN.security
        headers: list[tuple[bytes, bytes]] = [worker]
        if not scope.get("path", "").startswith(UNLIMITED_PREFIXES):
            peer = scope_peer(scope)
            try:
                counter = rate_limiter.counter()
                if rate_limiter.inline(counter):
                    allowed, remaining = rate_limiter.hit(peer, security.rate_limit_rpm, counter)
                else:
                    allowed, remaining = await hit(peer, security.rate_limit_rpm)
            except Exception as exc:  # noqa: BLE001 - the counters' database or Redis down: the envelope, not a bare 500
                await respond_error(send, exc, headers)
                return
            headers += [(b"x-ratelimit-limit", str(security.rate_limit_rpm).encode()),
                        (b"x-ratelimit-remaining", str(remaining).encode())]
            if not allowed:
                await respond_error(send, RateLimited("Too many requests: retry later"), [*headers, (b"retry-after", b"60")])
                return
        limit = security.max_request_size_bytes
        declared = dict(scope.get("headers") or []).get(b"content-length")
        too_large = declared is not None and declared.isdigit() and int(declared) > limit
        messages: list[dict] = []
        if not too_large and scope.get("method") in ("POST", "PUT", "PATCH"):
            messages, too_large = await _bounded_body(receive, limit)
        if too_large:
            await respond_error(send, PayloadTooLarge(f"Request body exceeds {limit} bytes"), headers)
            return

        async def replay() -> dict:
            return messages.pop(0) if messages else await receive()

        await app(scope, replay if messages else receive, _with_headers(send, headers))

    return guarded
