"""DRF glue: the one exception handler (the error envelope) and the caller context."""
from __future__ import annotations

from typing import Any

from rest_framework import exceptions
from rest_framework.request import Request
from rest_framework.response import Response

from bhgbrain_site.errors import envelope, to_envelope
from mcp_bridge.registry import CallContext

_DRF_CODES = {
    400: "INVALID_INPUT", 401: "AUTH_REQUIRED", 403: "AUTH_REQUIRED", 404: "NOT_FOUND",
    405: "INVALID_INPUT", 406: "INVALID_INPUT", 409: "CONFLICT", 413: "INVALID_INPUT",
    415: "INVALID_INPUT", 429: "RATE_LIMITED",
}


def _drf_message(exc: exceptions.APIException) -> str:
    detail = exc.detail
    if isinstance(detail, dict):
        return "Invalid input: " + "; ".join(f"{field}: {' '.join(map(str, msgs if isinstance(msgs, list) else [msgs]))}"
                                             for field, msgs in detail.items())
    if isinstance(detail, list):
        return "Invalid input: " + "; ".join(map(str, detail))
    return str(detail)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    """DRF's errors and our DomainErrors, all as {"error": {code, message, retryable}}."""
    if isinstance(exc, exceptions.APIException):
        code = _DRF_CODES.get(exc.status_code, "INTERNAL" if exc.status_code >= 500 else "INVALID_INPUT")
        return Response(envelope(code, _drf_message(exc), code == "RATE_LIMITED"), status=exc.status_code)
    status, body = to_envelope(exc)
    return Response(body, status=status)


def call_context(request: Request) -> CallContext:
    peer = request.META.get("REMOTE_ADDR") or "unknown"
    principal = getattr(request._request, "bhgbrain_principal", None)  # noqa: SLF001 - set by our middleware
    return CallContext(actor=f"api:{peer}", principal=principal) if principal else CallContext(actor=f"api:{peer}")


def json_object(request: Request) -> dict[str, Any]:
    """The request body, which must be a JSON object."""
    from bhgbrain_site.errors import InvalidInput

    if not isinstance(request.data, dict):
        raise InvalidInput("Invalid input: the body must be a JSON object")
    return dict(request.data)


def namespace_arg(request: Request) -> dict[str, str]:
    """{"namespace": ...} from the query string, or nothing (the tool applies its default)."""
    namespace = request.query_params.get("namespace")
    return {"namespace": namespace} if namespace else {}
