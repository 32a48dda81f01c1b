"""Reading data this store did not write (old backups, the original's files, Qdrant payloads):
every value is checked, bounded or replaced by a default, never trusted."""
from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from django.utils.dateparse import parse_datetime

from bhgbrain_site.core.contracts import (
    COLLECTION_MAX,
    EVENT_STATUSES,
    FACT_KEY_MAX,
    MAX_TAGS,
    MESSAGE_ID_MAX,
    NAMESPACE_MAX,
    SPEAKER_MAX,
    THREAD_MAX,
)


def choice_or(value: Any, allowed: Iterable[str], default: str) -> str:
    """``value`` if it is one of ``allowed``, else ``default``."""
    return value if value in set(allowed) else default


def when(value: Any, default: datetime | None = None) -> datetime | None:
    """A timestamp: ISO 8601 text (naive means UTC) or Unix seconds; ``default`` otherwise."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return datetime.fromtimestamp(value, tz=UTC)
    if not isinstance(value, str) or not value:
        return default
    parsed = parse_datetime(value.replace("Z", "+00:00"))
    if parsed is None:
        return default
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def json_list(value: Any) -> list[Any]:
    """A list, from a list or its JSON text; anything else is empty."""
    try:
        parsed = json.loads(value) if isinstance(value, str) else value
    except json.JSONDecodeError:
        return []
    return parsed if isinstance(parsed, list) else []


def json_object(value: Any) -> dict[str, Any]:
    """A dict, from a dict or its JSON text; other values are kept under a key."""
    try:
        parsed = json.loads(value) if isinstance(value, str) else value
    except json.JSONDecodeError:
        return {"text": str(value)[:1000]}
    return parsed if isinstance(parsed, dict) else {"value": parsed}


def tags(value: Any) -> list[str]:
    """At most MAX_TAGS string tags."""
    return [t for t in json_list(value) if isinstance(t, str)][:MAX_TAGS]


def uuid_or_none(value: Any) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value)) if value else None
    except ValueError:
        return None


def unit_interval(value: Any, default: float = 0.5) -> float:
    """A number clamped to 0..1 (importance)."""
    try:
        return min(1.0, max(0.0, float(value)))
    except (TypeError, ValueError):
        return default


def count(value: Any) -> int:
    try:
        return max(0, int(value))
    except (TypeError, ValueError):
        return 0


def conversation(get: Callable[[str], Any]) -> dict[str, Any]:
    """A memory's conversation and event fields from foreign data (``get(key)`` → its value or None)."""
    def text(key: str, limit: int) -> str | None:
        value = get(key)
        return str(value)[:limit] if value else None

    return {
        "thread": text("thread", THREAD_MAX), "speaker": text("speaker", SPEAKER_MAX),
        "message_id": text("message_id", MESSAGE_ID_MAX), "occurred_at": when(get("occurred_at")),
        "event_at": when(get("event_at")), "valid_until": when(get("valid_until")),
        "status": get("status") if get("status") in EVENT_STATUSES else None,
    }


def validity(get: Callable[[str], Any]) -> dict[str, Any]:
    """A memory's place in time from foreign data (memories/temporal): ``valid_from``,
    ``superseded_by`` (a UUID, else none) and ``fact_key`` (normalised; too long or blank: none)."""
    successor, key = get("superseded_by"), " ".join(str(get("fact_key") or "").split()).casefold()
    try:
        superseded_by = uuid.UUID(str(successor)) if successor else None
    except ValueError:
        superseded_by = None
    return {"valid_from": when(get("valid_from")), "superseded_by": superseded_by,
            "fact_key": key if 0 < len(key) <= FACT_KEY_MAX else None}


def namespace(value: Any) -> str:
    return str(value)[:NAMESPACE_MAX]


def collection(value: Any) -> str:
    return str(value or "general")[:COLLECTION_MAX]
