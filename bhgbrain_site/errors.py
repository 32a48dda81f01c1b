"""One DomainError hierarchy and the one mapping onto the error envelope.

App code raises; :func:`to_envelope` is the only place an exception becomes
``{"error": {"code", "message", "retryable"}}`` plus an HTTP status. Errors raised outside
our code (DRF, Django, the ASGI guards) become DomainErrors first, with
:func:`error_for_status`, so every transport answers with the same envelope.
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

    def __init__(self, message: str, *, retryable: bool | None = None, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field  # the input field at fault, when one is (forms show the error beside it)
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


class Forbidden(DomainError):
    """A valid token that may not do this (another namespace, a write on a read-only token, a
    whole-store tool on a scoped token): re-authenticating would not help, unlike 401."""

    code = "FORBIDDEN"
    http_status = 403


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


_BY_STATUS: dict[int, type[DomainError]] = {
    400: InvalidInput, 401: AuthRequired, 403: Forbidden, 404: NotFound, 409: Conflict,
    413: PayloadTooLarge, 429: RateLimited,
}


def error_for_status(status: int, message: str) -> DomainError:
    """The DomainError for an HTTP status produced outside our code, keeping that status
    (405, 406 and 415 stay themselves, with the INVALID_INPUT code)."""
    kind = _BY_STATUS.get(status) or (DomainError if status >= 500 else InvalidInput)
    error = kind(message)
    error.http_status = status
    return error


def describe_validation_error(error: ValidationError) -> str:
    """Name each offending field; never echo the submitted values (they may be secrets)."""
    parts = []
    for item in error.errors(include_input=False, include_url=False):
        field = ".".join(str(p) for p in item["loc"]) or "<body>"
        parts.append(f"{field}: {item['msg']}")
    return "Invalid input: " + "; ".join(parts)


def _envelope(code: str, message: str, retryable: bool) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "retryable": retryable}}


def to_envelope(exc: BaseException) -> tuple[int, dict[str, Any]]:
    """Map any exception onto (HTTP status, envelope); bugs become INTERNAL, logged with their
    traceback, their text never sent to the client."""
    if isinstance(exc, DomainError):
        if exc.http_status >= 500 and type(exc) is DomainError:
            logger.error("internal error: %s", exc.message)
            return exc.http_status, _envelope("INTERNAL", "Internal error", False)
        return exc.http_status, _envelope(exc.code, exc.message, exc.retryable)
    if isinstance(exc, ValidationError):
        return 400, _envelope("INVALID_INPUT", describe_validation_error(exc), False)
    logger.error("internal error", exc_info=exc)
    return 500, _envelope("INTERNAL", "Internal error", False)
