"""Output schemas as MCP clients validate them: the same constraints, cheaper to check.

An SDK client validates every structured tool result against the tool's ``outputSchema``; the
Python SDK does it with ``jsonschema``, where pydantic's spelling of an optional field
(``anyOf: [{type: T}, {type: null}]``), per-field titles and ``$ref`` lookups make a search
result with ten hits cost about 2.4 ms per call on this machine: more than the transport.
:func:`lean_schema` rewrites a schema into an equivalent one (every instance valid under one is
valid under the other): optional fields as ``type: [T, "null"]`` (an enum gains ``null``),
no ``title`` annotations, and non-recursive ``$ref``\\s inlined. Measured: 2.4 → 1.3 ms.
"""
from __future__ import annotations

import json
from typing import Any

NULL = {"type": "null"}
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions")  # name → schema
_DEFS_PREFIX = "#/$defs/"


def lean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """An equivalent, faster-to-validate form of a pydantic JSON schema."""
    lean = _lean(schema)
    defs = lean.get("$defs", {})
    inlined = _inline(lean, defs, ())
    if defs and _DEFS_PREFIX in json.dumps(inlined):  # a recursive model: its definitions stay
        inlined["$defs"] = defs
    return inlined


def _lean(node: Any) -> Any:
    if isinstance(node, list):
        return [_lean(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "title" and isinstance(value, str):
            continue  # an annotation: never changes what validates
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: _lean(sub) for name, sub in value.items()}  # names kept, even "title"
        else:
            out[key] = _lean(value)
    return _nullable(out)


def _nullable(node: dict[str, Any]) -> dict[str, Any]:
    """``anyOf: [{type: T, …}, {type: null}]`` as ``{type: [T, "null"], …}`` when that says the same."""
    branches = node.get("anyOf")
    if not (isinstance(branches, list) and len(branches) == 2 and NULL in branches):
        return node
    other = branches[0] if branches[1] == NULL else branches[1]
    if not isinstance(other, dict) or not isinstance(other.get("type"), str) or other["type"] == "null":
        return node
    if set(other) - {"type", "enum", "format", "items", "maxItems", "minItems", "maxLength", "minLength",
                     "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "pattern", "description"}:
        return node  # keywords whose meaning for null is not obviously "does not apply": keep the anyOf
    rest = {key: value for key, value in node.items() if key != "anyOf"}
    if set(rest) & set(other):
        return node
    merged = {**other, "type": [other["type"], "null"]}
    if "enum" in merged:
        merged["enum"] = [*merged["enum"], None]
    return {**rest, **merged}


def _inline(node: Any, defs: dict[str, Any], expanding: tuple[str, ...]) -> Any:
    if isinstance(node, list):
        return [_inline(item, defs, expanding) for item in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith(_DEFS_PREFIX) and len(node) == 1:
        name = ref[len(_DEFS_PREFIX):]
        if name in defs and name not in expanding:
            return _inline(defs[name], defs, (*expanding, name))
        return node  # recursive (or unknown): left as a reference
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "$defs":
            continue
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: _inline(sub, defs, expanding) for name, sub in value.items()}
        else:
            out[key] = _inline(value, defs, expanding)
    return out
