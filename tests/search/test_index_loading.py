"""An index with no snapshot is rebuilt from the database in the background on a large store
(memories/indexes/rebuilds.py): searches meanwhile answer from a degraded path, flagged in
``meta.degraded``; writes made during the rebuild are found after it; ``/health`` shows its progress;
nothing changes when a snapshot exists. The store here is small: the policy's threshold is lowered
and a listener holds the rebuild after its first chunk (the public seams), so every search below
runs while the rebuild is provably under way."""
from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import jsonschema
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from bhgbrain_site import registry
from bhgbrain_site.core.calls import CallContext
from memories.analyzer import analyze_query
from memories.indexes import rebuilds, snapshots
from memories.indexes.embedded import get_vector_index, reset_vector_index
from memories.indexes.sparse import CONTEXT_WEIGHT, K1, TAG_WEIGHT, B
from retention.selectors import store_health
from search import fulltext_db
from search.bm25 import text_index
from search.bm25.text_index import reset_text_index
from tests.conftest import remember

pytestmark = pytest.mark.django_db(transaction=True)  # the rebuild's thread must see committed rows

CTX = CallContext(actor="test")
CHUNK = 2
TEXTS = [
    "The lighthouse keeper painted the front door blue",
    "Our staging database runs PostgreSQL 15 on port 5433",
    "Maria prefers tea over coffee in the afternoon",
    "The quarterly report is due on the first Monday of April",
    "Backups of the wiki are kept for thirty days",
    "The cat sleeps on the warm windowsill every morning",
]


@dataclass
class Gate:
    """Holds every rebuild after its first chunk until released."""

    reached: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    seen: list[tuple[str, str, int]] = field(default_factory=list)

    def __call__(self, progress: rebuilds.Progress) -> None:
        self.seen.append((progress.index, progress.state, progress.rows_loaded))
        self.reached.set()
        assert self.release.wait(30), "the test never released the rebuild"

    def open(self) -> None:
        self.release.set()
        assert rebuilds.wait(30)


@pytest.fixture
def stored(hash_embedder) -> dict[str, str]:  # noqa: ANN001
    """The memories, written before any index of this process is loaded."""
    ids = {text: str(remember(text, namespace="loading").id) for text in TEXTS}
    reset_vector_index()
    reset_text_index()
    return ids


@pytest.fixture
def gate(bhg_config) -> Iterator[Gate]:  # noqa: ANN001
    """Every load from the database runs in the background, held after its first chunk."""
    bhg_config.index_snapshots = False
    held = Gate()
    with rebuilds.configured(background_min_rows=1, chunk_rows=CHUNK), rebuilds.watching(held):
        try:
            yield held
        finally:
            held.release.set()
            rebuilds.wait(30)


def _search(query: str, mode: str, tool: str = "search") -> dict:
    arguments = {"query": query, "namespace": "loading", "mode": mode} if tool == "search" else \
        {"query": query, "namespace": "loading", "min_score": 0.0}
    result = registry.call_tool(tool, arguments, CTX)
    schema = registry.get_operation(tool).output_schema()  # MCP's outputSchema; REST documents the same model
    jsonschema.validate(result, schema, cls=jsonschema.Draft202012Validator)
    return result


def _text() -> text_index.TextIndex:
    """This process's text index (the one the searches use)."""
    return text_index.get_text_index(K1, B, TAG_WEIGHT if connection.vendor == "sqlite" else 1, CONTEXT_WEIGHT)


def _ids(result: dict) -> list[str]:
    return [hit["id"] for hit in result["results"]]


def test_the_search_that_starts_a_rebuild_counts_no_memories(stored, gate) -> None:  # noqa: ANN001
    """It sizes the rebuild from the quota counters (a count of a million memories took 1.06 s of
    that search on a cold PostgreSQL), and the size is still the live memories."""
    with CaptureQueriesContext(connection) as queries:
        during = _search("lighthouse door", "fulltext")
    counts = [q["sql"] for q in queries.captured_queries
              if "COUNT(" in q["sql"].upper() and f'FROM {connection.ops.quote_name("memories")}' in q["sql"]]
    assert counts == []
    (degraded,) = during["meta"]["degraded"]
    assert degraded["rows_total"] == len(TEXTS)


