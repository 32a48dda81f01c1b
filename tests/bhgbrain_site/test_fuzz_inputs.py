"""Hypothesis fuzzing of every registered operation through the registry, the one path every
interface takes (MCP, POST /tool/<name>, GET /resource, REST, CLI), and of POST /tool/<name>
over HTTP.

Inputs are drawn from each operation's own input schema (so valid-looking values reach the
services) mixed with hostile ones: wrong types, missing and unknown fields, huge strings,
unicode, NUL, lone surrogates, nested objects, negative and huge numbers, dates at the ends of
the calendar, path traversal. Whatever arrives, a failure is the error envelope with a client
code (INVALID_INPUT naming the field at fault, NOT_FOUND, CONFLICT, FORBIDDEN), never INTERNAL,
never an uncaught exception; a success is JSON an interface can send.
"""
from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.core.serializers.json import DjangoJSONEncoder
from hypothesis import HealthCheck, given
from hypothesis import settings as fuzz_settings
from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy

from bhgbrain_site import registry
from bhgbrain_site.core.calls import CallContext, Principal
from bhgbrain_site.core.contracts import ERROR_ECHO_MAX
from bhgbrain_site.core.errors import DomainError, to_envelope
from tests.live_server import LiveServer

pytestmark = pytest.mark.django_db

FUZZ = fuzz_settings(max_examples=50, deadline=None, derandomize=True, database=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                       HealthCheck.data_too_large, HealthCheck.filter_too_much])
CLIENT_CODES = {"INVALID_INPUT", "NOT_FOUND", "CONFLICT", "FORBIDDEN"}
FULL = CallContext(actor="fuzz")
ALICE = CallContext(actor="fuzz", principal=Principal(name="alice", namespaces=frozenset({"alice"})))
ALICE_READ_ONLY = CallContext(actor="fuzz", principal=Principal(name="ro", namespaces=frozenset({"alice"}), read_only=True))

HOSTILE_STRINGS = [
    "", " ", "\x00", "a\x00b", "\ud800", "x\udfffy", "\u202e\u200b\ufeff", "💥" * 300, "雪" * 600, "e\u0301" * 50,
    "x" * 100_001, "y" * 500_001, "../../etc/passwd", "/etc/passwd", "..\\..\\windows\\win.ini", "%2e%2e%2fetc%2fpasswd",
    "~root/.ssh/id_rsa.bhgb", "~no-such-user-here/x.bhgb", "'; DROP TABLE memories_memory; --", '"', "*", "NEAR(", "OR",
    "^", "-", ":", "\\", "%", "_", "{}", "[]", "null", "NaN", "-1", "1e309", "T9", "7d", "0d", "9999999d",
    "0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-12:00", "9999-12-31T23:59:59", "2024-02-30T00:00:00",
    "00000000-0000-0000-0000-000000000000", "<script>alert(1)</script>", "memory://../../etc/passwd",
]
HOSTILE_NUMBERS = [0, -1, -(2**63), 2**63, 2**200, 10**30, -(10**30), 1.5, -0.0, 1e308, float("inf"), float("-inf"),
                   float("nan")]
_scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=30),
                     st.sampled_from(HOSTILE_STRINGS), st.sampled_from(HOSTILE_NUMBERS))
JSON_VALUES: SearchStrategy[Any] = st.recursive(
    _scalars, lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=12,
)
_ZONES = st.sampled_from([None, UTC, timezone(timedelta(hours=14)), timezone(timedelta(hours=-12, minutes=-59))])


def _mostly(inside: SearchStrategy[Any], edge: SearchStrategy[Any]) -> SearchStrategy[Any]:
    """``inside`` nine times in ten, else ``edge`` (just past a limit, a calendar's end...)."""
    return st.integers(0, 9).flatmap(lambda pick: edge if pick == 4 else inside)  # hypothesis favours 0 and 9


TIMESTAMPS = _mostly(
    st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(2200, 1, 1), timezones=_ZONES).map(
        lambda moment: moment.isoformat()),
    st.one_of(st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59), timezones=_ZONES).map(
        lambda moment: moment.isoformat()), st.integers(min_value=-(2**40), max_value=2**40),
              st.floats(allow_nan=True, allow_infinity=True)),
)


def _bounded(node: dict[str, Any], low_key: str, high_key: str) -> tuple[Any, Any]:
    return node.get(low_key, node.get("exclusiveMinimum")), node.get(high_key, node.get("exclusiveMaximum"))


