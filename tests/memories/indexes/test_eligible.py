"""The cache of the rows a kind of search may return (memories/indexes/eligible.py)."""
from __future__ import annotations

import math
import random

import numpy as np

from memories.indexes.eligible import KINDS_KEPT, EligibleRows


def _rows(ns: list[int], live: list[float]):  # noqa: ANN202
    ns_array, live_array = np.array(ns), np.array(live, dtype=np.float64)
    calls = []

    def select(code: int):  # noqa: ANN202
        def mask() -> np.ndarray:
            calls.append(code)
            return ns_array == code
        return mask

    return live_array, select, calls


def test_the_mask_is_the_kind_narrowed_to_unexpired_rows_and_reused_while_nothing_changes() -> None:
    live, select, calls = _rows([1, 1, 2, 1], [10.0, 50.0, 99.0, math.inf])
    cache = EligibleRows()
    found = cache.get("ns1", 0, 5.0, live, select(1))
    assert found.rows().tolist() == [0, 1, 3] and found.until == 10.0
    assert cache.get("ns1", 0, 9.0, live, select(1)) is found and calls == [1]


def test_an_expiry_crossed_recomputes_and_an_earlier_time_is_not_served_a_later_mask() -> None:
    live, select, calls = _rows([1, 1, 1], [10.0, 50.0, math.inf])
    cache = EligibleRows()
    cache.get("k", 0, 5.0, live, select(1))
    later = cache.get("k", 0, 20.0, live, select(1))
    assert later.rows().tolist() == [1, 2] and later.until == 50.0
    earlier = cache.get("k", 0, 5.0, live, select(1))
    assert earlier.rows().tolist() == [0, 1, 2] and len(calls) == 3


def test_a_new_version_recomputes_and_no_expiry_means_forever() -> None:
    live, select, calls = _rows([1, 2], [math.inf, math.inf])
    cache = EligibleRows()
    first = cache.get("k", 0, 1.0, live, select(1))
    assert first.until == math.inf and cache.get("k", 0, 1e12, live, select(1)) is first
    assert cache.get("k", 1, 1.0, live, select(1)) is not first and len(calls) == 2
    assert cache.get("empty", 1, 1.0, live, select(3)).rows().size == 0


def test_kinds_are_kept_apart_and_bounded() -> None:
    live, select, _ = _rows([1, 2], [math.inf, math.inf])
    cache = EligibleRows()
    assert cache.get(1, 0, 0.0, live, select(1)).rows().tolist() == [0]
    assert cache.get(2, 0, 0.0, live, select(2)).rows().tolist() == [1]
    for kind in range(3, 3 + KINDS_KEPT):
        cache.get(kind, 0, 0.0, live, select(1))
    assert cache.cached(1) is None and cache.cached(2 + KINDS_KEPT) is not None


def test_an_expiry_moved_keeps_each_mask_that_stays_right_and_drops_one_it_may_have_made_wrong() -> None:
    live, select, calls = _rows([1, 1, 2], [10.0, 50.0, 30.0])
    cache = EligibleRows()
    holding = cache.get("ns1", 0, 5.0, live, select(1))  # rows 0 and 1, until 10
    other = cache.get("ns2", 0, 5.0, live, select(2))  # row 2: row 0 left out by its namespace
    assert cache.get("late", 0, 20.0, live, select(1)).rows().tolist() == [1]  # row 0 left out as expired
    live[0] = 80.0
    cache.expiry_moved(0, 10.0, 80.0)
    assert cache.cached("ns1") is holding and holding.until == 10.0  # still right (a bound, not exact)
    assert cache.cached("ns2") is other and cache.cached("late") is None  # row 0 is live again at 20
    assert cache.get("late", 0, 20.0, live, select(1)).rows().tolist() == [0, 1]
    live[1] = 6.0  # shortened: the masks holding it end at its new expiry
    cache.expiry_moved(1, 50.0, 6.0)
    assert holding.until == 6.0 and cache.get("ns1", 0, 5.5, live, select(1)) is holding
    assert cache.get("ns1", 0, 7.0, live, select(1)).rows().tolist() == [0]
    assert calls == [1, 2, 1, 1, 1]


def test_masks_adjusted_to_moved_expiries_always_equal_fresh_ones() -> None:
    """Random expiries moved both ways, random times: a cached answer is always the one computed
    from scratch (with the current version, as an index that only moved expiries keeps it)."""
    rng = random.Random(3)
    ns = np.array([rng.randrange(3) for _ in range(40)])
    live = np.array([rng.choice([math.inf, rng.uniform(0, 100)]) for _ in range(40)], dtype=np.float64)
    cache = EligibleRows()
    reused = 0
    for _ in range(3000):
        if rng.random() < 0.3:
            row = rng.randrange(40)
            old, live[row] = live[row], rng.choice([math.inf, rng.uniform(0, 100)])
            cache.expiry_moved(row, float(old), float(live[row]))
            continue
        code, now = rng.randrange(3), rng.uniform(0, 100)
        before = cache.cached(code)
        found = cache.get(code, 0, now, live, lambda code=code: ns == code)
        reused += found is before
        assert found.rows().tolist() == np.flatnonzero((ns == code) & (live > now)).tolist()
    assert reused > 100  # the cache was used, not only recomputed


def test_masks_told_of_written_and_dropped_rows_always_equal_fresh_ones() -> None:
    """Rows written (new ones at the end, others moved to another kind or given a new expiry) and
    dropped, one at a time, told to the cache as an index tells it: a cached answer is always the
    one computed from scratch, and masks are reused across those changes instead of computed again."""
    rng = random.Random(11)
    ns = [rng.randrange(3) for _ in range(30)]
    live = [rng.choice([math.inf, rng.uniform(0, 100)]) for _ in range(30)]
    cache = EligibleRows()
    version, reused, computed = 0, 0, 0
    for _ in range(4000):
        if rng.random() < 0.3:
            before = (version, len(ns))
            version += 1
            change = rng.random()
            if change < 0.3:  # a new row at the end
                row = len(ns)
                ns.append(rng.randrange(3))
                live.append(rng.choice([math.inf, rng.uniform(0, 100)]))
            else:
                row = rng.randrange(len(ns))
                if change < 0.8:  # written again: maybe another namespace, another expiry
                    ns[row], live[row] = rng.randrange(3), rng.choice([math.inf, rng.uniform(0, 100)])
                else:  # dropped: a free row
                    ns[row], live[row] = -1, -math.inf
            written = live[row] if ns[row] >= 0 else None
            cache.row_changed(row, before, (version, len(ns)), len(ns), written,
                              lambda kind, row=row: ns[row] == kind)
            continue
        code, now = rng.randrange(3), rng.uniform(0, 10)  # a few expiries crossed, most rows live
        ns_array, live_array = np.array(ns), np.array(live, dtype=np.float64)
        previous = cache.cached(code)

        def select(code: int = code, ns_array: np.ndarray = ns_array) -> np.ndarray:
            nonlocal computed
            computed += 1
            return ns_array == code

        found = cache.get(code, (version, len(ns)), now, live_array, select)
        reused += found is previous
        assert found.rows().tolist() == np.flatnonzero((ns_array == code) & (live_array > now)).tolist()
    assert reused > 700 and computed < 2100  # told nothing (every change a new version): about 350 and 2,500
