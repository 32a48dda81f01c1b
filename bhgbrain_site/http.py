"""Thin HTTP endpoints: GET /health, POST /tool/<name>, GET /resource, GET /metrics."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET

from bhgbrain_site import registry
from bhgbrain_site.contracts import ERROR_ECHO_MAX
from bhgbrain_site.errors import DomainError, NotFound, PayloadTooLarge, error_for_status, to_envelope
from bhgbrain_site.inputs import parse_json_body
from bhgbrain_site.metrics import metrics
from bhgbrain_site.registry import CallContext
from bhgbrain_site.security import rate_limiter
from memories.selectors import memory_count
from retention.selectors import store_health

# Two thread pools instead of the event loop's default one (min(32, CPUs + 4) threads, shared by
# everything): calls that write (remember embeds a passage, takes the write lock) queue in their
# own pool, so a burst of writes never holds every thread while a search waits for one.
READ_POOL = ThreadPoolExecutor(12, thread_name_prefix="bhgbrain-read")
WRITE_POOL = ThreadPoolExecutor(12, thread_name_prefix="bhgbrain-write")


def pool_for(name: str) -> ThreadPoolExecutor:
    """The read pool for an operation that never writes, the write pool otherwise (and for unknown names)."""
    try:
        return READ_POOL if registry.get_operation(name).read_only else WRITE_POOL
    except DomainError:
        return WRITE_POOL


def error_response(exc: BaseException) -> JsonResponse:
    status, body = to_envelope(exc)
    return JsonResponse(body, status=status)


def _store_health() -> dict[str, Any]:
    registry.drop_broken_connections()  # a pool thread: after a database restart it reconnects here
    return store_health()


@require_GET
async def health(request: HttpRequest) -> JsonResponse:
    snapshot = await sync_to_async(_store_health, thread_sensitive=False)()
    return JsonResponse(snapshot, status=503 if snapshot["status"] == "unhealthy" else 200)


def _json_body(request: HttpRequest) -> Any:
    try:
        raw = request.body
    except RequestDataTooBig:
        raise PayloadTooLarge("Request body exceeds security.max_request_size_bytes") from None
    return parse_json_body(raw) if raw else {}


def _context(request: HttpRequest) -> CallContext:
    actor = f"http:{request.META.get('REMOTE_ADDR') or 'unknown'}"
    principal = getattr(request, "bhgbrain_principal", None)
    return CallContext(actor=actor, principal=principal) if principal else CallContext(actor=actor)


@csrf_exempt
async def tool_call(request: HttpRequest, name: str) -> JsonResponse:
    if request.method != "POST":
        return error_response(error_for_status(405, "Use POST for tool calls"))
    try:
        arguments = _json_body(request)
        call = sync_to_async(registry.call_tool, thread_sensitive=False, executor=pool_for(name))
        result = await call(name, arguments, _context(request))
    except Exception as exc:  # noqa: BLE001 - every failure becomes the envelope (bugs → INTERNAL)
        return error_response(exc)
    return JsonResponse(result, json_dumps_params={"ensure_ascii": False})


@require_GET
async def resource(request: HttpRequest) -> JsonResponse:
    """GET /resource?uri=memory://list%3Flimit%3D5 — the MCP resources over plain HTTP."""
    try:
        uri = request.GET.get("uri", "")
        body = await sync_to_async(registry.read_resource, thread_sensitive=False, executor=READ_POOL)(uri, _context(request))
    except Exception as exc:  # noqa: BLE001 - every failure becomes the envelope
        return error_response(exc)
    return JsonResponse(body, json_dumps_params={"ensure_ascii": False})


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
