"""What the upper apps lend the governance console: services ``memories`` may not import (layers).

Wired the way indexes are (memories.funnel.register_indexer): each app calls :func:`lend` from
its ``AppConfig.ready``, so the slots are filled in every process, whether or not it serves the
admin. An empty slot hides the feature (archive) or falls back (search: Django's own search
over the model admin's ``search_fields``).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol


class ArchiveService(Protocol):
    def __call__(self, *, memory_id: str, actor: str, namespace: str | None = None) -> Any: ...


class ArchivedVersions(Protocol):
    """The archived versions of a fact: entries of ``namespace`` that lead (by ``superseded_by``,
    directly or further back) to one of ``successors``, or hold one of ``keys``."""

    def __call__(self, *, namespace: str, successors: Sequence[Any], keys: Sequence[str]) -> list[Any]: ...


class SearchService(Protocol):
    def __call__(self, *, query: str, namespaces: Sequence[str], limit: int) -> list[str]: ...


@dataclass
class ConsoleServices:
    """The lent services; read them as ``console.archive``, ``console.search`` and
    ``console.archived_versions``."""

    archive: ArchiveService | None = None  # retention: retention.archive.memory_archive
    search: SearchService | None = None  # search: search.console.memory_ids_ranked
    archived_versions: ArchivedVersions | None = None  # retention: retention.chains.archived_versions


console = ConsoleServices()


def lend(*, archive: ArchiveService | None = None, search: SearchService | None = None,
         archived_versions: ArchivedVersions | None = None) -> None:
    """Offer the console a service of an upper app (from that app's ``AppConfig.ready``)."""
    if archive is not None:
        console.archive = archive
    if archived_versions is not None:
        console.archived_versions = archived_versions
    if search is not None:
        console.search = search
