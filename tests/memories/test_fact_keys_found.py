"""A fact is found by its key: the key ("alice/home city") names the slot the fact fills, so it
counts as a label in full-text search and goes into the text its vector is computed over."""
from __future__ import annotations

import importlib
from types import SimpleNamespace

import numpy as np
import pytest
from django.apps import apps
from django.db import connection

from memories.models import Memory
from memories.services import memories_vector_sync
from search.services import search_run
from tests.conftest import remember

pytestmark = pytest.mark.django_db(transaction=False)

KEY = "alice/home city"


def _found(query: str, mode: str, namespace: str = "global") -> list[str]:
    out = search_run(query=query, namespace=namespace, collection=None, mode=mode, limit=10)
    return [item["id"] for item in out["results"]]


def _vector(memory_id: str) -> np.ndarray:
    return np.frombuffer(Memory.objects.get(pk=memory_id).embedding, dtype=np.float32)


def test_full_text_finds_a_fact_by_the_words_of_its_key(hash_embedder) -> None:
    berlin = remember("Alice moved to Berlin.", key=KEY)
    remember("Alice joined Acme.", key="alice/employer")
    remember("Bob moved to Rome.")
    assert _found("home city", "fulltext") == [berlin.id]
    assert _found("employer", "fulltext") != [] and berlin.id not in _found("employer", "fulltext")


def test_a_fact_found_by_its_key_stays_in_its_namespace(hash_embedder) -> None:
    remember("Alice moved to Berlin.", key=KEY, namespace="alice")
    assert _found("home city", "fulltext", namespace="bob") == []


def test_a_keyed_fact_is_embedded_with_its_key(hash_embedder) -> None:
    keyed = remember("Alice moved to Berlin.", key=KEY)
    plain = remember("Alice moved to Rome.")
    assert np.allclose(_vector(keyed.id), hash_embedder.embed_passage(f"{KEY}: Alice moved to Berlin."))
    assert np.allclose(_vector(plain.id), hash_embedder.embed_passage("Alice moved to Rome."))


def test_a_key_given_later_is_embedded_by_the_next_vector_sync(hash_embedder) -> None:
    first = remember("Alice moved to Berlin.")
    again = remember("Alice moved to Berlin.", key=KEY)
    assert (again.operation, again.id) == ("NOOP", first.id)
    assert not Memory.objects.get(pk=first.id).vector_synced  # its vector still lacks the key
    assert _found("home city", "fulltext") == [first.id]  # the text follows at once
    assert memories_vector_sync()["synced"] == 1
    assert Memory.objects.get(pk=first.id).vector_synced
    assert np.allclose(_vector(first.id), hash_embedder.embed_passage(f"{KEY}: Alice moved to Berlin."))


FACTS = (("billing-service/database", "The billing service moved to Spanner."),
         ("billing-service/owner", "The billing service belongs to the data team."),
         ("billing-service/region", "The billing service runs in eu-west-1."))


def test_the_slot_question_finds_the_keyed_fact_first(e5) -> None:
    keyed = [remember(text, key=key, namespace="keyed").id for key, text in FACTS]
    plain = [remember(text, namespace="plain").id for _key, text in FACTS]
    question = "What database does the billing service use?"
    assert _found(question, "hybrid", namespace="keyed")[0] == keyed[0]
    assert _found(question, "hybrid", namespace="plain")[0] != plain[0]  # the words alone rank the owner first


def _label_words() -> list[str]:
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("SELECT tags FROM memories_fts")
            return [word for (tags,) in cursor.fetchall() for word in tags.split()]
        cursor.execute("SELECT tokens FROM memory_search")
        return [word for (tokens,) in cursor.fetchall() for word in tokens]


def test_the_migration_puts_the_keys_of_stored_facts_into_their_text(hash_embedder) -> None:
    migration = importlib.import_module("search.migrations.0005_fact_keys_in_labels")
    remember("Alice moved to Berlin.", key=KEY)
    editor = SimpleNamespace(connection=connection)  # all the migration uses of its schema editor
    migration.backward(apps, editor)  # the text as it was stored before keys counted
    assert "citi" not in _label_words()
    migration.forward(apps, editor)
    assert "citi" in _label_words()


def _dedup_decisions(namespace: str, key: str | None) -> list[tuple[str, int | None]]:
    """Operations and which earlier write each one matched, for three writes of one fact: a first
    statement, an elaboration that may carry ``key``, and a restatement without it."""
    writes = [remember("The mobile release ships on Monday", namespace=namespace)]
    writes.append(remember("The mobile release ships on Monday at noon", key=key, namespace=namespace))
    writes.append(remember("The mobile release ships on Monday at noon.", namespace=namespace))
    earlier = [w.id for w in writes]
    return [(w.operation, earlier.index(w.merged_with_id) if w.merged_with_id else None) for w in writes]


def test_dedup_decides_for_a_keyed_fact_as_for_the_same_words_without_a_key(e5) -> None:
    plain = _dedup_decisions("plain", None)
    assert plain[1][0] == "UPDATE" and plain[2][0] != "ADD"  # the control: dedup matches every write
    assert _dedup_decisions("keyed", "mobile/release-day") == plain


def test_dedup_leaves_a_fact_of_another_key_alone(e5) -> None:
    monday = remember("The mobile release ships on Monday", key="mobile/release-day")
    other = remember("The mobile release ships on Monday at noon", key="web/release-day")
    assert other.operation == "ADD" and other.superseded == () and other.id != monday.id
