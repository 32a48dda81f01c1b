"""Persisted snapshots of the in-process indexes (memories/indexes/snapshots.py): a new index opens the
snapshot instead of reading every row, replays the feed after it, and rejects a corrupt or stale
one (rebuilding from the database with the same results)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import uuid
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from memories import funnel
from memories.analyzer import analyze_query
from memories.curation.edits import memory_edit
from memories.embeddings import from_bytes
from memories.indexes import embedded, hnsw, sketch, snapshot_digests, snapshots
from memories.indexes.embedded import EmbeddedVectorIndex
from memories.indexes.feed import feed_prune
from memories.indexes.sparse import CONTEXT_WEIGHT, K1, TAG_WEIGHT, B
from memories.models import ChangeFeedEntry, Memory
from memories.services import memory_forget
from search.bm25 import postings, text_index
from search.bm25.text_index import TextIndex
from tests.conftest import remember

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def snapshot_dir(bhg_config, settings, tmp_path: Path) -> Path:  # noqa: ANN001
    """Snapshots on, written under this test's own data dir."""
    bhg_config.index_snapshots = True
    settings.BHGBRAIN_DATA_DIR = tmp_path
    return tmp_path / "index-snapshots"


def _vector_index(embedder) -> EmbeddedVectorIndex:  # noqa: ANN001
    """An index as a new process would hold it."""
    return EmbeddedVectorIndex(embedder.model_id, embedder.dimensions)


def _text_index() -> TextIndex:
    tag_weight = TAG_WEIGHT if connection.vendor == "sqlite" else 1
    return TextIndex(K1, B, tag_weight, CONTEXT_WEIGHT)


def _settled(index: EmbeddedVectorIndex | TextIndex) -> None:
    """Wait for a background snapshot write the last search may have started."""
    thread = index.snapshot_keeper.thread
    if thread is not None:
        thread.join(timeout=60)
        assert not thread.is_alive()
    # And the process's own indexes' (remember searched them: a graph they built is saved at once).
    assert snapshots.finish_writes(60)


def _saved(index: EmbeddedVectorIndex | TextIndex) -> None:
    _settled(index)
    assert index.save_snapshot()


def _semantic(index: EmbeddedVectorIndex, embedder, text: str, *, namespace: str = "global", days: int = 0) -> list[str]:  # noqa: ANN001
    now = timezone.now() + timedelta(days=days)
    hits = index.search(embedder.embed_query(text), namespace=namespace, collection=None, limit=10, now=now)
    return [hit.memory_id for hit in hits]


def _fulltext(index: TextIndex, text: str, *, namespace: str = "global", days: int = 0) -> list[str]:
    now = timezone.now() + timedelta(days=days)
    return [str(memory_id) for memory_id, _ in
            index.search(analyze_query(text), namespace=namespace, collection=None, now=now, limit=10)]


def _full_loads(queries: list[dict[str, str]]) -> list[str]:
    """Statements that read every memory (the load a snapshot saves), not the tail's rows by id."""
    tables = ('FROM "memories"', "FROM memories_fts", "FROM memory_search")
    return [q["sql"] for q in queries if any(t in q["sql"] for t in tables) and " IN (" not in q["sql"]]


def _store(embedder) -> dict[str, str]:  # noqa: ANN001
    """Alice's and bob's memories: kept ones, one that expires, one in another namespace; and no
    snapshot yet (the process's own indexes, searched by remember's dedup, may have written one)."""
    ids = {
        "kept": str(remember("The lighthouse keeper paints the railing blue", namespace="alice").id),
        "other": str(remember("Volcanic soil grows sweet grapes", namespace="alice").id),
        "expiring": str(remember("The lighthouse ferry leaves at dawn", namespace="alice", retention_tier="T3").id),
        "bob": str(remember("The lighthouse keeper of bob's island", namespace="bob").id),
    }
    for index in (embedded.get_vector_index(), text_index.get_text_index(K1, B, TAG_WEIGHT, CONTEXT_WEIGHT)):
        _settled(index)
    shutil.rmtree(snapshots.directory(), ignore_errors=True)
    return ids


def _saved_pair(embedder, *, explicitly: bool = True) -> dict[str, str]:  # noqa: ANN001
    """The store, loaded by both indexes from the database, and their snapshots (``explicitly``
    saved, or only what the background writer wrote after the load)."""
    ids = _store(embedder)
    vectors, text = _vector_index(embedder), _text_index()
    _semantic(vectors, embedder, "x", namespace="alice")
    _fulltext(text, "x", namespace="alice")
    for index in (vectors, text):
        assert index.loaded_from == "database"
        if explicitly:
            _saved(index)
        else:
            _settled(index)
    return ids


def test_vector_index_opens_its_snapshot_instead_of_loading(hash_embedder, snapshot_dir) -> None:  # noqa: ANN001
    ids = _store(hash_embedder)
    first = _vector_index(hash_embedder)
    expected = _semantic(first, hash_embedder, "The lighthouse keeper paints the railing blue", namespace="alice")
    assert expected[0] == ids["kept"] and first.loaded_from == "database"
    _saved(first)
    second = _vector_index(hash_embedder)
    with CaptureQueriesContext(connection) as queries:
        got = _semantic(second, hash_embedder, "The lighthouse keeper paints the railing blue", namespace="alice")
    assert got == expected
    assert second.loaded_from == "snapshot"
    assert _full_loads(queries.captured_queries) == []


