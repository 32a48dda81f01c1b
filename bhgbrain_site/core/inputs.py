"""Building blocks of the operations' input models (pydantic): unknown fields refused, strict
types, the seed's limits from bhgbrain_site.core.contracts. The models themselves live in each
app's ``operations.py``."""
from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints

from bhgbrain_site.core.contracts import (
    CATEGORY_NAME_PATTERN,
    COLLECTION_PATTERN,
    FACT_KEY_MAX,
    JSON_DEPTH_MAX,
    MAX_TAGS,
    MESSAGE_ID_MAX,
    NAMESPACE_PATTERN,
    QUERY_MAX,
    SPEAKER_MAX,
    TAG_MAX,
    THREAD_MAX,
)
from bhgbrain_site.core.errors import InvalidInput, field_path


class Input(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


Namespace = Annotated[str, StringConstraints(pattern=NAMESPACE_PATTERN)]
CollectionName = Annotated[str, StringConstraints(pattern=COLLECTION_PATTERN)]
CategoryName = Annotated[str, StringConstraints(pattern=CATEGORY_NAME_PATTERN)]
Tag = Annotated[str, StringConstraints(pattern=r"^[a-zA-Z0-9-]+$", min_length=1, max_length=TAG_MAX)]
Tags = Annotated[list[Tag], Field(max_length=MAX_TAGS)]
Query = Annotated[str, StringConstraints(min_length=1, max_length=QUERY_MAX)]
MemoryId = Annotated[str, StringConstraints(min_length=1, max_length=64)]
Cursor = Annotated[str, StringConstraints(min_length=1, max_length=200)]
# a thread id: the client's, any text but "/" (it is a REST path segment) and control characters
ThreadId = Annotated[str, StringConstraints(pattern=rf"^[^/\x00-\x1f\x7f]{{1,{THREAD_MAX}}}$")]
Speaker = Annotated[str, StringConstraints(min_length=1, max_length=SPEAKER_MAX)]
MessageId = Annotated[str, StringConstraints(min_length=1, max_length=MESSAGE_ID_MAX)]
FactKey = Annotated[str, StringConstraints(min_length=1, max_length=FACT_KEY_MAX)]  # free text; memories/temporal normalises it


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


# ISO 8601 text (a time without a zone is UTC) or Unix seconds; accepted as text even in strict models
Timestamp = Annotated[datetime, Field(strict=False), AfterValidator(_aware)]

_DURATION = re.compile(r"([1-9][0-9]{0,5})([dhm])")
_DURATION_UNITS = {"d": "days", "h": "hours", "m": "minutes"}


def _duration(value: Any) -> timedelta:
    found = _DURATION.fullmatch(value.strip()) if isinstance(value, str) else None
    if found is None:
        raise ValueError("expected a positive number and a unit d, h or m, e.g. 7d, 12h or 30m")
    return timedelta(**{_DURATION_UNITS[found[2]]: int(found[1])})


# a window such as "7d", "12h" or "30m" (the seed's `list --expiring-within 7d`)
Duration = Annotated[timedelta, BeforeValidator(_duration)]


_SURROGATE = re.compile("[\ud800-\udfff]")
# texts the write pipeline normalises (the seed's first step strips control characters, NUL too)
NORMALISED_TEXTS = frozenset({"content", "answers"})


def _unstorable_text(text: str, *, normalised: bool = False) -> str | None:
    if "\x00" in text and not normalised:
        return "NUL characters (\\u0000) are not allowed"
    if _SURROGATE.search(text):
        return "lone surrogates (\\ud800-\\udfff) are not valid Unicode text"
    return None


def check_storable(arguments: Any) -> None:
    """INVALID_INPUT naming the field, before any model sees the arguments, for what no store can
    keep or no interface can send back: NUL characters (PostgreSQL refuses them in text; in the
    NORMALISED_TEXTS the write pipeline strips them), lone surrogates (not UTF-8) in values or
    keys, and nesting deeper than JSON_DEPTH_MAX (walked without recursion, so no depth can
    exhaust the stack)."""
    pending: list[tuple[tuple[str | int, ...], Any]] = [((), arguments)]
    while pending:
        path, value = pending.pop()
        if len(path) > JSON_DEPTH_MAX:
            raise InvalidInput(f"Invalid input: {field_path(path[:1])}: nested deeper than {JSON_DEPTH_MAX} levels",
                               field=str(path[0]))
        if isinstance(value, dict):
            for key, item in value.items():
                problem = _unstorable_text(key) if isinstance(key, str) else None
                if problem:
                    raise InvalidInput(f"Invalid input: {field_path((*path, key))}: {problem} in a field name")
                pending.append(((*path, key), item))
        elif isinstance(value, list):
            pending.extend(((*path, index), item) for index, item in enumerate(value))
        elif isinstance(value, str):
            problem = _unstorable_text(value, normalised=bool(path) and path[-1] in NORMALISED_TEXTS)
            if problem:
                raise InvalidInput(f"Invalid input: {field_path(path)}: {problem}", field=str(path[0]) if path else None)


def parse_json_body(raw: bytes) -> Any:
    """A request body as JSON; INVALID_INPUT, never a 500, for bytes that are not JSON, not
    UTF-8, or nested deeper than the parser can follow (thousands of ``[``)."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise InvalidInput("Invalid input: the body must be a JSON object (UTF-8 JSON, "
                           f"nested at most {JSON_DEPTH_MAX} levels)") from None