def test_the_rebuild_reads_nothing_while_the_search_that_started_it_is_answered(stored, gate, monkeypatch) -> None:  # noqa: ANN001
    """The first read (on PostgreSQL the whole table at once) waits for the degraded answer of the
    search that started the rebuild: both read the same tables."""
    seen: list[tuple[int, bool]] = []
    original = fulltext_db.search

    def answered_slowly(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        time.sleep(0.3)  # the rebuild's thread has long started
        rebuild = _text().rebuilding
        seen.append((rebuild.rows_loaded if rebuild is not None else -1, gate.reached.is_set()))
        return original(*args, **kwargs)

    monkeypatch.setattr(fulltext_db, "search", answered_slowly)
    during = _search("lighthouse door", "fulltext")
    assert seen == [(0, False)]
    assert _ids(during)[0] == stored[TEXTS[0]]
    assert gate.reached.wait(10)  # then it reads
    gate.open()


def test_a_fulltext_search_during_the_rebuild_answers_from_the_database(stored, gate) -> None:  # noqa: ANN001
    during = _search("lighthouse door", "fulltext")
    assert gate.reached.wait(10)
    rebuild = _text().rebuilding
    assert rebuild is not None and rebuild.state == "loading" and rebuild.rows_loaded == CHUNK  # still held
    assert _ids(during)[0] == stored[TEXTS[0]]
    (degraded,) = during["meta"]["degraded"]
    assert degraded["index"] == "text" and degraded["path"] == "database full-text"
    assert degraded["rows_total"] == len(TEXTS) and degraded["rows_loaded"] <= CHUNK
    assert _ids(_search("tea coffee", "fulltext"))[0] == stored[TEXTS[2]]  # every row is searched, not the chunk read

    gate.open()
    after = _search("lighthouse door", "fulltext")
    assert "meta" not in after and _ids(after)[0] == stored[TEXTS[0]]
    assert _text().loaded_from == "database"


def test_a_hybrid_search_during_both_rebuilds_is_flagged_for_each_index(stored, gate) -> None:  # noqa: ANN001
    first = _search("lighthouse door", "hybrid")
    assert gate.reached.wait(10)
    assert _ids(first)[0] == stored[TEXTS[0]]
    assert {d["index"] for d in first["meta"]["degraded"]} == {"text", "vector"}  # one loads, the other queues
    gate.open()
    assert "meta" not in _search("lighthouse door", "hybrid")


def test_semantic_search_during_the_rebuild_scans_the_vectors_read_so_far(stored, gate) -> None:  # noqa: ANN001
    during = _search(TEXTS[3], "semantic")
    assert gate.reached.wait(10)
    (degraded,) = during["meta"]["degraded"]
    assert degraded["index"] == "vector" and degraded["path"] == "exact scan of the vectors loaded so far"
    index = get_vector_index()
    assert index is not None and index.rebuilding is not None  # type: ignore[attr-defined]
    read_so_far = {index.row_ids.get(row) for row in range(len(index.row_ids))} - {None}  # type: ignore[attr-defined]
    assert len(read_so_far) == CHUNK and set(_ids(during)) <= read_so_far  # what it has, honestly flagged

    recalled = _search(TEXTS[3], "semantic", tool="recall")
    assert recalled["meta"]["degraded"][0]["index"] == "vector"

    gate.open()
    after = _search(TEXTS[3], "semantic")
    assert "meta" not in after and _ids(after)[0] == stored[TEXTS[3]]


def test_a_write_during_the_rebuild_is_found_after_it(stored, gate) -> None:  # noqa: ANN001
    _search("lighthouse", "fulltext")
    assert gate.reached.wait(10)
    written = str(remember("The zeppelin hangar opens at dawn", namespace="loading").id)
    during = _search("zeppelin hangar", "fulltext")
    assert _ids(during) == [written] and during["meta"]["degraded"]  # the database has it already
    forgotten = stored[TEXTS[4]]
    registry.call_tool("forget", {"id": forgotten, "namespace": "loading"}, CTX)

    gate.open()
    after = _search("zeppelin hangar", "fulltext")
    assert "meta" not in after and _ids(after) == [written]  # the in-process index, caught up on the feed
    assert _text().row_ids.row(written) is not None
    assert forgotten not in _ids(_search("backups wiki", "fulltext"))
    vectors = get_vector_index()
    assert vectors.row_ids.row(written) is not None and vectors.row_ids.row(forgotten) is None  # type: ignore[union-attr]
    assert _ids(_search("The zeppelin hangar opens at dawn", "semantic"))[0] == written


def test_health_shows_the_rebuilds_progress(stored, gate, client) -> None:  # noqa: ANN001
    _search("lighthouse", "fulltext")
    assert gate.reached.wait(10)
    probe = client.get("/health")
    assert probe.status_code == 200
    (during,) = [r for r in probe.json()["index_rebuilds"] if r["index"] == "text"]
    assert during["index"] == "text" and during["state"] == "loading"
    assert during["rows_loaded"] == CHUNK and during["rows_total"] == len(TEXTS) and during["elapsed_s"] >= 0

    gate.open()
    (done,) = [r for r in store_health()["index_rebuilds"] if r["index"] == "text"]
    assert done["state"] == "done" and done["rows_loaded"] == len(TEXTS)


def test_a_small_store_still_loads_on_the_search(stored, bhg_config) -> None:  # noqa: ANN001
    bhg_config.index_snapshots = False
    seen: list[rebuilds.Progress] = []
    with rebuilds.configured(background_min_rows=len(TEXTS) + 1), rebuilds.watching(seen.append):
        result = _search("lighthouse door", "hybrid")
    assert "meta" not in result and _ids(result)[0] == stored[TEXTS[0]] and not seen


def test_nothing_changes_when_a_snapshot_exists(stored, bhg_config, settings, tmp_path: Path) -> None:  # noqa: ANN001
    bhg_config.index_snapshots = True
    settings.BHGBRAIN_DATA_DIR = tmp_path
    _search("lighthouse door", "hybrid")  # loads both (small store: on the search) and starts their snapshots
    assert snapshots.finish_writes(60)
    for index in (get_vector_index(), _text()):
        index.save_snapshot()  # type: ignore[union-attr]
    reset_vector_index()
    reset_text_index()

    seen: list[rebuilds.Progress] = []
    with rebuilds.configured(background_min_rows=1, chunk_rows=CHUNK), rebuilds.watching(seen.append):
        result = _search("lighthouse door", "hybrid")
    assert "meta" not in result and _ids(result)[0] == stored[TEXTS[0]] and not seen
    assert get_vector_index().loaded_from == "snapshot"  # type: ignore[union-attr]
    assert _text().loaded_from == "snapshot"


def test_the_database_path_finds_a_namespace_whose_matches_rank_below_others(stored, gate, monkeypatch) -> None:  # noqa: ANN001
    for n in range(12):  # more than a search's 10 results, each ranked above the namespace's own
        remember(f"Lighthouse lighthouse lighthouse, the other keeper's log {n}", namespace="elsewhere")
    monkeypatch.setattr(fulltext_db, "RANKED_FIRST", 1)  # the first ranking keeps the best 10: all another namespace's
    during = _search("lighthouse", "fulltext")
    assert during["meta"]["degraded"] and _ids(during) == [stored[TEXTS[0]]]
    odd = _search('"lighthouse" OR door* NEAR(keeper) -- JIRA-1234 %_', "fulltext")  # a user's syntax stays words
    assert odd["meta"]["degraded"] and _ids(odd)[0] == stored[TEXTS[0]]


def test_the_database_path_widens_its_window_until_the_namespace_has_results(stored, gate, monkeypatch) -> None:  # noqa: ANN001
    for n in range(12):  # newer matches, all another namespace's
        remember(f"The lighthouse on the other coast, log {n}", namespace="elsewhere")
    monkeypatch.setattr(fulltext_db, "WINDOW", 2)  # SQLite: the newest 2 matches first, then 16, then every one
    during = _search("lighthouse", "fulltext")
    assert during["meta"]["degraded"] and _ids(during) == [stored[TEXTS[0]]]


def test_the_database_path_ranks_the_rows_holding_every_common_word_first(stored, gate, monkeypatch) -> None:  # noqa: ANN001
    for n in range(20):
        remember(f"A lighthouse postcard, number {n}, was sent home", namespace="loading")
        remember(f"The keeper of record {n} signed the visitors' book", namespace="loading")
    monkeypatch.setattr(fulltext_db, "WINDOW", 2)  # SQLite: both words count as common (more matches than 2)
    during = _search("lighthouse keeper", "fulltext")
    assert during["meta"]["degraded"] and len(_ids(during)) == 10
    assert _ids(during)[0] == stored[TEXTS[0]]  # the one row with both words, then the rest
    best = fulltext_db.search(analyze_query("lighthouse keeper"), namespace="loading", collection=None, now=datetime.now(UTC), limit=1)
    assert [memory_id for memory_id, _score in best] == [stored[TEXTS[0]]]  # not the first of an arbitrary window


def test_the_database_path_learns_how_common_a_term_is_without_reading_its_rows(stored, gate) -> None:  # noqa: ANN001
    """Counting a common term's rows read a third of the table at a million rows on PostgreSQL:
    there the statistics of the token arrays (ANALYZE) say how common it is, and only a term they do
    not list is counted; SQLite counts through its FTS5 index, which answers from its doclists."""
    for n in range(30):
        remember(f"The keeper of record {n} signed the visitors' book", namespace="loading")
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE memory_search")
    counts: list[tuple[str, object]] = []  # (how the database was asked, the term)

    def watch(execute, sql, params, many, context):  # noqa: ANN001, ANN202 - Django's execute_wrapper hook
        if sql.startswith("SELECT count(*) FROM (SELECT 1 FROM memory_search"):
            counts.append(("rows", params[0]))
        elif sql.startswith("SELECT count(*) FROM memories_fts WHERE memories_fts MATCH"):
            counts.append(("fts5", str(params[0]).strip('"')))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(watch):
        during = _search("lighthouse keeper", "fulltext")
    assert during["meta"]["degraded"] and _ids(during)[0] == stored[TEXTS[0]]  # the row with both words first
    if connection.vendor == "postgresql":
        assert ("rows", "keeper") not in counts  # listed among the common elements: estimated, not counted
    else:
        assert sorted(counts) == [("fts5", "keeper"), ("fts5", "lighthous")]  # each term once, by the index


def test_the_database_path_leaves_out_a_common_word_past_the_postings_budget(stored, gate, monkeypatch) -> None:  # noqa: ANN001
    for n in range(8):  # "keeper" in many rows, "lighthouse" in one
        remember(f"The keeper of record {n} signed the visitors' book", namespace="loading")
    monkeypatch.setattr(fulltext_db, "POSTINGS_BUDGET", 3)
    during = _search("lighthouse keeper", "fulltext")
    assert during["meta"]["degraded"] and _ids(during) == [stored[TEXTS[0]]]  # matched by its rarest term only
    common = _search("keeper", "fulltext")  # a query of common words keeps its rarest one
    assert common["meta"]["degraded"] and len(_ids(common)) == 9


def test_the_database_path_finds_terms_through_an_index(db) -> None:  # noqa: ANN001
    """Each database's full-text fallback is indexed: PostgreSQL's token arrays by GIN (search 0004),
    SQLite's by its FTS5 table (its own inverted index)."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'memory_search'")
            defs = dict(cursor.fetchall())
            assert "USING gin (tokens)" in defs["memory_search_tokens_gin"]
            assert "USING gin (context_tokens)" in defs["memory_search_context_tokens_gin"]
        else:
            cursor.execute("SELECT sql FROM sqlite_master WHERE name = 'memories_fts'")
            assert "USING fts5" in cursor.fetchone()[0]


def test_an_index_thrown_away_stops_its_rebuild(stored, gate) -> None:  # noqa: ANN001
    _search("lighthouse", "fulltext")
    assert gate.reached.wait(10)
    old = _text()
    progress = old.rebuilding
    assert progress is not None
    reset_text_index()  # e.g. a reset: the old index reads no further
    gate.open()
    assert progress.state == "stopped" and progress.rows_loaded == CHUNK and not old.loaded
    assert "meta" in _search("lighthouse", "fulltext")  # the new index rebuilds afresh (held again)


def test_a_search_does_not_wait_for_the_chunk_being_read(stored, gate) -> None:  # noqa: ANN001
    _search("lighthouse", "fulltext")
    assert gate.reached.wait(10)
    holding, done, answers = threading.Event(), threading.Event(), []

    def hold() -> None:  # the index's lock held, as the rebuild holds it while it reads a chunk
        with _text().held():
            holding.set()
            done.wait(30)

    def search() -> None:
        try:
            answers.append(_search("lighthouse door", "fulltext"))
        finally:
            connection.close()

    holder, searcher = threading.Thread(target=hold), threading.Thread(target=search)
    holder.start()
    try:
        assert holding.wait(10)
        searcher.start()
        searcher.join(10)
        assert answers, "the search waited for the index's lock"
        assert answers[0]["meta"]["degraded"] and _ids(answers[0])[0] == stored[TEXTS[0]]
    finally:
        done.set()
        holder.join()
        searcher.join()


@pytest.mark.parametrize("mode", ["fulltext", "semantic", "hybrid"])
def test_the_degraded_paths_answer_current_facts_and_as_of_the_versions_valid_then(hash_embedder, bhg_config,
                                                                                    gate, mode: str) -> None:  # noqa: ANN001
    old = remember("The API gateway of the shop is Kong", namespace="loading", key="shop/gateway",
                   valid_from=datetime(2026, 1, 1, tzinfo=UTC))
    new = remember("The API gateway of the shop is Envoy", namespace="loading", key="shop/gateway",
                   valid_from=datetime(2026, 6, 1, tzinfo=UTC))
    reset_vector_index()
    reset_text_index()
    current = registry.call_tool("search", {"query": "API gateway of the shop", "namespace": "loading", "mode": mode}, CTX)
    assert gate.reached.wait(10) and current["meta"]["degraded"]  # answered while the rebuild is held
    # a semantic search scans only the vectors read so far (none, while the text index is rebuilt first)
    partial = mode == "semantic"
    assert str(old.id) not in _ids(current) and _ids(current)[:1] in ([[], [str(new.id)]] if partial else [[str(new.id)]])
    then = registry.call_tool("search", {"query": "API gateway of the shop", "namespace": "loading", "mode": mode,
                                         "as_of": "2026-03-01"}, CTX)
    assert then["meta"]["degraded"] and str(new.id) not in _ids(then)
    assert _ids(then)[:1] in ([[], [str(old.id)]] if partial else [[str(old.id)]])
    gate.open()
    after = registry.call_tool("search", {"query": "API gateway of the shop", "namespace": "loading", "mode": mode}, CTX)
    assert "degraded" not in after.get("meta", {}) and _ids(after) == [str(new.id)]


@pytest.fixture
def watched(bhg_config) -> Iterator[threading.Event]:  # noqa: ANN001
    """Every load from the database runs in the background; the event is set after its first chunk."""
    bhg_config.index_snapshots = False
    first_chunk = threading.Event()
    with rebuilds.configured(background_min_rows=1, chunk_rows=CHUNK), \
            rebuilds.watching(lambda progress: first_chunk.set()):
        try:
            yield first_chunk
        finally:
            rebuilds.wait(30)


def test_a_rebuild_gives_way_while_a_search_is_answered_around_it(stored, watched) -> None:  # noqa: ANN001
    with rebuilds.answering_around():  # e.g. a slow degraded search, still under way
        during = _search("lighthouse door", "fulltext")
        assert watched.wait(10)
        progress = _text().rebuilding
        assert progress is not None
        assert not rebuilds.wait(0.5), "the rebuild went on while a search was answered around it"
        assert progress.state == "loading" and progress.rows_loaded == CHUNK
    assert rebuilds.wait(30)  # the search ended: the rebuild goes on at once
    assert progress.state == "done" and progress.rows_loaded == len(TEXTS) and progress.paused_s >= 0.4
    assert _ids(during)[0] == stored[TEXTS[0]] and "meta" not in _search("lighthouse door", "fulltext")


def test_searches_without_end_delay_a_rebuild_only_within_its_budget(stored, watched) -> None:  # noqa: ANN001
    with rebuilds.configured(give_way_s=0.2, give_way_share=0), rebuilds.answering_around():
        _search("lighthouse door", "fulltext")
        assert watched.wait(10)
        progress = _text().rebuilding
        assert progress is not None
        assert rebuilds.wait(10), "the rebuild waited past its budget of pauses"
        assert progress.state == "done" and 0.2 <= progress.paused_s < 1.0
        (shown,) = [entry for entry in store_health()["index_rebuilds"] if entry["index"] == progress.index]
        assert shown["paused_s"] == round(progress.paused_s, 3)  # /health shows the pauses
    assert "meta" not in _search("lighthouse door", "fulltext")
