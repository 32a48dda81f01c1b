"""Where a memory's row lives in the indexes: current facts in their namespace's partition,
superseded ones (``superseded_by`` set) in the namespace's ``#superseded`` partition.

A default search (current facts only) reads the namespace's partition and never touches a
superseded row: no filter, no extra pass. ``as_of`` and ``include_history`` read both. The
change feed moves a row between the two when it is superseded (or restored as current), as
it moves a row whose namespace changed. ``#`` cannot occur in a namespace name
(``NAMESPACE_PATTERN``), so a partition name never meets a real namespace.
"""
from __future__ import annotations

import uuid
from typing import Literal

import numpy as np

SUPERSEDED_SUFFIX = "#superseded"
# Which versions a search reads: the current facts (the default), the superseded ones, or both
# (``as_of`` and ``include_history``: both partitions in one pass, with their joint statistics).
Versions = Literal["current", "superseded", "all"]


def partition(namespace: str, superseded: bool = False) -> str:
    """The name of the namespace's current (or superseded) partition."""
    return namespace + SUPERSEDED_SUFFIX if superseded else namespace


def partitions(namespace: str, versions: Versions) -> tuple[str, ...]:
    """The partitions a search for ``versions`` of the namespace reads."""
    if versions == "all":
        return namespace, namespace + SUPERSEDED_SUFFIX
    return (partition(namespace, versions == "superseded"),)


def rows_in(codes: np.ndarray, wanted: tuple[int, ...]) -> np.ndarray:
    """A mask of the rows whose partition code (``codes``, one a row) is one of ``wanted``."""
    mask = codes == wanted[0]
    for code in wanted[1:]:
        mask |= codes == code
    return mask


def partition_of(namespace: str, superseded_by: uuid.UUID | str | None) -> str:
    """The partition of a row with this namespace and successor."""
    return partition(namespace, superseded_by is not None)
