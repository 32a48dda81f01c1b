"""Structured (JSON) log formatting and token redaction."""
from __future__ import annotations

import json
import logging
import re

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
