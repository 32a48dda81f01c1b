"""Thin HTTP endpoints: GET /health, POST /tool/<name>, GET /resource, GET /metrics.

The server answers /health, /tool and /resource on the ASGI level (bhgbrain_site.server.asgi_routes)
with the functions here that do the work (``tool_call_body``, ``resource_body``, the health
snapshot); these Django views wrap the same functions for Django's own handlers (the test
client, WSGI)."""
from __future__ import annotations

import json
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.core.serializers.json import DjangoJSONEncoder
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET

from bhgbrain_site import registry
from bhgbrain_site.core.calls import CallContext, Principal
from bhgbrain_site.core.contracts import ERROR_ECHO_MAX
from bhgbrain_site.core.errors import NotFound, PayloadTooLarge, error_for_status, to_envelope
from bhgbrain_site.core.inputs import parse_json_body
from bhgbrain_site.core.metrics import metrics
from bhgbrain_site.core.pools import READ_POOL, drop_broken_connections
from bhgbrain_site.server.health import HealthSnapshots
from bhgbrain_site.server.security import rate_limiter, viewer
from memories.quotas.selectors import visible_quotas
from memories.selectors import memory_count
from retention.selectors import store_health


def error_response(exc: BaseException) -> JsonResponse:
    status, body = to_envelope(exc)
    return JsonResponse(body, status=status)


def encode(body: Any) -> bytes:
    """A response body as JsonResponse writes it (Django's encoder, UTF-8 left readable)."""
    return json.dumps(body, cls=DjangoJSONEncoder, ensure_ascii=False).encode()


def encoded_error(exc: BaseException) -> tuple[int, bytes]:
    status, body = to_envelope(exc)
    return status, encode(body)


def retry_after_headers(status: int, body: bytes) -> list[tuple[bytes, bytes]]:
    """``Retry-After`` for a 429 whose envelope says when to retry (a token's write rate)."""
    if status != 429:
        return []
    seconds = json.loads(body).get("error", {}).get("retry_after")
    return [(b"retry-after", str(seconds).encode())] if isinstance(seconds, int) else []


def tool_call_body(name: str, raw: bytes, ctx: CallContext) -> tuple[int, bytes]:
    """POST /tool/<name> with this raw body: (status, JSON bytes), the envelope on any failure.
    Runs in a registry pool thread (it parses, calls and encodes off the event loop)."""
    try:
        arguments = parse_json_body(raw) if raw else {}
        return 200, encode(registry.call_tool(name, arguments, ctx))
    except Exception as exc:  # noqa: BLE001 - every failure becomes the envelope (bugs → INTERNAL)
        return encoded_error(exc)


def resource_body(uri: str, ctx: CallContext) -> tuple[int, bytes]:
    """GET /resource?uri=…: (status, JSON bytes), the envelope on any failure."""
    try:
        return 200, encode(registry.read_resource(uri, ctx))
    except Exception as exc:  # noqa: BLE001 - every failure becomes the envelope
        return encoded_error(exc)


def health_status(snapshot: dict[str, Any]) -> int:
    return 503 if snapshot["status"] == "unhealthy" else 200


def health_for(snapshot: dict[str, Any], principal: Principal | None) -> dict[str, Any]:
    """The snapshot as this caller may read it: /health is public, so per-namespace quota figures
    go only to a caller with access (a scoped token: its own namespaces); anonymous callers get
    the counts of namespaces at or over their quota, never the names."""
    if "quotas" not in snapshot:
        return snapshot
    namespaces = principal.namespaces if principal is not None else None
    return {**snapshot, "quotas": visible_quotas(snapshot["quotas"], namespaces, anonymous=principal is None)}


def _store_health() -> dict[str, Any]:
    drop_broken_connections()  # a pool thread: after a database restart it reconnects here
    return store_health()


health_snapshots = HealthSnapshots(_store_health, registry.writes_done)


@require_GET
async def health(request: HttpRequest) -> JsonResponse:
    """The snapshot in memory (refreshed every few seconds in the background), else one computed now."""
    snapshot = await health_snapshots.current()
    principal = await sync_to_async(viewer, thread_sensitive=False)(request.META.get("HTTP_AUTHORIZATION"))
    return JsonResponse(health_for(snapshot, principal), status=health_status(snapshot))


def _context(request: HttpRequest) -> CallContext:
    actor = f"http:{request.META.get('REMOTE_ADDR') or 'unknown'}"
    principal = getattr(request, "bhgbrain_principal", None)
    return CallContext(actor=actor, principal=principal) if principal else CallContext(actor=actor)


def _json(status_and_body: tuple[int, bytes]) -> HttpResponse:
    status, body = status_and_body
    response = HttpResponse(body, status=status, content_type="application/json")
    for name, value in retry_after_headers(status, body):
        response[name.decode()] = value.decode()
    return response


@csrf_exempt
async def tool_call(request: HttpRequest, name: str) -> HttpResponse:
    if request.method != "POST":
        return error_response(error_for_status(405, "Use POST for tool calls"))
    try:
        raw = request.body
    except RequestDataTooBig:
        return error_response(PayloadTooLarge("Request body exceeds security.max_request_size_bytes"))
    run = sync_to_async(tool_call_body, thread_sensitive=False, executor=registry.executor_for(name))
    return _json(await run(name, raw, _context(request)))


@require_GET
async def resource(request: HttpRequest) -> HttpResponse:
    """GET /resource?uri=memory://list%3Flimit%3D5 — the MCP resources over plain HTTP."""
    run = sync_to_async(resource_body, thread_sensitive=False, executor=READ_POOL)
    return _json(await run(request.GET.get("uri", ""), _context(request)))


def render_metrics() -> str:
    return metrics.render(memory_count=memory_count(), rate_limit_buckets=rate_limiter.buckets())


@require_GET
async def metrics_view(request: HttpRequest) -> HttpResponse:
    """GET /metrics — Prometheus text, only when observability.metrics_enabled."""
    if not settings.BHGBRAIN.observability.metrics_enabled:
        return error_response(NotFound("Metrics are disabled (observability.metrics_enabled)"))
    body = await sync_to_async(render_metrics, thread_sensitive=False)()
    return HttpResponse(body, content_type="text/plain; version=0.0.4; charset=utf-8")


def not_found(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    """Unknown URLs answer with the error envelope too."""
    return error_response(NotFound(f"No such endpoint: {request.path[:ERROR_ECHO_MAX]}"))


def server_error(request: HttpRequest) -> JsonResponse:
    return error_response(error_for_status(500, "Internal error"))
