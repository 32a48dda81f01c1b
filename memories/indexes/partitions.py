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

SUPERSEDED_SUFFIX = "#superseded"


def partition(namespace: str, superseded: bool = False) -> str:
    """The name of the namespace's current (or superseded) partition."""
    return namespace + SUPERSEDED_SUFFIX if superseded else namespace


def partition_of(namespace: str, superseded_by: uuid.UUID | str | None) -> str:
    """The partition of a row with this namespace and successor."""
    return partition(namespace, superseded_by is not None)