def test_graphs_know_the_rows_a_snapshot_brought(hash_embedder, snapshot_dir, monkeypatch) -> None:  # noqa: ANN001
    """The HNSW partitions (memories/indexes/hnsw.py) learn of rows put by the feed; a snapshot's rows
    arrive without it, so opening one assigns them: the graph path then finds them too."""
    monkeypatch.setattr(hnsw, "ANN_MIN_ROWS", 2)
    monkeypatch.setattr(hnsw, "GRAPH_MIN_ROWS", 2)
    _store(hash_embedder)
    text = "The lighthouse keeper paints the railing blue"
    first = _vector_index(hash_embedder)
    expected = _semantic(first, hash_embedder, text, namespace="alice", days=-1)
    _saved(first)
    second = _vector_index(hash_embedder)
    _semantic(second, hash_embedder, text, namespace="alice")  # opens the snapshot, starts the graph's build
    assert second.loaded_from == "snapshot" and second.ann is not None
    second.ann.wait()
    assert second.ann.graphs() == 1
    assert _semantic(second, hash_embedder, text, namespace="alice", days=-1) == expected


def test_a_snapshot_carries_its_graphs_so_a_new_process_builds_none(hash_embedder, snapshot_dir, monkeypatch,  # noqa: ANN001
                                                                   bhg_config) -> None:
    """The graphs are saved beside the vectors and mapped by the next process: it walks them on
    its first search, without a build, and returns what the first one did (the row the feed
    brings after the snapshot is among its dirty rows, re-scored exactly)."""
    # Without dedup no write loads this process's own index, whose background writer could put a
    # newer snapshot on disk with a graph a busy machine had not finished building.
    bhg_config.deduplication.enabled = False
    monkeypatch.setattr(hnsw, "ANN_MIN_ROWS", 2)
    monkeypatch.setattr(hnsw, "GRAPH_MIN_ROWS", 2)
    _store(hash_embedder)
    text = "The lighthouse keeper paints the railing blue"
    first = _vector_index(hash_embedder)
    _semantic(first, hash_embedder, text, namespace="alice")  # starts the build
    assert first.ann is not None
    first.ann.wait()
    assert first.ann.graphs() == 1
    _saved(first)
    assert list(snapshot_dir.glob("vector-*/graph_*.usearch"))
    later = remember("The lighthouse keeper retires in spring", namespace="alice")
    expected = _semantic(first, hash_embedder, text, namespace="alice", days=-1)
    assert str(later.id) in expected
    builds: list[int] = []
    monkeypatch.setattr(hnsw.AnnIndex, "_start_build", lambda self, pid: builds.append(pid))
    second = _vector_index(hash_embedder)
    assert _semantic(second, hash_embedder, text, namespace="alice", days=-1) == expected
    assert second.loaded_from == "snapshot" and second.ann is not None
    assert second.ann.graphs() == 1 and builds == []
    # The row the feed brought is dirty (re-scored beside the graph).
    assert second.ann is not None
    assert second.row_ids.row(str(later.id)) in second.ann.dirty_rows()


