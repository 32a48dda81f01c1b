"""Building blocks of the operations' output models (pydantic): the shape of every successful
result, defined once and used by every interface that documents one (MCP ``outputSchema``, the
REST OpenAPI schema). The models themselves live next to each app's operations
(``<app>/outputs.py``); their JSON schemas refuse unknown fields, so a result that gains a key
its model lacks fails the client-side check in the MCP session tests instead of drifting."""
from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from bhgbrain_site.core.contracts import MAX_TAGS


class Output(BaseModel):
    """An object result: every key named, no other key allowed."""

    model_config = ConfigDict(extra="forbid")


# An ISO 8601 UTC time, as every result writes one (memories.selectors.iso)
Stamp = datetime
TagList = Annotated[list[str], Field(max_length=MAX_TAGS)]