def _numbers(node: dict[str, Any], integer: bool) -> SearchStrategy[Any]:
    low, high = _bounded(node, "minimum", "maximum")
    edges = [edge + step for edge in (low, high) if edge is not None for step in (-1, 0, 1)]
    inside = st.integers(low, high) if integer else st.floats(low, high)
    return _mostly(inside, st.sampled_from(edges)) if edges else inside


def _strings(node: dict[str, Any], name: str, pools: dict[str, list[str]]) -> SearchStrategy[Any]:
    if node.get("format") == "date-time":
        return TIMESTAMPS
    if node.get("format") == "duration":
        return st.from_regex(r"[0-9]{1,8}[dhmsw]", fullmatch=True)
    if name in pools:  # ids of memories that exist, paths in the backups folder
        return st.sampled_from(pools[name])
    high = node.get("maxLength")
    if "pattern" in node:
        inside = st.from_regex(node["pattern"], fullmatch=True)
    else:
        inside = st.text(min_size=node.get("minLength", 0), max_size=min(high or 40, 40))
    unstorable = ["a\x00b", "x\ud800y", "\udfff"]  # NUL (PostgreSQL refuses it), lone surrogates (not UTF-8)
    return _mostly(inside, st.sampled_from(unstorable + (["z" * (high + 1)] if high else [])))


def _from_schema(node: dict[str, Any], defs: dict[str, Any], name: str, pools: dict[str, list[str]]) -> SearchStrategy[Any]:
    """A strategy of valid-looking values for one JSON-schema node (pydantic's), edges included."""
    if "$ref" in node:
        return _from_schema(defs[node["$ref"].rsplit("/", 1)[-1]], defs, name, pools)
    if "anyOf" in node:
        return st.one_of([_from_schema(branch, defs, name, pools) for branch in node["anyOf"]])
    if "enum" in node or "const" in node:
        return st.sampled_from(node.get("enum", [node.get("const")]))
    kind = node.get("type")
    if kind == "string":
        return _strings(node, name, pools)
    if kind in ("integer", "number"):
        return _numbers(node, kind == "integer")
    if kind == "boolean":
        return st.booleans()
    if kind == "null":
        return st.none()
    if kind == "array":
        item = _from_schema(node.get("items", {}), defs, name, pools)
        high = node.get("maxItems")
        lists = st.lists(item, min_size=node.get("minItems", 0), max_size=min(high or 5, 5))
        return _mostly(lists, st.lists(item, min_size=high + 1, max_size=high + 1)) if high else lists
    if kind == "object":
        return _objects(node, defs, pools)
    return JSON_VALUES


def _objects(node: dict[str, Any], defs: dict[str, Any], pools: dict[str, list[str]]) -> SearchStrategy[dict[str, Any]]:
    """Objects with each field valid-looking or hostile, some missing, sometimes unknown ones."""
    properties, required = node.get("properties", {}), set(node.get("required", []))
    fields = {key: _from_schema(sub, defs, key, pools) for key, sub in properties.items()}

    @st.composite
    def draw_object(draw: st.DrawFn) -> dict[str, Any]:
        value = {}
        for key, strategy in fields.items():
            if draw(st.integers(0, 9)) < (9 if key in required else 5):  # some fields missing
                value[key] = draw(JSON_VALUES if draw(st.integers(0, 15)) == 7 else strategy)  # some hostile
        if draw(st.integers(0, 9)) == 4:
            value.update(draw(st.dictionaries(st.text(max_size=12).filter(lambda k: k not in properties),
                                              JSON_VALUES, min_size=1, max_size=2)))
        return value

    return draw_object()


def arguments_for(op: registry.Operation, pools: dict[str, list[str]]) -> SearchStrategy[Any]:
    schema = op.input_model.model_json_schema()
    objects = _objects(schema, schema.get("$defs", {}), pools)
    return st.integers(0, 19).flatmap(lambda pick: JSON_VALUES if pick == 9 else objects)


def _named(message: str, candidates: set[str]) -> bool:
    return any(re.search(rf"(?<![\w.]){re.escape(c)}(?![\w])", message) for c in candidates if c)


