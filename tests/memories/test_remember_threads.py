"""Conversation memory: threaded writes, idempotency by message id, order, batch append, the
context each message is indexed with, and event validity."""
from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from django.utils import timezone

from bhgbrain_site.core.calls import CallContext
from bhgbrain_site.core.errors import Conflict, InvalidInput
from bhgbrain_site.registry import call
from memories import conversations
from memories.curation.edits import memory_edit
from memories.embeddings import from_bytes
from memories.models import AuditLog, ChangeFeedEntry, Memory
from memories.remember import RememberInput, thread_append
from memories.services import memories_vector_sync, memory_forget
from retention.archive import archive_restore
from retention.cleanup import _archive as archive_row
from search.selectors import fulltext_hits
from tests.conftest import remember

pytestmark = pytest.mark.django_db
T0 = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
CLI = CallContext(actor="test")


def say(content: str, *, thread: str = "s1", at: int = 0, message_id: str | None = None, speaker: str = "Ann",
        namespace: str = "chat", **fields: object):
    return remember(content, namespace=namespace, thread=thread, speaker=speaker, message_id=message_id,
                    occurred_at=T0 + timedelta(minutes=at), **fields)


def ft(query: str, namespace: str = "chat") -> list[str]:
    return [h.memory_id for h in fulltext_hits(query, namespace=namespace, collection=None, limit=10, now=timezone.now())]


def test_a_resent_message_id_is_a_noop_with_the_same_id_and_other_words_are_a_conflict(hash_embedder) -> None:
    first = say("I moved to Lisbon last spring", message_id="m-1")
    assert first.operation == "ADD"
    again = say("I moved to Lisbon last spring", message_id="m-1")
    assert (again.operation, again.id) == ("NOOP", first.id)
    with pytest.raises(Conflict, match="m-1"):
        say("I moved to Porto last spring", message_id="m-1")
    with pytest.raises(Conflict, match="thread"):
        say("I moved to Lisbon last spring", message_id="m-1", thread="s2")
    assert Memory.objects.count() == 1


def test_the_same_words_are_two_turns_with_two_ids_and_one_without(hash_embedder) -> None:
    a = say("ok", message_id="a", at=1)
    b = say("ok", message_id="b", at=2)
    assert a.operation == b.operation == "ADD" and a.id != b.id
    c = say("sounds good", at=3)
    assert say("sounds good", at=4).id == c.id  # no message id: the same words again in the thread are one message
    other_thread = say("sounds good", at=5, thread="s2")
    assert other_thread.operation == "ADD"
    fact = remember("sounds good", namespace="chat")  # a plain fact is not deduplicated against messages
    assert fact.operation == "ADD" and Memory.objects.filter(namespace="chat", content="sounds good").count() == 3


def test_messages_are_never_merged_by_semantic_dedup(e5) -> None:
    first = say("Our auth service uses JWT tokens that expire after one hour", message_id="1", at=1)
    near = say("Our auth service uses JWT tokens which expire after one hour", message_id="2", at=2)
    assert near.operation == "ADD" and near.id != first.id
    fact = remember("Our auth service uses JWT tokens that expire after one hour.", namespace="chat")
    assert fact.operation == "ADD"  # a fact never merges into a message either
    assert Memory.objects.get(id=first.id).content == "Our auth service uses JWT tokens that expire after one hour"


def test_turns_are_ordered_by_occurred_at_then_arrival(hash_embedder) -> None:
    late = say("third", at=10)
    early = say("first", at=1)
    same_a = say("second a", at=5)
    same_b = say("second b", at=5)
    order = [str(m.id) for m in conversations.thread_turns("chat", "s1")]
    assert order == [early.id, same_a.id, same_b.id, late.id]


def test_the_vector_covers_the_turn_before_and_the_message(hash_embedder) -> None:
    say("Where did you go on holiday?", at=1, speaker="Bob")
    answer = say("Yeah, I went there last Friday", at=2)
    stored = from_bytes(Memory.objects.get(id=answer.id).embedding)
    expected = hash_embedder.embed_passage("Where did you go on holiday?\nYeah, I went there last Friday")
    assert np.allclose(stored, expected)


