"""The sketch prefilter of the embedded vector index: the vectors centred and projected on their
top principal axes, a third as many as the model's dimensions.

A search over at least ``SKETCH_MIN_ROWS`` candidate vectors scans the sketch first (a third of
the bytes, and the scan is memory-bound), keeps a shortlist of the best, and re-scores only those
exactly. Centring does not change a query's ranking (q·(x-μ) = q·x - q·μ, the same shift for
every x), so only the discarded minor axes can reorder candidates; bench/search_latency.py
measures how often the top 10 scores still equal the exact scan's (docs/operations.md).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SKETCH_MIN_ROWS = 20_000  # below this many candidates the exact scan takes a few ms anyway
SKETCH_RATIO = 3  # sketch dimensions = model dimensions // SKETCH_RATIO (384 -> 128)
SKETCH_MIN_DIMS = 64
SKETCH_SAMPLE = 20_000  # rows the projection is fitted on
SHORTLIST_MIN = 400  # re-scored exactly: max(SHORTLIST_MIN, SHORTLIST_PER_RESULT x limit)
SHORTLIST_PER_RESULT = 40


@dataclass(frozen=True)
class Projection:
    mean: np.ndarray  # (dims,)
    basis: np.ndarray  # (dims, k), orthonormal columns
    fitted_rows: int

    def apply(self, vectors: np.ndarray) -> np.ndarray:
        return ((vectors - self.mean) @ self.basis).astype(np.float32, copy=False)


def fit_projection(vectors: np.ndarray, dims: int, fitted_rows: int) -> Projection:
    """Top principal axes of the centred vectors (eigenvectors of their scatter matrix)."""
    mean = vectors.mean(axis=0, dtype=np.float64)
    centred = vectors.astype(np.float64) - mean
    _, eigenvectors = np.linalg.eigh(centred.T @ centred)  # ascending eigenvalues
    basis = np.ascontiguousarray(eigenvectors[:, ::-1][:, :dims], dtype=np.float32)
    return Projection(mean.astype(np.float32), basis, fitted_rows)


def shortlist_size(limit: int) -> int:
    """How many candidates a search re-scores exactly (of the sketch's, or the graphs')."""
    return max(SHORTLIST_MIN, SHORTLIST_PER_RESULT * limit)


def shortlist(projection: Projection, sketch: np.ndarray, query: np.ndarray, candidates: np.ndarray, rows: int,
              limit: int) -> np.ndarray:
    """The candidates whose sketch scores best: the only ones scored exactly. ``rows``: the
    sketch's rows in use (a product over that contiguous block when most of them qualify)."""
    projected = projection.basis.T @ query
    if candidates.size * 4 >= rows:
        approx = (sketch[:rows] @ projected)[candidates]
    else:
        approx = sketch[candidates] @ projected
    keep = shortlist_size(limit)
    if keep >= candidates.size:
        return candidates
    return candidates[np.argpartition(-approx, keep - 1)[:keep]]