def check_outcome(op: registry.Operation, arguments: Any, call: Any, refusal: str | None = None) -> None:
    """Run ``call()``: a success must be sendable JSON; a failure a client code naming the field
    (``refusal``: the message of an operation this store refuses whatever the input, e.g. repair
    without Qdrant, which names the configuration key instead)."""
    try:
        result = call()
    except DomainError as exc:
        status, body = to_envelope(exc)
        error = body["error"]
        assert error["code"] in CLIENT_CODES, (op.name, arguments, error)
        assert 400 <= status < 500
        json.dumps(body).encode()
        if error["code"] == "INVALID_INPUT":
            keys = {form for key in arguments for form in (str(key), json.dumps(str(key)[:ERROR_ECHO_MAX]))
                    } if isinstance(arguments, dict) else set()
            named = {*op.input_model.model_fields, *keys, "arguments", exc.field or ""}
            assert error["message"] == refusal or _named(error["message"], named), (op.name, arguments, error)
        return
    json.dumps(result, cls=DjangoJSONEncoder, ensure_ascii=False).encode()


@pytest.fixture
def pools(hash_embedder, settings, tmp_path: Path) -> dict[str, list[str]]:  # noqa: ANN001
    """A store with something in it (so ids, threads and categories can hit), and the value pools
    the strategies draw from for fields a random string would never hit."""
    settings.BHGBRAIN_DATA_DIR = tmp_path
    ids = [registry.call("remember", {"content": f"Fuzz seed fact number {i}: the cache TTL is {i} minutes",
                                      "namespace": namespace, "tags": ["seed"]}, FULL)["id"]
           for i, namespace in enumerate(["global", "alice", "global", "bob"])]
    thread = registry.call("thread_append", {"thread": "t-1", "namespace": "alice", "messages": [
        {"content": "We should ship on Friday", "speaker": "ann", "message_id": "m1"},
        {"content": "Agreed, Friday it is", "speaker": "bo", "message_id": "m2"}]}, FULL)
    ids += [result["id"] for result in thread["results"]]
    registry.call("category", {"action": "set", "name": "values", "content": "Be kind", "namespace": "alice"}, FULL)
    backups = tmp_path / "backups"
    paths = [str(backups / "x.bhgb"), str(backups / ("a" * 300 + ".bhgb")), str(backups / ".." / "x.bhgb"),
             str(backups / "x.bhgb" / "y.bhgb"), str(backups / "x.txt"), "x.bhgb", str(tmp_path / "config.json"),
             "~no-such-user-here/x.bhgb", "~/x.bhgb", "/" + "b" * 5000 + ".bhgb"]
    return {"id": ids, "memory_id": ids, "path": paths, "thread": ["t-1", "t-2"], "name": ["values", "general", "seed"]}


@pytest.mark.parametrize("name", [op.name for op in registry.operations()])
def test_every_operation_answers_garbage_with_a_client_error(name: str, pools: dict[str, list[str]]) -> None:
    op = registry.get_operation(name)
    refusal = None
    if not op.input_model.model_json_schema().get("required"):
        try:
            registry.call(name, {}, FULL)
        except DomainError as exc:  # refused with no input at all: not about any field
            refusal = exc.message

    @FUZZ
    @given(arguments=arguments_for(op, pools), ctx=st.sampled_from([FULL, FULL, ALICE, ALICE_READ_ONLY]))
    def fuzz(arguments: Any, ctx: CallContext) -> None:
        check_outcome(op, arguments, lambda: registry.call(name, arguments, ctx), refusal)

    fuzz()


def test_post_tool_over_http_never_answers_5xx(tmp_path: Path) -> None:
    """Raw bodies (JSON of any shape, bytes that are not UTF-8 or not JSON, nesting thousands deep)
    to every tool of a real server: a 4xx envelope or a result, never a 5xx; the server stays up."""
    live = LiveServer(home=tmp_path, config={"security": {"rate_limit_rpm": 1_000_000}}).start()
    names = [op.name for op in registry.tools()] + ["no-such-tool", "memories.list"]
    raw_bodies = st.one_of(
        JSON_VALUES.map(lambda value: json.dumps(value).encode()),
        st.binary(max_size=64),
        st.sampled_from([b"\xff\xfe{}", b'{"content": "\xc3\x28"}', b"[" * 10_000 + b"]" * 10_000, b"{" * 100,
                         b'{"content": "a\\u0000b"}', b'{"query": "\\ud800"}', b"\x00", b'{"content": NaN}']),
    )

    @fuzz_settings(FUZZ, max_examples=100)
    @given(name=st.sampled_from(names), body=raw_bodies)
    def fuzz(name: str, body: bytes) -> None:
        response = live.post(name, raw=body)
        assert response.status_code < 500, (name, body[:200], response.text[:300])
        assert response.json().get("error", {}).get("code") != "INTERNAL"

    try:
        fuzz()
        assert httpx.get(live.url + "/health").status_code == 200
    finally:
        live.stop()