def test_a_snapshot_whose_graph_file_is_corrupt_is_rebuilt(hash_embedder, snapshot_dir, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(hnsw, "ANN_MIN_ROWS", 2)
    monkeypatch.setattr(hnsw, "GRAPH_MIN_ROWS", 2)
    _store(hash_embedder)
    first = _vector_index(hash_embedder)
    expected = _semantic(first, hash_embedder, "lighthouse", namespace="alice")
    first.ann.wait()  # type: ignore[union-attr]
    _saved(first)
    graphs = list(snapshot_dir.glob("vector-*/graph_*.usearch"))  # this process's own index may have saved one too
    assert graphs
    for graph in graphs:
        data = bytearray(graph.read_bytes())
        data[len(data) // 2] ^= 0xFF
        graph.unlink()  # another file, not the linked one
        graph.write_bytes(bytes(data))
    second = _vector_index(hash_embedder)
    assert _semantic(second, hash_embedder, "lighthouse", namespace="alice") == expected
    assert second.loaded_from == "database"


def test_text_index_opens_its_snapshot_instead_of_loading(hash_embedder, snapshot_dir) -> None:  # noqa: ANN001
    ids = _store(hash_embedder)
    first = _text_index()
    expected = _fulltext(first, "lighthouse keeper", namespace="alice")
    assert expected[0] == ids["kept"] and set(expected) == {ids["kept"], ids["expiring"]}
    _saved(first)
    second = _text_index()
    with CaptureQueriesContext(connection) as queries:
        got = _fulltext(second, "lighthouse keeper", namespace="alice")
    assert got == expected and second.loaded_from == "snapshot"
    assert _full_loads(queries.captured_queries) == []


def test_namespaces_and_expiry_still_filter_after_a_snapshot_load(hash_embedder, snapshot_dir) -> None:  # noqa: ANN001
    ids = _saved_pair(hash_embedder)
    vectors, text = _vector_index(hash_embedder), _text_index()
    assert set(_semantic(vectors, hash_embedder, "The lighthouse keeper of bob's island", namespace="bob")) == {ids["bob"]}
    assert set(_fulltext(text, "lighthouse", namespace="bob")) == {ids["bob"]}
    assert set(_semantic(vectors, hash_embedder, "x", namespace="alice")) == {ids["kept"], ids["other"], ids["expiring"]}
    later = set(_semantic(vectors, hash_embedder, "x", namespace="alice", days=60))
    assert later == {ids["kept"], ids["other"]}  # the T3 memory has expired by then
    assert set(_fulltext(text, "lighthouse", namespace="alice", days=60)) == {ids["kept"]}
    assert _semantic(vectors, hash_embedder, "x", namespace="carol") == [] and _fulltext(text, "lighthouse", namespace="carol") == []
    assert vectors.loaded_from == text.loaded_from == "snapshot"


def test_the_feed_after_the_snapshot_is_replayed(hash_embedder, snapshot_dir) -> None:  # noqa: ANN001
    ids = _saved_pair(hash_embedder)
    added = str(remember("A lighthouse lens from Paris", namespace="alice").id)  # after the snapshot
    memory_forget(memory_id=ids["kept"], namespace="alice", actor="test")
    now = timezone.now()
    funnel.update_memories([uuid.UUID(ids["other"])], {"expires_at": now + timedelta(days=1), "decay_eligible": True},
                           audit=None, at=now)
    vectors, text = _vector_index(hash_embedder), _text_index()
    assert set(_semantic(vectors, hash_embedder, "x", namespace="alice")) == {added, ids["other"], ids["expiring"]}
    assert set(_fulltext(text, "lighthouse", namespace="alice")) == {added, ids["expiring"]}
    assert set(_semantic(vectors, hash_embedder, "x", namespace="alice", days=2)) == {added, ids["expiring"]}
    assert set(_fulltext(text, "volcanic", namespace="alice")) == {ids["other"]}
    assert _fulltext(text, "volcanic", namespace="alice", days=2) == []  # its new expiry came with the tail
    assert vectors.loaded_from == text.loaded_from == "snapshot"


def test_a_vector_changed_after_the_snapshot_is_scored_with_its_new_value(hash_embedder, snapshot_dir,  # noqa: ANN001
                                                                          monkeypatch) -> None:  # noqa: ANN001
    """Re-scored rows are read from the snapshot's file (memories/indexes/file_rows.py), except those the
    feed tail wrote into this process's copy-on-write mapping: those only the mapping holds."""
    ids = _saved_pair(hash_embedder)
    text = "A lighthouse keeper paints the railing green"
    memory_edit(memory_id=ids["other"], changes={"content": text}, actor="test", namespace="alice")
    monkeypatch.setattr(hnsw, "ANN_MIN_ROWS", 1)  # every search takes the re-scoring path (no graph: small partitions)
    vectors = _vector_index(hash_embedder)
    query = hash_embedder.embed_query(text)
    hits = {hit.memory_id: hit.cosine for hit in
            vectors.search(query, namespace="alice", collection=None, limit=10, now=timezone.now())}
    assert vectors.loaded_from == "snapshot"
    assert "matrix" in vectors.rows.mapped  # the rows were read from the file
    stored = from_bytes(Memory.objects.get(id=ids["other"]).embedding)
    assert hits[ids["other"]] == pytest.approx(float(stored @ query), abs=1e-5)
    assert hits[ids["kept"]] == pytest.approx(float(from_bytes(Memory.objects.get(id=ids["kept"]).embedding) @ query),
                                              abs=1e-5)



def _snapshot_file(root: Path, kind: str, file_name: str) -> Path:
    manifest = json.loads(next(root.glob(f"{kind}-*.json")).read_text())
    return root / manifest["directory"] / file_name


def _rebuilt_correctly(embedder, ids: dict[str, str]) -> tuple[str | None, str | None]:  # noqa: ANN001
    """Where fresh indexes came from, after checking they answer as the store says."""
    vectors, text = _vector_index(embedder), _text_index()
    assert set(_semantic(vectors, embedder, "x", namespace="alice")) == {ids["kept"], ids["other"], ids["expiring"]}
    assert set(_fulltext(text, "lighthouse", namespace="alice")) == {ids["kept"], ids["expiring"]}
    _settled(vectors)  # the rebuilt ones write their snapshots: let them finish before the test goes on
    _settled(text)
    return vectors.loaded_from, text.loaded_from


def _flip(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_corrupt_snapshot_is_rejected_and_rebuilt(hash_embedder, snapshot_dir, caplog) -> None:  # noqa: ANN001
    ids = _saved_pair(hash_embedder)
    _flip(_snapshot_file(snapshot_dir, "vector", "matrix.npy"), -5)  # a flipped byte inside the data
    rows = _snapshot_file(snapshot_dir, "text", "post_rows.npy")
    rows.write_bytes(rows.read_bytes()[:-4])  # truncated
    assert _rebuilt_correctly(hash_embedder, ids) == ("database", "database")
    assert "fails its checksum" in caplog.text and "wrong size" in caplog.text


def test_a_snapshot_whose_manifest_lies_is_rejected(hash_embedder, snapshot_dir, caplog) -> None:  # noqa: ANN001
    ids = _saved_pair(hash_embedder)
    manifest_path = next(snapshot_dir.glob("vector-*.json"))
    manifest = json.loads(manifest_path.read_text())
    manifest["files"]["matrix.npy"]["shape"][0] += 1
    manifest_path.write_text(json.dumps(manifest))
    text_manifest_path = next(snapshot_dir.glob("text-*.json"))
    text_manifest = json.loads(text_manifest_path.read_text())
    del text_manifest["meta"]["codes"]
    text_manifest_path.write_text(json.dumps(text_manifest))
    assert _rebuilt_correctly(hash_embedder, ids) == ("database", "database")
    assert "matrix.npy has shape" in caplog.text and "the manifest lacks codes" in caplog.text


def test_a_snapshot_of_another_model_or_version_is_rejected(hash_embedder, snapshot_dir, monkeypatch, caplog) -> None:  # noqa: ANN001
    ids = _saved_pair(hash_embedder)
    manifest_path = next(snapshot_dir.glob("vector-*.json"))
    manifest = json.loads(manifest_path.read_text())
    manifest["meta"]["model_id"] = "another/model"
    manifest_path.write_text(json.dumps(manifest))
    monkeypatch.setattr(text_index, "ANALYZER_VERSION", text_index.ANALYZER_VERSION + 1)
    assert _rebuilt_correctly(hash_embedder, ids) == ("database", "database")
    assert "model_id is 'another/model'" in caplog.text and "analyzer is" in caplog.text
    caplog.clear()  # the rebuilt indexes wrote snapshots of their own: a new format rejects those
    monkeypatch.setattr(snapshots, "FORMAT_VERSION", snapshots.FORMAT_VERSION + 1)
    assert _rebuilt_correctly(hash_embedder, ids) == ("database", "database")
    assert "this version reads" in caplog.text


def test_a_snapshot_older_than_the_pruned_feed_is_rejected(hash_embedder, snapshot_dir, caplog) -> None:  # noqa: ANN001
    ids = _saved_pair(hash_embedder)
    memory_forget(memory_id=ids.pop("expiring"), namespace="alice", actor="test")  # only the pruned feed knows
    feed_prune(now=timezone.now() + timedelta(days=30))  # the rows after the snapshot are gone
    ids["kept2"] = str(remember("Fog horn tests at noon", namespace="alice").id)  # the feed goes on
    vectors, text = _vector_index(hash_embedder), _text_index()
    assert set(_semantic(vectors, hash_embedder, "x", namespace="alice")) == {ids["kept"], ids["other"], ids["kept2"]}
    assert set(_fulltext(text, "lighthouse", namespace="alice")) == {ids["kept"]}
    assert vectors.loaded_from == text.loaded_from == "database"
    assert "the feed no longer continues from its position" in caplog.text


def test_a_reset_after_the_snapshot_reloads_from_the_database(hash_embedder, snapshot_dir) -> None:  # noqa: ANN001
    ids = _saved_pair(hash_embedder)
    ChangeFeedEntry.objects.create(memory_id=uuid.UUID(int=0), op=ChangeFeedEntry.Op.RESET)
    assert _rebuilt_correctly(hash_embedder, ids) == ("database", "database")


def test_snapshots_are_written_in_the_background_after_a_load(hash_embedder, snapshot_dir) -> None:  # noqa: ANN001
    ids = _saved_pair(hash_embedder, explicitly=False)
    assert {path.name.split("-")[0] for path in snapshot_dir.glob("*.json")} == {"vector", "text"}
    assert _rebuilt_correctly(hash_embedder, ids) == ("snapshot", "snapshot")


def test_snapshots_switched_off_are_neither_written_nor_read(hash_embedder, snapshot_dir, bhg_config) -> None:  # noqa: ANN001
    ids = _saved_pair(hash_embedder)
    bhg_config.index_snapshots = False
    assert _rebuilt_correctly(hash_embedder, ids) == ("database", "database")
    before = sorted(path.name for path in snapshot_dir.iterdir())
    vectors = _vector_index(hash_embedder)
    _semantic(vectors, hash_embedder, "x", namespace="alice")
    assert vectors.snapshot_keeper.thread is None
    assert sorted(path.name for path in snapshot_dir.iterdir()) == before


_OTHER_PROCESS = textwrap.dedent("""
    import json, os, sys
    from pathlib import Path
    import django
    django.setup()
    from django.conf import settings
    from django.utils import timezone
    settings.BHGBRAIN.index_snapshots = True
    settings.BHGBRAIN_DATA_DIR = Path(sys.argv[1])
    from tests.conftest import HashEmbedder
    from tests.memories.indexes.test_snapshots import _text_index
    from memories.analyzer import analyze_query
    from memories.indexes.embedded import EmbeddedVectorIndex
    embedder = HashEmbedder()
    vectors, text = EmbeddedVectorIndex(embedder.model_id, embedder.dimensions), _text_index()
    now = timezone.now()
    semantic = vectors.search(embedder.embed_query(sys.argv[2]), namespace="alice", collection=None, limit=10, now=now)
    fulltext = text.search(analyze_query(sys.argv[2]), namespace="alice", collection=None, now=now, limit=10)
    maps = Path("/proc/self/maps").read_text()
    print(json.dumps({"semantic": [h.memory_id for h in semantic], "fulltext": [str(i) for i, _ in fulltext],
                      "from": [vectors.loaded_from, text.loaded_from], "mapped": "matrix.npy" in maps}))
""")


def _test_database_url() -> str:
    """This test run's database, for another process (same engine, host, port and name: same snapshots)."""
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{db['NAME']}"
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    return f"postgres://{db['USER']}{password}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


@pytest.mark.django_db(transaction=True)
def test_another_process_shares_the_snapshot(hash_embedder, snapshot_dir) -> None:  # noqa: ANN001
    _saved_pair(hash_embedder)
    query = "The lighthouse keeper paints the railing blue"
    expected_semantic = _semantic(_vector_index(hash_embedder), hash_embedder, query, namespace="alice")
    expected_text = _fulltext(_text_index(), query, namespace="alice")
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings", "PYTHONPATH": str(ROOT),
           "DATABASE_URL": _test_database_url()}
    done = subprocess.run([sys.executable, "-c", _OTHER_PROCESS, str(snapshot_dir.parent), query], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"semantic": expected_semantic, "fulltext": expected_text, "from": ["snapshot", "snapshot"],
                      "mapped": True}


def test_a_row_written_while_the_vectors_are_copied_is_in_the_snapshot(hash_embedder, snapshot_dir, monkeypatch) -> None:  # noqa: ANN001
    """The vectors are copied a chunk per hold of the lock; a row written between two chunks,
    after its own chunk was copied, is copied again before the capture ends."""
    ids = _store(hash_embedder)
    index = _vector_index(hash_embedder)
    _semantic(index, hash_embedder, "x", namespace="alice")
    _settled(index)
    memory = Memory.objects.get(id=ids["kept"])
    row = index.row_ids.row(ids["kept"])
    replacement = hash_embedder.embed_passage("an entirely different text")
    memory.embedding = replacement.astype(np.float32).tobytes()
    monkeypatch.setattr(index.rows, "capture_chunk", 1)
    holds, chunks = index.rows.holds, []

    def write_after_its_chunk(big: dict[str, np.ndarray]) -> bool:
        chunks.append(1)
        if len(chunks) == row + 2:  # the row's own chunk is copied: another request writes it now
            index.upsert(memory)
        return holds(big)

    monkeypatch.setattr(index.rows, "holds", write_after_its_chunk)
    capture = index.capture()
    assert capture is not None and len(chunks) > row + 2
    assert np.array_equal(capture.arrays["matrix"][row], replacement)


# --- hashed ahead (memories/indexes/snapshot_digests.py), finishing writes, the sketch at load ----------

def _hashed_ahead(root: Path) -> None:
    snapshot_digests.forget_ahead()
    thread = snapshot_digests.verify_ahead(root)
    assert thread is not None
    thread.join(timeout=60)


def test_snapshots_hashed_ahead_open_with_those_digests(hash_embedder, snapshot_dir) -> None:  # noqa: ANN001
    ids = _saved_pair(hash_embedder)
    _hashed_ahead(snapshot_dir)
    ahead = dict(snapshot_digests._ahead)  # noqa: SLF001
    assert {Path(path).name for path in ahead} >= {"matrix.npy", "ids.npy", "id_order.npy", "post_rows.npy"}
    for path, future in ahead.items():
        assert future.result()[1] == snapshot_digests.file_sha256(Path(path))
    assert _rebuilt_correctly(hash_embedder, ids) == ("snapshot", "snapshot")
    assert snapshot_digests._ahead == {}  # noqa: SLF001 - each used once


def test_a_file_corrupt_before_it_is_hashed_ahead_is_rejected(hash_embedder, snapshot_dir, caplog) -> None:  # noqa: ANN001
    ids = _saved_pair(hash_embedder)
    _flip(_snapshot_file(snapshot_dir, "vector", "matrix.npy"), -5)
    _hashed_ahead(snapshot_dir)
    assert _rebuilt_correctly(hash_embedder, ids) == ("database", "snapshot")
    assert "matrix.npy fails its checksum" in caplog.text


def test_a_file_changed_after_it_was_hashed_ahead_is_hashed_again(hash_embedder, snapshot_dir, caplog) -> None:  # noqa: ANN001
    """A digest computed ahead is only used for the very file it was computed on: rewritten in
    place (new modification time) or replaced (another inode), the file is hashed again."""
    ids = _saved_pair(hash_embedder)
    _hashed_ahead(snapshot_dir)
    matrix = _snapshot_file(snapshot_dir, "vector", "matrix.npy")
    hashed_at = matrix.stat().st_mtime_ns
    _flip(matrix, -5)
    os.utime(matrix, ns=(hashed_at + 10**9, hashed_at + 10**9))  # what a write a moment later leaves
    post_rows = _snapshot_file(snapshot_dir, "text", "post_rows.npy")
    data = bytearray(post_rows.read_bytes())
    data[-1] ^= 0xFF
    replacement = post_rows.with_suffix(".new")
    replacement.write_bytes(bytes(data))
    os.replace(replacement, post_rows)
    assert _rebuilt_correctly(hash_embedder, ids) == ("database", "database")
    assert "matrix.npy fails its checksum" in caplog.text and "post_rows.npy fails its checksum" in caplog.text


def test_a_capture_spoilt_by_replaced_arrays_is_taken_again(hash_embedder, snapshot_dir) -> None:  # noqa: ANN001
    """The first search after a load may replace the arrays a background capture copies (it fits
    the sketch): the writer takes the capture again instead of leaving it to the next search."""
    ids = _store(hash_embedder)
    index = _vector_index(hash_embedder)
    index.size()  # loaded from the database
    calls: list[int] = []

    def capture() -> snapshots.Capture | None:
        calls.append(1)
        return None if len(calls) == 1 else index.capture()

    keeper = snapshots.Keeper("vector")
    keeper.loaded()
    keeper.maybe_start(capture)
    assert snapshots.finish_writes(60)
    assert len(calls) == 2
    assert _rebuilt_correctly(hash_embedder, ids)[0] == "snapshot"


def test_finish_writes_waits_for_the_background_write(hash_embedder, snapshot_dir) -> None:  # noqa: ANN001
    _store(hash_embedder)
    index = _vector_index(hash_embedder)
    _semantic(index, hash_embedder, "x", namespace="alice")  # loads, then starts writing its snapshot
    assert index.snapshot_keeper.thread is not None
    assert snapshots.finish_writes(60)
    assert not index.snapshot_keeper.thread.is_alive()
    assert list(snapshot_dir.glob("vector-*.json"))


def test_a_cut_off_writer_leaves_nothing_behind_the_next_write(hash_embedder, snapshot_dir) -> None:  # noqa: ANN001
    _saved_pair(hash_embedder)
    name = next(snapshot_dir.glob("vector-*.json")).stem
    unfinished = snapshot_dir / f"{name}.0123456789ab.tmp"
    unfinished.mkdir()
    (unfinished / "matrix.npy").write_bytes(b"half of it")
    index = _vector_index(hash_embedder)
    _semantic(index, hash_embedder, "x", namespace="alice")
    assert index.save_snapshot()
    assert not unfinished.exists()


@pytest.mark.parametrize(("min_rows", "fitted"), [(3, True), (4, False)])
def test_a_namespace_large_enough_gets_its_sketch_at_load(hash_embedder, snapshot_dir, monkeypatch,  # noqa: ANN001
                                                          min_rows: int, fitted: bool) -> None:
    """Fitted while loading (alice has 3 rows), so the snapshot written right after carries it."""
    monkeypatch.setattr(sketch, "SKETCH_MIN_ROWS", min_rows)
    monkeypatch.setattr(sketch, "SKETCH_MIN_DIMS", 8)
    _store(hash_embedder)
    index = _vector_index(hash_embedder)
    index.size()
    assert (index.rows.projection is not None) is fitted
    assert index.save_snapshot()
    assert _snapshot_file(snapshot_dir, "vector", "sketch.npy").exists() is fitted


# --- sealed files: opened without hashing while they are the very files the writer hashed ------

def _sealed_pair(embedder, monkeypatch) -> dict[str, str]:  # noqa: ANN001
    """The saved pair, every file sealed (the margin is for the kernel's coarse clock: these
    small files are written and hashed within a millisecond)."""
    monkeypatch.setattr(snapshot_digests, "SEAL_MARGIN_NS", 0)
    return _saved_pair(embedder)


def _hashes_while(monkeypatch) -> list[str]:  # noqa: ANN001
    hashed: list[str] = []
    real = snapshot_digests.file_sha256

    def counting(path: Path) -> str:
        hashed.append(path.name)
        return real(path)

    monkeypatch.setattr(snapshot_digests, "file_sha256", counting)
    return hashed


def test_sealed_snapshot_files_open_without_being_hashed(hash_embedder, snapshot_dir, monkeypatch) -> None:  # noqa: ANN001
    ids = _sealed_pair(hash_embedder, monkeypatch)
    for manifest_path in snapshot_dir.glob("*-*.json"):
        entries = json.loads(manifest_path.read_text())["files"].values()
        assert entries and all(len(entry["seal"]) == 4 for entry in entries)
    snapshot_digests.forget_ahead()
    assert snapshot_digests.verify_ahead(snapshot_dir) is None  # nothing left to hash ahead
    hashed = _hashes_while(monkeypatch)
    assert _rebuilt_correctly(hash_embedder, ids) == ("snapshot", "snapshot")
    assert hashed == []


def test_a_sealed_file_written_later_is_hashed_and_rejected(hash_embedder, snapshot_dir, monkeypatch, caplog) -> None:  # noqa: ANN001
    """A write gives the file a new modification time (a tick later than the seal's), so the seal
    no longer matches: the file is hashed, and a changed byte rejects the snapshot."""
    ids = _sealed_pair(hash_embedder, monkeypatch)
    matrix = _snapshot_file(snapshot_dir, "vector", "matrix.npy")
    sealed_at = matrix.stat().st_mtime_ns
    _flip(matrix, -5)
    os.utime(matrix, ns=(sealed_at + 10**7, sealed_at + 10**7))
    hashed = _hashes_while(monkeypatch)
    assert _rebuilt_correctly(hash_embedder, ids) == ("database", "snapshot")
    assert "matrix.npy fails its checksum" in caplog.text and hashed == ["matrix.npy"]


def test_a_sealed_file_replaced_by_a_copy_is_hashed_and_accepted(hash_embedder, snapshot_dir, monkeypatch) -> None:  # noqa: ANN001
    """A copy (a restored data directory) is another inode: hashed, and used when its bytes match."""
    ids = _sealed_pair(hash_embedder, monkeypatch)
    post_rows = _snapshot_file(snapshot_dir, "text", "post_rows.npy")
    copy = post_rows.with_suffix(".copy")
    shutil.copy2(post_rows, copy)  # same bytes and modification time, another inode
    os.replace(copy, post_rows)
    hashed = _hashes_while(monkeypatch)
    assert _rebuilt_correctly(hash_embedder, ids) == ("snapshot", "snapshot")
    assert hashed == ["post_rows.npy"]


def test_a_file_written_within_the_margin_is_not_sealed(tmp_path: Path) -> None:
    path = tmp_path / "fresh.npy"
    path.write_bytes(b"x" * 1000)
    digest, seal = snapshot_digests.sealed_sha256(path)
    assert seal is None and digest == snapshot_digests.file_sha256(path)
    old = path.stat().st_mtime_ns - 2 * snapshot_digests.SEAL_MARGIN_NS
    os.utime(path, ns=(old, old))
    _, seal = snapshot_digests.sealed_sha256(path)
    assert seal is not None and snapshot_digests.is_sealed(path, seal)
    assert not snapshot_digests.is_sealed(path, seal[:3]) and not snapshot_digests.is_sealed(tmp_path / "gone", seal)


def test_an_unchanged_graph_linked_into_the_next_snapshot_is_not_hashed_again(hash_embedder, snapshot_dir, monkeypatch) -> None:  # noqa: ANN001
    _store(hash_embedder)  # before the thresholds: the process's own index builds no graph to save
    monkeypatch.setattr(snapshot_digests, "SEAL_MARGIN_NS", 0)
    monkeypatch.setattr(hnsw, "ANN_MIN_ROWS", 2)
    monkeypatch.setattr(hnsw, "GRAPH_MIN_ROWS", 2)
    index = _vector_index(hash_embedder)
    _semantic(index, hash_embedder, "lighthouse", namespace="alice")  # starts the build
    index.ann.wait()  # type: ignore[union-attr]
    _saved(index)
    (graph,) = snapshot_dir.glob("vector-*/graph_*.usearch")
    first = json.loads(next(snapshot_dir.glob("vector-*.json")).read_text())["files"][graph.name]
    hashed: list[str] = []
    real = snapshot_digests.sealed_sha256
    monkeypatch.setattr(snapshot_digests, "sealed_sha256", lambda path: hashed.append(path.name) or real(path))
    monkeypatch.setattr(hnsw, "ANN_MIN_ROWS", 10**9)  # the process's own index (remember's dedup): no graph
    remember("The lighthouse keeper retires in spring", namespace="alice")
    monkeypatch.setattr(hnsw, "ANN_MIN_ROWS", 2)
    _semantic(index, hash_embedder, "lighthouse", namespace="alice")  # applies it: a dirty row, same graph
    _saved(index)
    manifest = json.loads(next(snapshot_dir.glob("vector-*.json")).read_text())
    assert manifest["files"][graph.name] == first and "matrix.npy" in hashed and graph.name not in hashed
    (linked,) = snapshot_dir.glob("vector-*/graph_*.usearch")
    assert linked.parent != graph.parent and linked.stat().st_ino == first["seal"][1]
    assert _vector_index(hash_embedder).size() and snapshot_digests.is_sealed(linked, first["seal"])


# --- a process that wrote a snapshot maps it instead of keeping its own copies -----------------

def _mapped(array: np.ndarray) -> bool:
    return isinstance(array, np.memmap) or isinstance(array.base, np.memmap)


def test_an_index_loaded_from_the_database_maps_the_snapshot_it_wrote(hash_embedder, snapshot_dir, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(hnsw, "ANN_MIN_ROWS", 2)
    monkeypatch.setattr(hnsw, "GRAPH_MIN_ROWS", 2)
    _store(hash_embedder)
    index = _vector_index(hash_embedder)
    expected = _semantic(index, hash_embedder, "lighthouse", namespace="alice")  # loads, starts the build
    index.ann.wait()  # type: ignore[union-attr]
    assert index.loaded_from == "database" and not _mapped(index.rows.matrix)
    graph = index.ann.graph(0)  # type: ignore[union-attr]
    assert not getattr(graph, "mapped", False)
    _saved(index)
    assert _mapped(index.rows.matrix)
    (saved,) = snapshot_dir.glob("vector-*/graph_*.usearch")
    swapped = index.ann.graph(0)  # type: ignore[union-attr]
    assert swapped is not graph and swapped.mapped and swapped.saved_at == saved
    assert _semantic(index, hash_embedder, "lighthouse", namespace="alice") == expected


def test_rows_written_while_a_snapshot_is_written_survive_the_mapping(hash_embedder, snapshot_dir) -> None:  # noqa: ANN001
    _store(hash_embedder)
    index = _vector_index(hash_embedder)
    index.size()  # loaded from the database
    _settled(index)
    capture = index.capture()
    assert capture is not None
    later = Memory.objects.get(id=remember("The lighthouse keeper retires in spring", namespace="alice").id)
    index.upsert(later)  # written after the capture, before the snapshot is in place
    row = index.row_ids.row(str(later.id))
    assert row < len(capture.arrays["matrix"])  # a free row the capture holds empty
    assert snapshots.write(*_target(index, capture))
    assert _mapped(index.rows.matrix) and np.array_equal(index.rows.matrix[row], hash_embedder.embed_query(later.content))
    assert not capture.arrays["matrix"][row].any()
    assert str(later.id) in _semantic(index, hash_embedder, "The lighthouse keeper retires in spring", namespace="alice")


def _target(index: EmbeddedVectorIndex, capture: snapshots.Capture) -> tuple[Path, str, snapshots.Capture, str]:
    root, name, birth = index.snapshot_keeper.target()
    return root, name, capture, birth


def test_an_opened_index_that_grows_drops_the_old_mapping_and_maps_a_new_snapshot_soon(hash_embedder, snapshot_dir) -> None:  # noqa: ANN001
    """Past the snapshot's spare rows the arrays are copied into private memory (at a million
    rows 1.5 GB more): the readers of the old files let go of their mappings, and a snapshot of
    the grown arrays is written at once (not after 2,000 changes or 10 minutes) and mapped."""
    ids = _saved_pair(hash_embedder)
    index = _vector_index(hash_embedder)
    expected = _semantic(index, hash_embedder, "x", namespace="alice")
    assert index.loaded_from == "snapshot" and _mapped(index.rows.matrix) and "matrix" in index.rows.mapped
    rows = len(index.rows.matrix)
    with index.held():
        index.reserve(len(index.rows.free) + 1)  # what a write past the last free row does
        assert not _mapped(index.rows.matrix) and index.rows.mapped == frozenset()
    assert _semantic(index, hash_embedder, "x", namespace="alice") == expected  # starts the write
    _settled(index)
    assert _mapped(index.rows.matrix) and "matrix" in index.rows.mapped and len(index.rows.matrix) > rows
    assert _semantic(index, hash_embedder, "x", namespace="alice") == expected
    later = remember("The lighthouse keeper retires in spring", namespace="alice")
    assert str(later.id) in _semantic(index, hash_embedder, "The lighthouse keeper retires in spring", namespace="alice")
    assert set(expected) <= set(_semantic(index, hash_embedder, "x", namespace="alice")) | {ids["other"]}


def test_an_opened_snapshot_keeps_its_ids_mapped_and_holds_only_the_rows_written_since(hash_embedder, snapshot_dir) -> None:  # noqa: ANN001
    """A new process maps the snapshot's ids (by row, and rows sorted by id) instead of holding a
    Python string per row and an id -> row dict (at a million rows ~145 MiB and a second or
    more per index): a search maps rows to ids, a write finds its row by binary search, and only
    the rows the feed brought since are held apart; the next snapshot takes them in."""
    ids = _saved_pair(hash_embedder)
    vectors, text = _vector_index(hash_embedder), _text_index()
    assert set(_semantic(vectors, hash_embedder, "x", namespace="alice")) == {ids["kept"], ids["other"], ids["expiring"]}
    assert ids["kept"] in _fulltext(text, "lighthouse keeper", namespace="alice")
    assert vectors.loaded_from == text.loaded_from == "snapshot"
    for index in (vectors, text):
        held = index.row_ids
        assert _mapped(held.base) and not held.base.flags.writeable  # shared, read-only
        assert held.reads_file  # and read with pread, not through the mapping
        assert held.since_base() == ({}, [], {})
    assert not vectors.rows.free_listed and vectors.size() == 4
    later = remember("The lighthouse keeper retires in spring", namespace="alice")
    memory_forget(memory_id=ids["other"], namespace=None, actor="test")
    assert set(_semantic(vectors, hash_embedder, "x", namespace="alice")) == {ids["kept"], ids["expiring"], str(later.id)}
    assert _fulltext(text, "retires spring", namespace="alice") == [str(later.id)]
    for index in (vectors, text):
        held = index.row_ids
        written = {row: held.get(row) for row in [*held.since_base()[0], *range(len(held.base), len(held))]}
        assert set(written.values()) - {None} == {str(later.id)}  # the forgotten row only lost its id
        assert held.row(ids["other"]) is None and held.row(ids["kept"]) is not None
        assert held.get(held.row(ids["kept"])) == ids["kept"]
    assert vectors.size() == 4
    _saved(vectors)
    _saved(text)
    for index in (vectors, text):  # the snapshot's ids replace what was held
        held = index.row_ids
        assert _mapped(held.base) and len(held.base) == len(held) and held.reads_file
        assert held.since_base() == ({}, [], {})
        assert held.row(str(later.id)) is not None and held.row(ids["other"]) is None
    assert _fulltext(text, "retires spring", namespace="alice") == [str(later.id)]
    assert set(_semantic(vectors, hash_embedder, "x", namespace="alice")) == {ids["kept"], ids["expiring"], str(later.id)}


def _ranked(index: TextIndex, text: str) -> list[tuple[float, str]]:
    """Alice's hits with their scores, best first and ties by id: rows tied at one score (the
    three storm notes) come in row order, which differs between a replayed and a loaded index."""
    hits = index.search(analyze_query(text), namespace="alice", collection=None, now=timezone.now(), limit=10)
    return sorted(((round(score, 5), str(memory_id)) for memory_id, score in hits), key=lambda hit: (-hit[0], hit[1]))


def test_postings_added_after_a_snapshot_are_kept_apart_and_score_like_a_full_load(hash_embedder, snapshot_dir) -> None:  # noqa: ANN001
    """A feed tail adding to a term the snapshot has a list of keeps those postings in RAM beside
    the mapped list, never copying it (a tail over the common terms of a million rows copied
    most of the lists: seconds and hundreds of MB), and scores exactly as a load from the
    database; the next snapshot holds both parts as one list."""
    ids = _saved_pair(hash_embedder)
    added = [str(remember(f"The lighthouse keeper logs storm number {i}", namespace="alice").id) for i in range(3)]
    memory_forget(memory_id=ids["kept"], namespace="alice", actor="test")
    opened = _text_index()
    got = {q: _ranked(opened, q) for q in ("lighthouse keeper", "storm", "lighthouse railing")}
    assert opened.loaded_from == "snapshot"
    term = analyze_query("lighthouse")[0]
    assert term in opened.postings.mapped_terms and len(opened.postings.ram[term][0]) == 3  # only the tail
    with CaptureQueriesContext(connection):
        loaded = _text_index()
        loaded.reload()  # the same rows, read from the database
    for query, hits in got.items():
        assert hits == _ranked(loaded, query), query
    found = {memory_id for _, memory_id in got["lighthouse keeper"]}
    assert found >= set(added) and ids["kept"] not in found
    _saved(opened)  # the mapped list and its tail, written as one
    reopened = _text_index()
    for query, hits in got.items():
        assert _ranked(reopened, query) == hits, query
    assert reopened.loaded_from == "snapshot" and term not in reopened.postings.ram
    assert reopened.postings.mapped_tfs.dtype == np.uint8  # tfs of 0.5 steps: a quarter of the bytes, same scores


def test_tfs_are_saved_as_doubled_integers_when_exact_and_as_they_are_otherwise() -> None:
    halves = np.array([1.0, 2.5, 4.0, 127.5], dtype=np.float32)
    assert postings.narrowed(halves).tolist() == [2, 5, 8, 255]
    assert postings.narrowed(halves).dtype == np.uint8
    wider = np.array([1.0, 2.5, 128.0, 32767.5], dtype=np.float32)
    assert postings.narrowed(wider).dtype == np.uint16
    assert postings.narrowed(wider).tolist() == [2, 5, 256, 65535]
    for weighted in ([1.0, 1.3], [1.0, 32768.0], [-0.5, 1.0]):  # a context weight of 0.3; past uint16; negative
        tfs = np.array(weighted, dtype=np.float32)
        assert postings.narrowed(tfs) is tfs
    many = np.full(postings.NARROW_CHUNK + 3, 1.5, dtype=np.float32)  # across a chunk's edge
    many[-1] = 0.3
    assert postings.narrowed(many) is many
    many[-1] = 3.0
    assert postings.narrowed(many).dtype == np.uint8 and postings.narrowed(many)[-1] == 6


def test_a_snapshot_with_float16_tfs_from_an_older_release_is_read_with_the_same_scores(  # noqa: ANN001
        hash_embedder, snapshot_dir, monkeypatch) -> None:
    """Snapshots written before the uint8 tfs held float16: they are still opened (not rebuilt),
    score the same, and the next snapshot is written in the new form."""
    _store(hash_embedder)
    loaded = _text_index()
    queries = ("lighthouse keeper", "storm", "lighthouse railing")
    expected = {q: _ranked(loaded, q) for q in queries}
    with monkeypatch.context() as patched:
        patched.setattr(text_index, "narrowed", lambda tfs: tfs.astype(np.float16))
        _saved(loaded)
    opened = _text_index()
    assert {q: _ranked(opened, q) for q in queries} == expected
    assert opened.loaded_from == "snapshot" and opened.postings.mapped_tfs.dtype == np.float16
    _saved(opened)
    reopened = _text_index()
    assert {q: _ranked(reopened, q) for q in queries} == expected
    assert reopened.loaded_from == "snapshot" and reopened.postings.mapped_tfs.dtype == np.uint8
