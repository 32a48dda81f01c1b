"""A real MCP client session (the mcp SDK over stdio, against the real server) asking "as of"
questions: a fact's versions written with a key, then search and recall as of earlier times and
with history. The SDK checks every structured result against the tool's output schema."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from mcp import ClientSession
from mcp.client.stdio import stdio_client

from tests.mcp_bridge.test_mcp_sessions import _run, _stdio_params

NS = {"namespace": "as-of"}
VERSIONS = [
    ("The API gateway is Kong, run by the platform team", "2026-01-05T09:00:00Z"),
    ("We moved the API gateway to Envoy with the new mesh", "2026-03-10T09:30:00Z"),
]


async def _ask(client: ClientSession) -> dict[str, Any]:
    await client.initialize()
    ids = []
    for content, since in VERSIONS:
        stored = await client.call_tool("remember", {"content": content, "key": "infra/api-gateway", "valid_from": since,
                                                     **NS})
        assert stored.is_error is not True, stored
        ids.append(stored.structured_content["id"])

    async def results(tool: str, **arguments: Any) -> list[dict[str, Any]]:
        answer = await client.call_tool(tool, {"query": "which API gateway do we use?", **NS, **arguments})
        assert answer.is_error is not True, answer
        return answer.structured_content["results"]

    return {
        "ids": ids,
        "now": await results("search"),
        "february": await results("search", as_of="2026-02-01"),
        "march_day": await results("search", as_of="2026-03-10", mode="fulltext"),
        "just_before": await results("search", as_of="2026-03-10T09:29:59Z", mode="fulltext"),
        "history": await results("search", include_history=True),
        "recall_february": await results("recall", as_of="2026-02-01", min_score=0),
        "bad": await client.call_tool("search", {"query": "gateway", "as_of": "last winter", **NS}),
    }


def test_an_mcp_client_asks_as_of_questions(tmp_path: Path) -> None:
    async def session() -> dict[str, Any]:
        async with stdio_client(_stdio_params(tmp_path)) as (read, write):
            async with ClientSession(read, write) as client:
                return await _ask(client)

    seen = _run(session)
    kong, envoy = seen["ids"]
    assert [r["id"] for r in seen["now"]] == [envoy]
    assert seen["now"][0]["current"] is True and seen["now"][0]["key"] == "infra/api-gateway"
    assert [r["id"] for r in seen["february"]] == [kong]
    assert seen["february"][0]["superseded_by"] == envoy and seen["february"][0]["current"] is False
    assert seen["february"][0]["valid_until"] == "2026-03-10T09:30:00Z"
    assert [r["id"] for r in seen["march_day"]] == [envoy]  # a bare date: the end of that day
    assert [r["id"] for r in seen["just_before"]] == [kong]
    assert [(r["id"], r["current"]) for r in seen["history"]] == [(envoy, True), (kong, False)]
    assert [r["id"] for r in seen["recall_february"]] == [kong]
    bad = seen["bad"]
    assert bad.is_error is True
    assert bad.structured_content["error"]["code"] == "INVALID_INPUT"
    assert "as_of" in bad.structured_content["error"]["message"]
