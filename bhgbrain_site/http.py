"""Thin HTTP endpoints: GET /health and POST /tool/<name>."""
from __future__ import annotations

import json
from typing import Any

from asgiref.sync import sync_to_async
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET

from bhgbrain_site.errors import InvalidInput, PayloadTooLarge, envelope, to_envelope
from bhgbrain_site.health import health_snapshot
from mcp_bridge.registry import CallContext, call_tool
from mcp_bridge.resources import read_resource


def _error_response(exc: BaseException) -> JsonResponse:
    status, body = to_envelope(exc)
    return JsonResponse(body, status=status)


@require_GET
async def health(request: HttpRequest) -> JsonResponse:
    snapshot = await sync_to_async(health_snapshot, thread_sensitive=False)()
    return JsonResponse(snapshot, status=503 if snapshot["status"] == "unhealthy" else 200)


def _json_body(request: HttpRequest) -> Any:
    try:
        raw = request.body
    except RequestDataTooBig:
        raise PayloadTooLarge("Request body exceeds security.max_request_size_bytes") from None
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise InvalidInput("Invalid input: the body must be a JSON object") from None


def _client_id(request: HttpRequest) -> str:
    return f"http:{request.META.get('REMOTE_ADDR') or 'unknown'}"


def _context(request: HttpRequest) -> CallContext:
    principal = getattr(request, "bhgbrain_principal", None)
    if principal is None:
        return CallContext(actor=_client_id(request))
    return CallContext(actor=_client_id(request), principal=principal)


@csrf_exempt
async def tool_call(request: HttpRequest, name: str) -> JsonResponse:
    if request.method != "POST":
        return JsonResponse(envelope("INVALID_INPUT", "Use POST for tool calls", False), status=405)
    try:
        arguments = _json_body(request)
        ctx = _context(request)
        result = await sync_to_async(call_tool, thread_sensitive=False)(name, arguments, ctx)
    except Exception as exc:  # noqa: BLE001 - every failure becomes the envelope (bugs → INTERNAL)
        return _error_response(exc)
    return JsonResponse(result, json_dumps_params={"ensure_ascii": False})


@require_GET
async def resource(request: HttpRequest) -> JsonResponse:
    """GET /resource?uri=memory://list%3Flimit%3D5 — the MCP resources over plain HTTP."""
    try:
        uri = request.GET.get("uri", "")
        ctx = _context(request)
        body = await sync_to_async(read_resource, thread_sensitive=False)(uri, ctx)
    except Exception as exc:  # noqa: BLE001 - every failure becomes the envelope
        return _error_response(exc)
    return JsonResponse(body, json_dumps_params={"ensure_ascii": False})


@require_GET
async def metrics_view(request: HttpRequest) -> HttpResponse:
    """GET /metrics — Prometheus text, only when observability.metrics_enabled."""
    from django.conf import settings

    from bhgbrain_site.metrics import render_metrics

    if not settings.BHGBRAIN.observability.metrics_enabled:
        return JsonResponse(envelope("NOT_FOUND", "Metrics are disabled (observability.metrics_enabled)", False), status=404)
    body = await sync_to_async(render_metrics, thread_sensitive=False)()
    return HttpResponse(body, content_type="text/plain; version=0.0.4; charset=utf-8")


def not_found(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    """Unknown URLs answer with the error envelope too."""
    return JsonResponse(envelope("NOT_FOUND", f"No such endpoint: {request.path[:200]}", False), status=404)


def server_error(request: HttpRequest) -> JsonResponse:
    return JsonResponse(envelope("INTERNAL", "Internal error", False), status=500)
