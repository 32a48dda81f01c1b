"""Structured (JSON) log formatting and token redaction."""
from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable

_BEARER_RE = re.compile(r"(Bearer\s+)[A-Za-z0-9._~+/=-]+", re.IGNORECASE)


class JsonFormatter(logging.Formatter):
    """One JSON object a line (observability.structured_logging)."""

    def format(self, record: logging.LogRecord) -> str:
        payload = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            payload["exc"] = self.formatException(record.exc_info)
        return json.dumps(payload, ensure_ascii=False)


class RedactFilter(logging.Filter):
    """Redact bearer tokens from every log line (security.log_redaction)."""

    def filter(self, record: logging.LogRecord) -> bool:
        from django.conf import settings

        if not settings.BHGBRAIN.security.log_redaction:
            return True
        message = record.getMessage()
        redacted = _BEARER_RE.sub(r"\1[REDACTED]", message)
        if redacted != message:
            record.msg, record.args = redacted, None
        return True


class StatelessNoiseFilter(logging.Filter):
    """Drop the MCP SDK's "Terminating session: None": with several workers MCP is stateless, and
    the SDK logs it at INFO after every request it answers (initialize, tools/list, ...), one line
    per request in the log file. A real session's termination (it names the id) is kept."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != "Terminating session: None"


# Functions that name the kind of credential a text holds (None: none). The memories app registers
# its secret scanner (memories/pipeline/normalize.py) from its AppConfig.ready; the ground layer cannot
# import it.
_secret_finders: list[Callable[[str], str | None]] = []


def register_secret_finder(finder: Callable[[str], str | None]) -> None:
    """Check every log message shown to a client with ``finder`` from now on (once per function)."""
    if finder not in _secret_finders:
        _secret_finders.append(finder)


def client_safe(message: str) -> str | None:
    """A log message as an MCP client may see it: bearer tokens redacted, and None (withheld
    whole) when a registered secret finder sees a credential in it."""
    redacted = _BEARER_RE.sub(r"\1[REDACTED]", message)
    if any(finder(redacted) is not None for finder in _secret_finders):
        return None
    return redacted
