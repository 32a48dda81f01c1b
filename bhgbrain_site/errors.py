"""One DomainError hierarchy and the one mapping onto the error envelope.

App code raises; :func:`to_envelope` is the only place an exception becomes
``{"error": {"code", "message", "retryable"}}`` plus an HTTP status.
"""
from __future__ import annotations

import logging
from typing import Any

from pydantic import ValidationError

logger = logging.getLogger("bhgbrain.errors")


class DomainError(Exception):
    code = "INTERNAL"
    http_status = 500
    retryable = False

    def __init__(self, message: str, *, retryable: bool | None = None) -> None:
        super().__init__(message)
        self.message = message
        if retryable is not None:
            self.retryable = retryable


class InvalidInput(DomainError):
    code = "INVALID_INPUT"
    http_status = 400


class NotFound(DomainError):
    code = "NOT_FOUND"
    http_status = 404


class Conflict(DomainError):
    code = "CONFLICT"
    http_status = 409


class AuthRequired(DomainError):
    code = "AUTH_REQUIRED"
    http_status = 401


class RateLimited(DomainError):
    code = "RATE_LIMITED"
    http_status = 429
    retryable = True


class EmbeddingUnavailable(DomainError):
    code = "EMBEDDING_UNAVAILABLE"
    http_status = 503
    retryable = True


class PayloadTooLarge(InvalidInput):
    http_status = 413


def describe_validation_error(error: ValidationError) -> str:
    """Name each offending field; never echo the submitted values (they may be secrets)."""
    parts = []
    for item in error.errors(include_input=False, include_url=False):
        field = ".".join(str(p) for p in item["loc"]) or "<body>"
        parts.append(f"{field}: {item['msg']}")
    return "Invalid input: " + "; ".join(parts)


def envelope(code: str, message: str, retryable: bool) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "retryable": retryable}}


def to_envelope(exc: BaseException) -> tuple[int, dict[str, Any]]:
    """Map any exception onto (HTTP status, envelope); bugs become INTERNAL without detail."""
    if isinstance(exc, DomainError):
        return exc.http_status, envelope(exc.code, exc.message, exc.retryable)
    if isinstance(exc, ValidationError):
        return 400, envelope("INVALID_INPUT", describe_validation_error(exc), False)
    logger.error("internal error", exc_info=exc)
    return 500, envelope("INTERNAL", "Internal error", False)
