"""Building blocks of the operations' input models (pydantic): unknown fields refused, strict
types, the seed's limits from bhgbrain_site.contracts. The models themselves live in each
app's ``operations.py``."""
from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints

from bhgbrain_site.contracts import (
    CATEGORY_NAME_PATTERN,
    COLLECTION_PATTERN,
    MAX_TAGS,
    MESSAGE_ID_MAX,
    NAMESPACE_PATTERN,
    QUERY_MAX,
    SPEAKER_MAX,
    TAG_MAX,
    THREAD_MAX,
)


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