def test_the_vector_covers_only_the_end_of_a_long_turn_before(hash_embedder) -> None:
    long_turn = " ".join(f"w{i}" for i in range(60)) + " so, where did you go?"
    say(long_turn, at=1, speaker="Bob")
    answer = say("Paris, last Friday", at=2)
    tail = " ".join(long_turn.split()[-conversations.EMBED_PREVIOUS_WORDS:])
    assert tail.startswith("w33 ") and len(tail) < len(long_turn)
    stored = from_bytes(Memory.objects.get(id=answer.id).embedding)
    assert np.allclose(stored, hash_embedder.embed_passage(f"{tail}\nParis, last Friday"))


def test_the_tail_of_a_turn_counts_words_and_cjk_characters() -> None:
    assert conversations.tail_words("a b c  d, e.", 2) == "d, e."
    assert conversations.tail_words("我们明天去北京吃烤鸭好吗", 4) == "烤鸭好吗"
    assert conversations.tail_words("Hello 世界 and more", 3) == "界 and more"
    assert conversations.tail_words("ok", 32) == "ok" and conversations.tail_words("", 3) == ""


def test_every_path_that_embeds_a_message_again_embeds_the_same_passage(hash_embedder) -> None:
    say("Where did you go on holiday?", at=1, speaker="Bob")
    answer = say("Yeah, I went there last Friday", at=2)
    expected = hash_embedder.embed_passage("Where did you go on holiday?\nWe went to Lisbon last Friday")

    def vector() -> np.ndarray:
        return from_bytes(Memory.objects.get(id=answer.id).embedding)

    memory_edit(memory_id=str(answer.id), changes={"content": "We went to Lisbon last Friday"}, actor="test")
    assert np.allclose(vector(), expected)  # an edit
    Memory.objects.filter(id=answer.id).update(embedding=None, vector_synced=False)
    assert memories_vector_sync()["synced"] == 1
    assert np.allclose(vector(), expected)  # the scheduled sync of a degraded write
    item = archive_row(Memory.objects.get(id=answer.id), timezone.now())
    item.embedding = None
    item.save()
    memory_forget(memory_id=str(answer.id), namespace="chat", actor="test")
    archive_restore(memory_id=str(answer.id), namespace="chat", actor="test")
    assert np.allclose(vector(), expected)  # a restore from the archive without its vector


def test_a_turn_is_found_by_what_its_neighbours_say_and_a_later_turn_updates_its_context(hash_embedder) -> None:
    say("Did you finally try the new ramen place downtown?", at=1, speaker="Bob")
    reply = say("Yes! Went there on Friday with my sister", at=2)
    assert reply.id in ft("ramen place")  # the turn before is its context
    assert reply.id not in ft("tonkotsu broth")
    say("The tonkotsu broth was the best I ever had", at=3)  # a later turn arrives
    assert reply.id in ft("tonkotsu broth")  # the earlier turn's context now holds it
    assert ChangeFeedEntry.objects.filter(memory_id=reply.id).count() >= 2  # other processes' indexes are told


def test_the_date_is_indexed_in_words(hash_embedder) -> None:
    said = say("We signed the lease", at=0)  # 8 May 2023, a Monday
    assert said.id in ft("lease signed in May 2023")
    assert said.id in ft("monday")


def test_removing_a_turn_gives_its_neighbours_their_context_again(hash_embedder) -> None:
    say("Shall we meet at the observatory?", at=1, speaker="Bob")
    middle = say("The telescope there is enormous", at=2)
    last = say("Sure, see you at eight", at=3)
    assert last.id in ft("telescope enormous")
    memory_forget(memory_id=middle.id, namespace="chat", actor="test")
    assert last.id not in ft("telescope enormous")
    assert last.id in ft("observatory")  # its window moved back over the first turn


def test_thread_append_writes_a_batch_once_and_a_resent_batch_is_all_noop(hash_embedder) -> None:
    batch = [RememberInput(content=f"message number {i}", namespace="chat", collection="general", thread="s9",
                           speaker="Ann" if i % 2 else "Bob", message_id=f"x{i}",
                           occurred_at=T0 + timedelta(seconds=i)) for i in range(25)]
    results = thread_append(messages=batch, actor="test")
    assert [r["operation"] for r in results] == ["ADD"] * 25
    assert AuditLog.objects.filter(operation="ADD", details__thread="s9").count() == 25
    again = thread_append(messages=batch, actor="test")
    assert [r["operation"] for r in again] == ["NOOP"] * 25 and [r["id"] for r in again] == [r["id"] for r in results]
    turns = list(conversations.thread_turns("chat", "s9"))
    assert [t.content for t in turns] == [f"message number {i}" for i in range(25)]
    assert all(t.vector_synced for t in turns)
    assert str(turns[5].id) in ft("number 6")  # the next turn is its context


