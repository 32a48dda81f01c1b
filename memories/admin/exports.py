"""Exports of the governance console: the memory list (and, from retention, the archive) as JSON
Lines or CSV, streamed.

Rows are the shapes the API uses (``memory_to_dict``; the archive's ``archived_to_dict``), read
from the database ``chunk_size`` rows at a time and encoded one line at a time, so an export of
100k memories never holds them all in memory. Always limited to the curator's namespaces.
"""
from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone

from memories import funnel
from memories.curation.namespaces import Namespaces, within
from memories.models import Memory
from memories.selectors import memory_to_dict

EXPORT_CHUNK = 2000  # rows read at a time
FORMATS = {"jsonl": "application/x-ndjson; charset=utf-8", "csv": "text/csv; charset=utf-8"}
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")  # a spreadsheet would run such a cell as a formula


def memory_export_columns() -> list[str]:
    """The CSV header: ``memory_to_dict``'s keys, in its order."""
    return list(memory_to_dict(Memory()))


def memories_export(*, rows: QuerySet[Memory], namespaces: Namespaces,
                    chunk_size: int = EXPORT_CHUNK) -> Iterator[dict[str, Any]]:
    """Every memory of ``rows`` (a list's filtered, searched and ordered rows) within
    ``namespaces`` (None: all), as ``memory_to_dict`` shapes it, ``chunk_size`` rows at a time."""
    for memory in within(rows, namespaces).defer("embedding").iterator(chunk_size=chunk_size):
        yield memory_to_dict(memory)


def jsonl_lines(rows: Iterable[dict[str, Any]]) -> Iterator[str]:
    """One JSON object a line, as the API returns it (lossless; UTF-8, not escaped)."""
    for row in rows:
        yield json.dumps(row, ensure_ascii=False) + "\n"


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(str(v) for v in value)  # tags: letters, digits and "-", never a comma
    text = str(value)
    return "'" + text if text.startswith(_FORMULA_START) else text


def csv_lines(rows: Iterable[dict[str, Any]], columns: Sequence[str]) -> Iterator[str]:
    """A header, then one CSV record a row (lists joined with commas; a text cell that a
    spreadsheet would run as a formula gets a leading apostrophe — JSON Lines is the lossless
    format)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)

    def line(values: Iterable[Any]) -> str:
        writer.writerow(values)
        text = buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
        return text

    yield line(columns)
    for row in rows:
        yield line(_cell(row.get(column)) for column in columns)


def export_record(*, what: str, fmt: str, namespaces: Namespaces, query: str, actor: str) -> None:
    """Audit an export (EXPORT): who took which rows out, in which format; the namespace is the
    curator's one namespace, or ``*``."""
    scope = sorted(namespaces) if namespaces is not None else None
    namespace = scope[0] if scope is not None and len(scope) == 1 else "*"
    funnel.record_audit(operation="EXPORT", actor=actor, namespace=namespace, at=timezone.now(),
                        details={"what": what, "format": fmt, "query": query[:500],
                           "namespaces": scope})
