"""The retention app's result models (the backup tool): MCP ``outputSchema`` and OpenAPI."""
from __future__ import annotations

from typing import Literal

from pydantic import RootModel

from bhgbrain_site.core.outputs import Output, Stamp


class BackupView(Output):
    """create: the new backup."""

    path: str
    size_bytes: int
    memory_count: int
    created_at: Stamp


class BackupList(Output):
    """list: the known backups."""

    backups: list[BackupView]


class BackupRestored(Output):
    """restore: the store replaced; the one before saved as ``previous_backup``."""

    memory_count: int
    activated: Literal[True]
    previous_backup: str
    duplicates_skipped: int
    vectors_pending: int


class BackupResult(RootModel[BackupView | BackupList | BackupRestored]):
    """backup: by action (create, list, restore)."""
