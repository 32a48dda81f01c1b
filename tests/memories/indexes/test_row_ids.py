"""RowIds: the ids of an index's rows kept in a snapshot's arrays, with the changes since beside them."""
from __future__ import annotations

import threading
import uuid
from pathlib import Path

import numpy as np

from memories.indexes import snapshots
from memories.indexes.file_rows import FileRows
from memories.indexes.row_ids import RowIds, as_id_array, id_order, opened_ids, rebase_ids


def _ids(count: int) -> list[str]:
    return [str(uuid.UUID(int=(i * 7919 + 13) << 64)) for i in range(count)]  # not in sorted order


def _mapped_copy(tmp_path: Path, name: str, array: np.ndarray) -> np.ndarray:
    np.save(tmp_path / f"{name}.npy", array)
    return np.asarray(np.load(tmp_path / f"{name}.npy", mmap_mode="r"))


def test_a_base_answers_both_ways_with_and_without_its_order(tmp_path: Path) -> None:
    names = _ids(500)
    base = as_id_array([*names[:200], None, *names[200:]])
    mapped = _mapped_copy(tmp_path, "ids", base)
    read = FileRows.of(mapped, tmp_path / "ids.npy")
    assert read is not None
    for held in (RowIds(mapped, _mapped_copy(tmp_path, "order", id_order(base))), RowIds(base.copy()),
                 RowIds(mapped, _mapped_copy(tmp_path, "order", id_order(base)), read)):
        assert len(held) == 501
        assert held.get(200) is None and held.get(0) == names[0] and held.get(500) == names[499]
        assert all(held.row(name) == (i if i < 200 else i + 1) for i, name in enumerate(names))
        assert held.row(str(uuid.uuid4())) is None and held.row("") is None
        assert held.row(names[3][:-1]) is None  # a prefix of an id is not that id
        assert held.free_rows() == [200]


def test_changes_since_the_base_are_seen_and_freed_rows_lose_their_ids() -> None:
    names = _ids(50)
    held = RowIds(as_id_array(names))
    held.set(7, None)  # dropped
    held.set(9, "moved-in")  # a row of the base given to a new id
    held.extend(3)
    held.set(51, "appended")  # past the base, leaving row 50 free
    assert held.row(names[7]) is None and held.get(7) is None
    assert held.row(names[9]) is None and held.row("moved-in") == 9
    assert held.row("appended") == 51 and held.get(50) is None and held.get(52) is None
    assert len(held) == 53 and held.free_rows() == [52, 50, 7]
    held.set(51, None)
    held.set(7, names[9])  # an id the base holds elsewhere, now at another row
    assert held.row("appended") is None and held.row(names[9]) == 7 and held.get(9) == "moved-in"


def test_a_capture_holds_every_row_and_rebase_keeps_only_the_later_changes(tmp_path: Path) -> None:
    names = _ids(40)
    held = RowIds()
    for row, name in enumerate(names):  # a load from the database: every row appended
        held.set(row, name)
    held.set(5, None)
    long_id = "x" * 60  # wider than a UUID: the capture widens the array
    held.set(40, long_id)
    captured, token = held.capture(), held.token
    assert captured.dtype == np.dtype("S60") and captured[5] == b"" and captured[40] == long_id.encode()
    held.set(6, None)  # after the capture
    held.set(41, "later")
    assert not held.rebase(object(), captured, id_order(captured))  # another capture's snapshot
    base = _mapped_copy(tmp_path, "ids", captured)
    assert held.rebase(token, base, _mapped_copy(tmp_path, "order", id_order(captured)))
    assert held.base is base and held.since_base()[:2] == ({6: None}, ["later"])
    assert held.row(names[6]) is None and held.row(names[7]) == 7 and held.row(long_id) == 40
    assert held.row("later") == 41 and held.get(5) is None and len(held) == 42
    assert not held.rebase(token, base, id_order(captured))  # taken once


def test_rebase_ids_reads_the_written_snapshot_and_ignores_a_removed_one(tmp_path: Path) -> None:
    held = RowIds()
    held.set(0, "a")
    captured, token = held.capture(), held.token
    rebase_ids(threading.RLock(), held, token, tmp_path / "gone")
    assert len(held.base) == 0
    np.save(tmp_path / "ids.npy", captured)
    np.save(tmp_path / "id_order.npy", id_order(captured))
    rebase_ids(threading.RLock(), held, token, tmp_path)
    assert len(held.base) == 1 and held.row("a") == 0


def test_ids_written_as_lines_by_an_earlier_version_are_read_and_dead_rows_lose_theirs() -> None:
    names = _ids(4)
    capture = snapshots.Capture({}, {"ids": [names[0], "", names[2], names[3]]}, {}, snapshots.FeedPosition(0, None))
    opened = opened_ids(capture, np.array([1, 0, 0, 1], dtype=np.int8))
    assert opened.order is None and opened.base.tolist() == [names[0].encode(), b"", b"", names[3].encode()]
    held = RowIds(opened.base, opened.order)
    assert held.row(names[2]) is None and held.row(names[3]) == 3
    arrays = {"ids": as_id_array(names), "id_order": id_order(as_id_array(names))}
    current = opened_ids(snapshots.Capture(arrays, {}, {}, snapshots.FeedPosition(0, None)))
    assert current.base is arrays["ids"] and current.order is arrays["id_order"]


def test_with_a_reader_the_ids_are_read_from_the_file_not_the_mapping(tmp_path: Path) -> None:
    """Lookups through the mapping left the whole file resident; with a reader every base id
    comes from ``pread`` (a reader whose array is not the base is ignored)."""
    names = _ids(300)
    base = as_id_array([*names[:100], None, *names[100:]])
    mapped = _mapped_copy(tmp_path, "ids", base)
    reader = FileRows.of(mapped, tmp_path / "ids.npy")
    assert reader is not None and not RowIds(base.copy(), None, reader).reads_file
    blank = np.zeros_like(mapped)  # the base: any read through the array would miss
    reader.array = blank
    held = RowIds(blank, _mapped_copy(tmp_path, "order", id_order(base)), reader)
    assert held.reads_file
    (tmp_path / "ids.npy").unlink()  # the reader keeps its own descriptor
    assert held.get(0) == names[0] and held.get(100) is None and held.row(names[250]) == 251
    assert held.free_rows() == [100]
    assert held.capture().tolist() == base.tolist()
