"""The lean output schemas MCP clients get (mcp_bridge/schemas.py) accept and refuse exactly what
pydantic's schemas do."""
from __future__ import annotations

import copy
from datetime import datetime
from typing import Any, Literal

import pytest
from jsonschema import Draft202012Validator
from pydantic import BaseModel, ConfigDict

from bhgbrain_site import registry
from mcp_bridge.schemas import lean_schema


class Turn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    speaker: str | None = None
    text: str


class Node(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    children: list[Node] = []


class Sample(BaseModel):
    model_config = ConfigDict(extra="forbid")
    title: str  # a field named like the annotation: must survive
    note: str | None = None
    status: Literal["planned", "done"] | None = None
    at: datetime | None = None
    score: float | None = None
    tags: list[str] | None = None
    turn: Turn | None = None
    turns: list[Turn] = []
    tree: Node | None = None


SAMPLES: list[Any] = [
    {"title": "a"},
    {"title": "a", "note": None, "status": None, "at": None, "score": None, "tags": None, "turn": None, "tree": None},
    {"title": "a", "note": "n", "status": "done", "at": "2026-12-01T00:00:00Z", "score": 1.5, "tags": ["x"],
     "turn": {"text": "hi", "speaker": None}, "turns": [{"text": "t"}], "tree": {"name": "r", "children": [{"name": "c"}]}},
    {},  # title missing
    {"title": None},
    {"title": "a", "note": 5},
    {"title": "a", "status": "bogus"},
    {"title": "a", "status": 3},
    {"title": "a", "score": "high"},
    {"title": "a", "tags": [1]},
    {"title": "a", "turn": {"speaker": "x"}},
    {"title": "a", "turn": {"text": "t", "extra": 1}},
    {"title": "a", "turns": None},
    {"title": "a", "tree": {"name": "r", "children": [{"name": 3}]}},
    {"title": "a", "surprise": True},
    [],
]


def _agree(original: dict[str, Any], instances: list[Any]) -> None:
    lean = lean_schema(original)
    Draft202012Validator.check_schema(lean)
    before, after = Draft202012Validator(original), Draft202012Validator(lean)
    for instance in instances:
        assert before.is_valid(instance) == after.is_valid(instance), instance


def test_lean_schema_accepts_and_refuses_what_pydantics_does() -> None:
    schema = {"type": "object", **Sample.model_json_schema(mode="serialization")}
    _agree(schema, SAMPLES)
    lean = lean_schema(schema)
    assert "title" in lean["properties"] and "anyOf" not in lean["properties"]["note"]
    assert lean["properties"]["status"]["enum"] == ["planned", "done", None]
    assert "$defs" in lean and set(lean["$defs"]) >= {"Node"}  # the recursive model keeps its reference


HIT = {"id": "f03188d4-4137-463e-bc37-6344b3c1adaf", "namespace": "global", "collection": "general", "content": "c",
       "summary": "s", "type": "semantic", "tags": ["a"], "category": None, "importance": 0.5, "score": 0.9,
       "semantic_score": None, "fulltext_score": 1.2, "retention_tier": "T2", "expires_at": "2026-12-01T00:00:00Z",
       "expiring_soon": False, "created_at": "2026-12-01T00:00:00Z", "last_accessed": None, "device_id": None,
       "valid_from": "2026-12-01T00:00:00Z", "valid_until": None, "superseded_by": None, "key": None, "current": True}


def _mutations(result: dict[str, Any]) -> list[Any]:
    changes: list[tuple[str, Any]] = [("score", "x"), ("category", 5), ("retention_tier", "T9"), ("status", "bogus"),
                                      ("status", "done"), ("expires_at", None), ("expires_at", 3), ("tags", None),
                                      ("context", None), ("context", {"before": []}), ("bogus", 1), ("thread", "t"),
                                      ("current", None), ("current", "yes"), ("valid_from", None), ("superseded_by", 7)]
    out: list[Any] = [result]
    for key, value in changes:
        changed = copy.deepcopy(result)
        changed["results"][0][key] = value
        out.append(changed)
    missing = copy.deepcopy(result)
    del missing["results"][0]["id"]
    return [*out, missing, {"results": None}, {"results": [], "truncated": None}, {"results": [], "truncated": "no"}]


@pytest.mark.django_db
def test_every_tools_lean_schema_agrees_with_its_model() -> None:
    for operation in registry.tools():
        schema = operation.output_schema()
        assert schema is not None, operation.name
        Draft202012Validator.check_schema(lean_schema(schema))
    search = registry.get_operation("search").output_schema()
    assert search is not None
    result = {"results": [HIT, HIT]}
    assert Draft202012Validator(search).is_valid(result)
    _agree(search, _mutations(result))
