"""The rejected alternative to ``memories/indexes/hnsw.py``: an inverted-file (IVF) index over int8 vectors.

Kept so ``bench/ann_search.py`` can measure it again (docs/performance.md, "Approximate vector
search": on the bench's vectors the top 10 of an exact scan is spread over so many lists that an
IVF has to scan most of the index to find it, so it lost to the HNSW graphs).

The unit vectors are grouped into ``lists`` around spherical k-means centroids (trained on a
sample). A query scores the centroids, then scans the members of the best lists (their int8
codes, one per-dimension scale for the whole index) and hands the best few hundred rows back to
the caller, who re-scores them exactly with the float32 vectors. Filters are applied *inside*
the scan: a member counts only when the caller's ``allowed`` mask (namespace, collection,
expiry, facts-only) says so, and lists are probed until as large a share of the *allowed* rows
has been examined as an unfiltered search would examine, so a namespace that is a small part of
the index is still searched well (probing more lists), never padded with other rows or cut short.

Rows are the caller's row numbers (``EmbeddedVectorIndex`` rows); ``put`` appends a row's codes
to its nearest list (replacing any earlier codes of that row) and ``drop`` removes them by
moving the list's last member into the hole, so a list stays contiguous and needs no tombstones.
"""
from __future__ import annotations

import numpy as np

TRAIN_SAMPLE_PER_LIST = 64  # k-means sample: this many rows per list (capped by TRAIN_SAMPLE_MAX)
TRAIN_SAMPLE_MAX = 65_536
TRAIN_ITERATIONS = 8
PROBE_SHARE = 0.05  # examine this share of the eligible rows (at least PROBE_MIN_LISTS lists)
PROBE_MIN_LISTS = 8
_ASSIGN_CHUNK = 16_384
_STATE_VERSION = 1


def list_count(rows: int) -> int:
    """About sqrt(rows) lists (1,000 at a million rows), at least 16."""
    return max(16, int(round(np.sqrt(rows))))