def test_thread_append_refuses_one_id_for_two_messages(hash_embedder) -> None:
    batch = [RememberInput(content=text, namespace="chat", collection="general", thread="s1", message_id="same")
             for text in ("first words", "other words")]
    with pytest.raises(Conflict, match="same"):
        thread_append(messages=batch, actor="test")
    assert not Memory.objects.exists()


def test_the_remember_operation_validates_thread_fields(hash_embedder) -> None:
    with pytest.raises(InvalidInput, match="thread"):
        call("remember", {"content": "hello there friend", "message_id": "m1"}, CLI)
    with pytest.raises(InvalidInput, match="occurred_at"):
        call("remember", {"content": "hello there friend", "thread": "t", "occurred_at": "not a time"}, CLI)
    with pytest.raises(InvalidInput, match="thread"):
        call("remember", {"content": "hello there friend", "thread": "a/b"}, CLI)
    out = call("remember", {"content": "hello there friend", "thread": "t", "speaker": "Ann", "message_id": "m1",
                            "occurred_at": "2023-05-08T13:56:00"}, CLI)
    stored = Memory.objects.get(id=out["id"])
    assert (stored.thread, stored.speaker, stored.message_id, stored.occurred_at) == ("t", "Ann", "m1", T0)
    page = call("threads.get", {"thread": "t"}, CLI)
    assert [m["content"] for m in page["messages"]] == ["hello there friend"]
    assert call("threads.list", {}, CLI)["threads"][0] == {
        "thread": "t", "messages": 1, "first_at": "2023-05-08T13:56:00Z", "last_at": "2023-05-08T13:56:00Z",
        "speakers": ["Ann"]}


# --------------------------------------------------------------------------- event validity


def test_events_cancelled_or_past_leave_recall_but_search_marks_them(hash_embedder) -> None:
    now = timezone.now()
    planned = remember("Team offsite in Porto", status="planned", event_at=now + timedelta(days=10)).id
    past = remember("Team dinner at the harbour", status="planned", event_at=now - timedelta(days=1)).id
    cancelled = remember("Team karaoke night", status="planned", event_at=now + timedelta(days=3)).id
    call("event", {"id": cancelled, "status": "cancelled"}, CLI)

    def recalled(**extra: object) -> set[str]:
        found = set()
        for query in ("Team offsite in Porto", "Team dinner at the harbour", "Team karaoke night"):
            found |= {r["id"] for r in call("recall", {"query": query, "min_score": 0.0, **extra}, CLI)["results"]}
        return found

    assert recalled() & {planned, past, cancelled} == {planned}
    assert recalled(include_inactive=True) >= {planned, past, cancelled}
    marks = {r["id"]: r.get("inactive") for r in call("search", {"query": "Team", "mode": "fulltext"}, CLI)["results"]}
    assert marks == {planned: None, past: "expired", cancelled: "cancelled"}
    assert AuditLog.objects.get(operation="EVENT", memory_id=cancelled).details["before"] == {"status": "planned"}
    done = call("event", {"id": past, "status": "done", "clear": ["event_at"]}, CLI)
    assert (done["status"], done["event_at"], done["inactive"]) == ("done", None, None)


def test_thread_append_results_follow_the_order_the_messages_were_given(hash_embedder) -> None:
    batch = [RememberInput(content=f"said at minute {m}", namespace="chat", collection="general", thread="s3",
                           message_id=f"y{m}", occurred_at=T0 + timedelta(minutes=m)) for m in (3, 1, 2)]
    results = thread_append(messages=batch, actor="test")
    stored = {str(m.id): m.content for m in Memory.objects.all()}
    assert [stored[r["id"]] for r in results] == ["said at minute 3", "said at minute 1", "said at minute 2"]
    assert [t.content for t in conversations.thread_turns("chat", "s3")] == [f"said at minute {m}" for m in (1, 2, 3)]
