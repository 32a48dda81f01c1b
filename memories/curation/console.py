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


class SearchService(Protocol):
    def __call__(self, *, query: str, namespaces: Sequence[str], limit: int) -> list[str]: ...


@dataclass
class ConsoleServices:
    """The lent services; read them as ``console.archive`` and ``console.search``."""

    archive: ArchiveService | None = None  # retention: retention.archive.memory_archive
    search: SearchService | None = None  # search: search.console.memory_ids_ranked


console = ConsoleServices()


def lend(*, archive: ArchiveService | None = None, search: SearchService | None = None) -> None:
    """Offer the console a service of an upper app (from that app's ``AppConfig.ready``)."""
    if archive is not None:
        console.archive = archive
    if search is not None:
        console.search = search