def _normalised(vectors: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (vectors / norms).astype(np.float32, copy=False)


def train_centroids(sample: np.ndarray, lists: int, seed: int = 0) -> np.ndarray:
    """Spherical k-means: unit centroids maximising the members' cosine."""
    rng = np.random.default_rng(seed)
    lists = min(lists, sample.shape[0])
    centroids = _normalised(sample[rng.choice(sample.shape[0], size=lists, replace=False)].copy())
    for _ in range(TRAIN_ITERATIONS):
        labels = _nearest(centroids, sample)
        sums = np.zeros_like(centroids, dtype=np.float64)
        np.add.at(sums, labels, sample)
        empty = ~np.any(sums, axis=1)
        if empty.any():  # an empty list restarts on a random sample row
            sums[empty] = sample[rng.choice(sample.shape[0], size=int(empty.sum()), replace=False)]
        centroids = _normalised(sums.astype(np.float32))
    return centroids


def _nearest(centroids: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    labels = np.empty(vectors.shape[0], dtype=np.int32)
    for start in range(0, vectors.shape[0], _ASSIGN_CHUNK):  # bounded temporaries
        stop = start + _ASSIGN_CHUNK
        labels[start:stop] = np.argmax(vectors[start:stop] @ centroids.T, axis=1)
    return labels


class IvfIndex:
    """Lists of int8 codes and their row numbers; see the module docstring."""

    def __init__(self, centroids: np.ndarray, scale: np.ndarray, trained_rows: int) -> None:
        self.centroids = np.ascontiguousarray(centroids, dtype=np.float32)
        self.scale = np.ascontiguousarray(scale, dtype=np.float32)  # code * scale ~ component
        self.trained_rows = trained_rows
        lists, dims = self.centroids.shape
        self._codes = [np.zeros((0, dims), dtype=np.int8) for _ in range(lists)]
        self._members = [np.zeros(0, dtype=np.int64) for _ in range(lists)]
        self._sizes = np.zeros(lists, dtype=np.int64)
        self._list_of = np.full(0, -1, dtype=np.int32)  # row -> its list (-1: not indexed)
        self._slot_of = np.zeros(0, dtype=np.int64)  # row -> its place in the list

    # ------------------------------------------------------------------ building

    @classmethod
    def train(cls, sample: np.ndarray, rows: int) -> IvfIndex:
        """An empty index whose lists and quantiser are fitted on ``sample`` (for ``rows`` rows)."""
        scale = np.maximum(np.abs(sample).max(axis=0), 1e-6) / 127.0
        return cls(train_centroids(sample, list_count(rows)), scale, rows)

    def put_many(self, rows: np.ndarray, vectors: np.ndarray) -> None:
        """Index (or re-index) these rows' vectors, a batch at a time."""
        rows = np.asarray(rows, dtype=np.int64)
        for start in range(0, rows.size, _ASSIGN_CHUNK):
            chunk_rows, chunk = rows[start:start + _ASSIGN_CHUNK], vectors[start:start + _ASSIGN_CHUNK]
            self._reserve_rows(int(chunk_rows.max()) + 1 if chunk_rows.size else 0)
            for row in chunk_rows[self._list_of[chunk_rows] >= 0]:
                self.drop(int(row))
            labels = _nearest(self.centroids, chunk)
            codes = self._quantise(chunk)
            order = np.argsort(labels, kind="stable")
            bounds = np.searchsorted(labels[order], np.arange(self.centroids.shape[0] + 1))
            for label in np.flatnonzero(np.diff(bounds)):
                picked = order[bounds[label]:bounds[label + 1]]
                self._append(int(label), chunk_rows[picked], codes[picked])

    def put(self, row: int, vector: np.ndarray) -> None:
        """Index one row (a new row, or a row whose vector changed)."""
        self.put_many(np.array([row]), np.asarray(vector, dtype=np.float32).reshape(1, -1))

    def drop(self, row: int) -> None:
        """Forget a row: the list's last member takes its place."""
        if row >= self._list_of.size or self._list_of[row] < 0:
            return
        label, slot = int(self._list_of[row]), int(self._slot_of[row])
        last = int(self._sizes[label]) - 1
        members, codes = self._members[label], self._codes[label]
        if slot != last:
            moved = int(members[last])
            members[slot], codes[slot] = moved, codes[last]
            self._slot_of[moved] = slot
        self._sizes[label] = last
        self._list_of[row] = -1

    def __contains__(self, row: int) -> bool:
        return row < self._list_of.size and bool(self._list_of[row] >= 0)

    def __len__(self) -> int:
        return int(self._sizes.sum())

    def _quantise(self, vectors: np.ndarray) -> np.ndarray:
        return np.clip(np.rint(vectors / self.scale), -127, 127).astype(np.int8)

    def _reserve_rows(self, rows: int) -> None:
        if rows > self._list_of.size:
            extra = max(rows - self._list_of.size, self._list_of.size // 2, 1024)
            self._list_of = np.concatenate([self._list_of, np.full(extra, -1, dtype=np.int32)])
            self._slot_of = np.concatenate([self._slot_of, np.zeros(extra, dtype=np.int64)])

    def _append(self, label: int, rows: np.ndarray, codes: np.ndarray) -> None:
        size, needed = int(self._sizes[label]), int(self._sizes[label]) + rows.size
        if needed > self._members[label].size:  # grow by half again: amortised appends
            capacity = max(needed, self._members[label].size * 3 // 2, 16)
            self._members[label] = np.resize(self._members[label], capacity)
            grown = np.zeros((capacity, self.centroids.shape[1]), dtype=np.int8)
            grown[:size] = self._codes[label][:size]
            self._codes[label] = grown
        self._members[label][size:needed] = rows
        self._codes[label][size:needed] = codes
        self._list_of[rows] = label
        self._slot_of[rows] = np.arange(size, needed)
        self._sizes[label] = needed

    # ------------------------------------------------------------------ searching

    def shortlist(self, query: np.ndarray, allowed: np.ndarray, eligible: int, keep: int) -> np.ndarray:
        """Up to ``keep`` rows with ``allowed[row]`` whose int8 scores are best, from the lists
        nearest the query, probed until PROBE_SHARE of the ``eligible`` (allowed) rows were seen."""
        order = np.argsort(-(self.centroids @ query))
        weighted = (query * self.scale).astype(np.float32)
        wanted = max(keep, int(PROBE_SHARE * eligible))
        rows_seen: list[np.ndarray] = []
        scores_seen: list[np.ndarray] = []
        seen = 0
        for probed, label in enumerate(order):
            size = int(self._sizes[label])
            if size:
                members = self._members[label][:size]
                ok = allowed[members]
                count = int(np.count_nonzero(ok))
                if count:
                    codes = self._codes[label][:size] if count * 2 > size else self._codes[label][:size][ok]
                    scores = codes.astype(np.float32) @ weighted
                    if codes.shape[0] != count:
                        scores = scores[ok]
                    rows_seen.append(members[ok])
                    scores_seen.append(scores)
                    seen += count
            if seen >= wanted and probed + 1 >= PROBE_MIN_LISTS:
                break
        if not rows_seen:
            return np.zeros(0, dtype=np.int64)
        rows, scores = np.concatenate(rows_seen), np.concatenate(scores_seen)
        if rows.size <= keep:
            return rows
        return rows[np.argpartition(-scores, keep - 1)[:keep]]

    # ------------------------------------------------------------------ persistence

    def state(self) -> dict[str, np.ndarray]:
        """The whole index as plain arrays (lists concatenated in order), for a snapshot."""
        sizes = self._sizes.copy()
        return {
            "version": np.array([_STATE_VERSION], dtype=np.int64),
            "centroids": self.centroids,
            "scale": self.scale,
            "trained_rows": np.array([self.trained_rows], dtype=np.int64),
            "sizes": sizes,
            "members": np.concatenate([m[:s] for m, s in zip(self._members, sizes, strict=True)]),
            "codes": np.concatenate([c[:s] for c, s in zip(self._codes, sizes, strict=True)]),
        }

    @classmethod
    def from_state(cls, state: dict[str, np.ndarray]) -> IvfIndex:
        """The index ``state()`` described (ValueError when the arrays do not fit together)."""
        if int(state["version"][0]) != _STATE_VERSION:
            raise ValueError("unknown IVF state version")
        index = cls(state["centroids"], state["scale"], int(state["trained_rows"][0]))
        sizes = np.asarray(state["sizes"], dtype=np.int64)
        members, codes = np.asarray(state["members"], dtype=np.int64), np.asarray(state["codes"], dtype=np.int8)
        if sizes.size != index.centroids.shape[0] or members.size != sizes.sum() or codes.shape != (
            members.size, index.centroids.shape[1]
        ):
            raise ValueError("IVF state arrays do not fit together")
        index._reserve_rows(int(members.max()) + 1 if members.size else 0)
        bounds = np.concatenate([[0], np.cumsum(sizes)])
        for label in range(sizes.size):
            start, stop = int(bounds[label]), int(bounds[label + 1])
            if stop > start:
                index._append(label, members[start:stop], codes[start:stop])
        return index
