"""One DomainError hierarchy and the one mapping onto the error envelope.

App code raises; :func:`to_envelope` is the only place an exception becomes
``{"error": {"code", "message", "retryable"}}`` plus an HTTP status. Errors raised outside
our code (DRF, Django, the ASGI guards) become DomainErrors first, with
:func:`error_for_status`, so every transport answers with the same envelope.
"""
from __future__ import annotations

import errno
import json
import logging
import re
import sqlite3
from collections.abc import Sequence
from typing import Any

from django.db import utils as db_utils
from pydantic import ValidationError

from bhgbrain_site.core.contracts import ERROR_ECHO_MAX

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

    @property
    def details(self) -> dict[str, Any]:
        """Fields the envelope carries beside code, message and retryable (a subclass's figures)."""
        return {}


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
    """Too many calls: ``retry_after`` (seconds, when known) goes into the envelope and the
    ``Retry-After`` header."""

    code = "RATE_LIMITED"
    http_status = 429
    retryable = True

    def __init__(self, message: str, *, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after

    @property
    def details(self) -> dict[str, Any]:
        return {} if self.retry_after is None else {"retry_after": self.retry_after}


class QuotaExceeded(DomainError):
    """A write would take a namespace past its quota (``max_memories`` or a tier's budget) and its
    policy rejects, or nothing of it may be trimmed. 409: the request conflicts with the
    namespace's state; waiting alone frees no room (unlike 429), and the server is not at fault
    (unlike 507): forget memories or raise the quota, then send it again."""

    code = "QUOTA_EXCEEDED"
    http_status = 409

    def __init__(self, *, namespace: str, limit: int, count: int, tier: str | None = None, reason: str = "") -> None:
        scope = f"{tier} budget" if tier else "max_memories"
        super().__init__(f'Namespace "{namespace}" is at its quota: {scope} {limit}, {count} memories held'
                         + (f"; {reason}" if reason else ""))
        self.namespace, self.limit, self.count, self.tier = namespace, limit, count, tier

    @property
    def details(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "limit": self.limit, "count": self.count, "tier": self.tier}


class EmbeddingUnavailable(DomainError):
    code = "EMBEDDING_UNAVAILABLE"
    http_status = 503
    retryable = True


class StorageUnavailable(DomainError):
    """The store cannot take this now: its disk is full or read-only, or the database server is
    unreachable. The call did not complete; the same call succeeds once the operator fixed it."""

    code = "STORAGE_UNAVAILABLE"
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


ERRORS_LISTED = 10  # validation errors one message names
_PLAIN_FIELD = re.compile(r"[A-Za-z0-9_-]+")


def _field_part(part: str | int) -> str:
    text = str(part)
    return text if _PLAIN_FIELD.fullmatch(text) and len(text) <= ERROR_ECHO_MAX else json.dumps(text[:ERROR_ECHO_MAX])


def field_path(loc: Sequence[str | int]) -> str:
    """A field's path as an error message names it (``messages.3.content``); a key a client made
    up (empty, huge, with control characters or lone surrogates) is quoted, escaped and cut short."""
    return ".".join(_field_part(part) for part in loc) or "<body>"


def describe_validation_error(error: ValidationError) -> str:
    """Name each offending field; never echo the submitted values (they may be secrets)."""
    items = error.errors(include_input=False, include_url=False)
    parts = [f"{field_path(item['loc'])}: {item['msg']}" for item in items[:ERRORS_LISTED]]
    if len(items) > ERRORS_LISTED:  # 5,000 unknown fields make one short message, not 200 KB
        parts.append(f"and {len(items) - ERRORS_LISTED} more")
    return "Invalid input: " + "; ".join(parts)


def _envelope(code: str, message: str, retryable: bool, details: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "retryable": retryable, **(details or {})}}


# SQLite's primary result codes (the low byte of the extended one) and errnos that mean the storage
# itself refuses, not that our SQL is wrong (a bug: "no such table" is an OperationalError too).
_SQLITE_REASONS = {13: "the data directory's disk is full", 8: "the database is read-only",
                   10: "disk I/O error (is the data directory's file system full, read-only or failing?)",
                   14: "the database file cannot be opened (is the data directory read-only?)"}
_OS_REASONS = {errno.ENOSPC: "the data directory's disk is full", errno.EDQUOT: "the data directory's disk quota is used up",
               errno.EROFS: "the data directory is read-only"}


def storage_reason(exc: BaseException) -> str | None:
    """Why the storage refused, if ``exc`` (or its cause) is the storage layer refusing: a full or
    read-only disk, an unreachable PostgreSQL (Django's OperationalError/InterfaceError not raised
    by SQLite); None for anything else."""
    reason, seen = None, set()
    cause: BaseException | None = exc
    while cause is not None and reason is None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, sqlite3.Error):
            reason = _SQLITE_REASONS.get(getattr(cause, "sqlite_errorcode", -1) & 0xFF)
            break
        if isinstance(cause, OSError) and cause.errno in _OS_REASONS:
            reason = _OS_REASONS[cause.errno]
        elif isinstance(cause, (db_utils.OperationalError, db_utils.InterfaceError)) and not isinstance(cause.__cause__, sqlite3.Error):
            reason = "the database cannot be reached"
        cause = cause.__cause__ or cause.__context__
    return reason


def storage_failure(exc: BaseException) -> StorageUnavailable | None:
    """The STORAGE_UNAVAILABLE ``exc`` means (logged in one line), or None (see storage_reason)."""
    reason = storage_reason(exc)
    if reason is None:
        return None
    logger.error("storage unavailable: %s (%s: %s)", reason, type(exc).__name__, exc)
    return StorageUnavailable(f"Storage unavailable: {reason}; retry later")


def to_envelope(exc: BaseException) -> tuple[int, dict[str, Any]]:
    """Map any exception onto (HTTP status, envelope); bugs become INTERNAL, logged with their
    traceback, their text never sent to the client."""
    if not isinstance(exc, DomainError):
        exc = storage_failure(exc) or exc
    if isinstance(exc, DomainError):
        if exc.http_status >= 500 and type(exc) is DomainError:
            logger.error("internal error: %s", exc.message)
            return exc.http_status, _envelope("INTERNAL", "Internal error", False)
        return exc.http_status, _envelope(exc.code, exc.message, exc.retryable, exc.details)
    if isinstance(exc, ValidationError):
        return 400, _envelope("INVALID_INPUT", describe_validation_error(exc), False)
    logger.error("internal error", exc_info=exc)
    return 500, _envelope("INTERNAL", "Internal error", False)
