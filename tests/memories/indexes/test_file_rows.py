"""FileRows: rows of a mapped snapshot array read from the file, except those written through the mapping."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from memories.indexes import file_rows
from memories.indexes.file_rows import FileRows


def _mapped(tmp_path: Path, rows: int = 3000, dims: int = 384) -> tuple[np.ndarray, np.ndarray]:
    """Random rows saved to ``matrix.npy`` and mapped copy-on-write, as a snapshot opens them."""
    data = np.random.default_rng(7).standard_normal((rows, dims)).astype(np.float32)
    np.save(tmp_path / "matrix.npy", data)
    return data, np.asarray(np.load(tmp_path / "matrix.npy", mmap_mode="c"))


def _resident_kib(path: Path) -> int:
    """This process's resident KiB of its mappings of ``path`` (/proc/self/smaps)."""
    total, current = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()
        if head and "-" in head[0] and len(head) >= 5:
            current = len(head) >= 6 and head[5] == str(path)
        elif current and head[:1] == ["Rss:"]:
            total += int(head[1])
    return total


def test_take_and_block_return_the_rows(tmp_path: Path) -> None:
    data, mapped = _mapped(tmp_path)
    reader = FileRows(mapped, tmp_path / "matrix.npy")
    rows = np.array([2999, 0, 17, 17, 1500])
    assert np.array_equal(reader.take(rows), data[rows])
    assert np.array_equal(reader.block(100, 250), data[100:250])
    assert np.array_equal(reader.block(2990, 4000), data[2990:])  # clipped at the end
    assert reader.take(np.zeros(0, dtype=np.int64)).shape == (0, 384)


def test_rows_written_through_the_mapping_are_read_from_it(tmp_path: Path) -> None:
    data, mapped = _mapped(tmp_path)
    reader = FileRows(mapped, tmp_path / "matrix.npy")
    mapped[5] = 1.0  # a copy-on-write page: the file still holds the old row
    assert np.array_equal(reader.take(np.array([5])), data[[5]])  # not marked: stale, which is why marking matters
    reader.mark(5)
    mapped[[7, 9]] = 2.0
    reader.mark(np.array([7, 9]))
    expected = data.copy()
    expected[5], expected[[7, 9]] = 1.0, 2.0
    rows = np.array([4, 5, 6, 7, 9])
    assert np.array_equal(reader.take(rows), expected[rows])
    assert np.array_equal(reader.block(0, 20), expected[:20])


def test_rows_read_with_pread_where_there_is_no_preadv(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    data, mapped = _mapped(tmp_path)
    reader = FileRows(mapped, tmp_path / "matrix.npy")
    monkeypatch.delattr(file_rows.os, "preadv", raising=False)
    rows = np.array([3, 2999, 40])
    assert np.array_equal(reader.take(rows), data[rows])
    assert np.array_equal(reader.block(10, 30), data[10:30])


def test_a_gather_beyond_the_limit_reads_through_the_mapping(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    data, mapped = _mapped(tmp_path)
    monkeypatch.setattr(file_rows, "PREAD_MAX_ROWS", 10)
    mapped[3] = 5.0
    reader = FileRows(mapped, tmp_path / "matrix.npy")
    reader.mark(3)
    rows = np.arange(0, 3000, 100)
    expected = data[rows].copy()
    expected[0] = data[0]
    assert np.array_equal(reader.take(rows), expected)


def test_the_rows_stay_readable_once_the_file_is_removed(tmp_path: Path) -> None:
    data, mapped = _mapped(tmp_path)
    reader = FileRows(mapped, tmp_path / "matrix.npy")
    (tmp_path / "matrix.npy").unlink()  # a newer snapshot removes the older directory
    assert np.array_equal(reader.take(np.array([1, 2999])), data[[1, 2999]])


def test_only_the_array_its_file_holds_gets_a_reader(tmp_path: Path) -> None:
    _, mapped = _mapped(tmp_path)
    path = tmp_path / "matrix.npy"
    assert FileRows.of(mapped, path) is not None
    assert FileRows.of(np.zeros((4, 4), dtype=np.float32), path) is None  # not what the file holds
    assert FileRows.of(mapped[:, :5], path) is None  # not C-ordered rows
    assert FileRows.of(mapped[10:], path) is None  # not the whole file: its offset would be wrong
    assert FileRows.of(mapped, tmp_path / "gone.npy") is None


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="reads /proc/self/smaps")
def test_reading_rows_maps_none_of_the_file(tmp_path: Path) -> None:
    # What the reader is for: a search's re-score leaves no page of the matrix in this process.
    _, mapped = _mapped(tmp_path, rows=20_000)
    reader = FileRows(mapped, tmp_path / "matrix.npy")
    path = (tmp_path / "matrix.npy").resolve()
    rows = np.random.default_rng(1).choice(20_000, size=800, replace=False)
    reader.take(rows)
    reader.block(0, 5000)
    assert _resident_kib(path) == 0
    np.asarray(mapped[rows])  # the mapping itself does map them: the check above can fail
    assert _resident_kib(path) > 0


def _compiled() -> object:
    """The compiled gather, loaded now (numba is a dependency on CPython: a failed load fails the test)."""
    file_rows.prepare_compiled()
    kernel = file_rows.compiled_gather(wait=None)
    assert kernel is not None, "the compiled row gather did not load"
    return kernel


def test_the_compiled_gather_reads_the_same_rows(tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    data, mapped = _mapped(tmp_path)
    _compiled()
    reader = FileRows(mapped, tmp_path / "matrix.npy")
    mapped[[8, 2000]] = 3.0  # written through the mapping: read from it, the rest by the kernel
    reader.mark(np.array([8, 2000]))
    expected = data.copy()
    expected[[8, 2000]] = 3.0
    rows = np.random.default_rng(5).choice(3000, size=900, replace=True)
    rows[:3], rows[-1] = (8, 2000, 5), 2999  # the last row of the file last
    assert np.array_equal(reader.take(rows), expected[rows])
    monkeypatch.setenv(file_rows.DISABLE_ENV, "0")  # turned off: the Python loop reads the same
    assert file_rows.compiled_gather() is None
    assert np.array_equal(reader.take(rows), expected[rows])


def test_a_short_read_in_the_compiled_gather_is_an_error_not_zeros(tmp_path: Path) -> None:
    _, mapped = _mapped(tmp_path)
    _compiled()
    reader = FileRows(mapped, tmp_path / "matrix.npy")
    with open(tmp_path / "matrix.npy", "r+b") as handle:
        handle.truncate(4096)  # the file lost its rows under the reader
    with pytest.raises(OSError, match="short read"):
        reader.take(np.array([1, 2500]))


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="reads /proc/self/smaps")
def test_the_compiled_gather_maps_none_of_the_file(tmp_path: Path) -> None:
    _, mapped = _mapped(tmp_path, rows=20_000)
    _compiled()
    reader = FileRows(mapped, tmp_path / "matrix.npy")
    path = (tmp_path / "matrix.npy").resolve()
    reader.take(np.random.default_rng(2).choice(20_000, size=800, replace=False))
    assert _resident_kib(path) == 0
