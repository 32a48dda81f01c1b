"""DRF's request parsers (settings.REST_FRAMEWORK["DEFAULT_PARSER_CLASSES"]); a module of their
own because DRF imports them while its views load, before bhgbrain_site.rest could be."""
from __future__ import annotations

from typing import Any

from rest_framework import exceptions, parsers


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser; a body nested past Python's recursion limit is a 400 like any bad JSON."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: dict[str, Any] | None = None) -> Any:
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise exceptions.ParseError("JSON parse error - nested too deeply") from None
