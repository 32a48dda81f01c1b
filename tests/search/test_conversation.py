"""Reading conversations: results with their neighbouring turns, recall gating on small talk,
follow-ups that borrow their thread's last turns, and the hand-off pack."""
from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from bhgbrain_site.core.calls import CallContext
from bhgbrain_site.registry import call, read_resource
from categories.services import category_set
from memories.remember import RememberInput, thread_append
from search.gating import skip_reason
from search.handoff import fit_sentences, handoff_pack
from tests.conftest import remember

pytestmark = pytest.mark.django_db
CLI = CallContext(actor="test")
T0 = datetime(2024, 3, 1, 9, 0, tzinfo=UTC)
LABELS = Path(__file__).with_name("gating_messages.jsonl")


def chat(lines: list[tuple[str, str]], *, thread: str = "t1", namespace: str = "global") -> list[str]:
    batch = [RememberInput(content=text, namespace=namespace, collection="general", thread=thread, speaker=speaker,
                           message_id=f"{thread}-{i}", occurred_at=T0 + timedelta(minutes=i))
             for i, (speaker, text) in enumerate(lines)]
    return [r["id"] for r in thread_append(messages=batch, actor="test")]


CONVERSATION = [
    ("Bob", "Did you book the flights to Reykjavik for the conference?"),
    ("Ann", "Yes, we leave on the 14th and come back on the 19th."),
    ("Bob", "Great. Which hotel did you pick?"),
    ("Ann", "The one by the harbour, it has a sauna."),
    ("Bob", "Perfect, I prefer places near the water."),
]


def test_results_carry_their_neighbouring_turns(hash_embedder) -> None:
    ids = chat(CONVERSATION)
    plain = remember("The Reykjavik conference budget is 2000 EUR").id
    results = call("search", {"query": "harbour sauna hotel", "mode": "fulltext", "with_context": 1}, CLI)["results"]
    hit = next(r for r in results if r["id"] == ids[3])
    assert hit["thread"] == "t1" and hit["speaker"] == "Ann"
    assert [t["content"] for t in hit["context"]["before"]] == [CONVERSATION[2][1]]
    assert [t["content"] for t in hit["context"]["after"]] == [CONVERSATION[4][1]]
    wide = call("search", {"query": "harbour sauna hotel", "mode": "fulltext", "with_context": 5}, CLI)["results"]
    assert len(next(r for r in wide if r["id"] == ids[3])["context"]["before"]) == 3
    facts = call("search", {"query": "conference budget", "mode": "fulltext", "with_context": 2}, CLI)["results"]
    assert next(r for r in facts if r["id"] == plain).get("context") is None  # a plain fact has no turns
    no_context = call("search", {"query": "harbour sauna hotel", "mode": "fulltext"}, CLI)["results"]
    assert "context" not in no_context[0]


def test_context_turns_give_way_first_when_the_response_is_too_long(hash_embedder, bhg_config) -> None:
    chat([("Ann", "word " * 300 + "zebra"), ("Bob", "zebra crossing " * 200), ("Ann", "more " * 300)])
    bhg_config.defaults.max_response_chars = 3000
    out = call("search", {"query": "zebra", "mode": "fulltext", "with_context": 2}, CLI)
    assert len(json.dumps(out["results"])) <= 3000 + 200
    assert all("context" not in r for r in out["results"]) and out["results"][0].get("context_truncated")


def test_gating_skips_small_talk_and_keeps_every_real_question() -> None:
    rows = [json.loads(line) for line in LABELS.read_text(encoding="utf-8").splitlines()]
    assert len(rows) >= 200
    skipped = [row for row in rows if skip_reason(row["text"]) is not None]
    wrongly = [row["text"] for row in skipped if not row["small_talk"]]
    precision = 1 - len(wrongly) / len(skipped)
    assert precision >= 0.95, wrongly
    small_talk = [row for row in rows if row["small_talk"]]
    assert sum(skip_reason(r["text"]) is not None for r in small_talk) / len(small_talk) >= 0.9


def test_recall_with_gate_skips_small_talk_and_expands_a_follow_up(hash_embedder) -> None:
    chat(CONVERSATION)
    skipped = call("recall", {"query": "thanks!", "gate": True}, CLI)
    assert skipped == {"results": [], "meta": {"skipped": "thanks"}}
    assert call("recall", {"query": "好的，收到", "gate": True}, CLI)["meta"] == {"skipped": "acknowledgement"}
    ungated = call("recall", {"query": "thanks!", "min_score": 0.0}, CLI)
    assert "meta" not in ungated  # without gate nothing is skipped
    follow_up = call("recall", {"query": "and the other one?", "gate": True, "thread": "t1", "min_score": 0.0}, CLI)
    assert follow_up["meta"] == {"expanded_with_thread_turns": 4}
    inject = read_resource("memory://inject?query=ok%20thanks&gate=true", CLI)
    assert inject["meta"] == {"skipped": "thanks"} and inject["memories_count"] == 0


def test_handoff_pack_has_every_section_within_budget_and_never_cuts_a_sentence(hash_embedder) -> None:
    category_set(namespace="global", name="about-ann", slot="custom", content="Ann is a product manager in Lisbon.",
                 actor="test")
    chat(CONVERSATION)
    remember("Book the conference dinner", status="planned", event_at=timezone.now() + timedelta(days=5))
    remember("Old plan: visit the glacier", status="planned", event_at=timezone.now() - timedelta(days=5))
    pack = handoff_pack(namespace="global", thread="t1")
    text = pack["content"]
    assert pack["chars"] == len(text) <= 1500
    for title in ("## Profile", "## Last turns", "## Open items", "## Recent topics", "## Preferences"):
        assert title in text
    assert "Ann is a product manager in Lisbon." in text
    assert text.index("Bob: Did you book the flights") < text.index("Bob: Perfect, I prefer places near the water.")
    assert "Book the conference dinner" in text and "glacier" not in text  # a past plan is not open
    assert "I prefer places near the water" in text.split("## Preferences")[1]
    whole = set(text.splitlines())  # the full pack holds every item whole
    small = handoff_pack(namespace="global", thread="t1", max_chars=300)
    assert small["chars"] <= 300 and small["sections"]["last_turns"] >= 1
    for line in small["content"].splitlines():  # each item whole, or its first sentences
        assert line in whole or any(item.startswith(line) and re.search(r"[.!?。！？]$", line) for item in whole), line
    assert read_resource("memory://handoff?thread=t1", CLI)["content"] == text


def test_fit_sentences_cuts_only_at_a_sentence_end() -> None:
    text = "First sentence here. Second one is longer than that. Third."
    assert fit_sentences(text, 200) == text
    assert fit_sentences(text, 40) == "First sentence here."
    assert fit_sentences(text, 10) is None
    assert fit_sentences("没有标点的一长句话" * 10, 20) is None
    assert fit_sentences("第一句。第二句很长很长很长。", 5) == "第一句。"
