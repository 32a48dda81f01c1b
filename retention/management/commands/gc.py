"""``python manage.py gc [--consolidate] [--dry-run] [--tier T] [--force-compact]``: run the retention
cleanup now (expiry, budgets, compaction)."""
from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from bhgbrain_site.core.progress import terminal_progress
from retention.cleanup import retention_cleanup


class Command(BaseCommand):
    help = ("Archive and delete expired memories, trim tiers over budget, compact when due "
            "(with --consolidate: first mark long-unused ones stale).")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--consolidate", action="store_true", help="mark stale memories first (seed: gc --consolidate)")
        parser.add_argument("--dry-run", action="store_true", help="count what would go; change nothing")
        parser.add_argument("--tier", choices=("T1", "T2", "T3"), help="only this tier")
        parser.add_argument("--force-compact", action="store_true",
                            help="compact the database (and Qdrant) even below retention.compaction_deleted_threshold")

    def handle(self, *args: Any, **options: Any) -> None:
        self.stderr.ending = ""  # the bar writes whole lines itself
        try:
            with terminal_progress("gc", self.stderr) as bar:  # drawn only when stderr is a terminal
                report = retention_cleanup(consolidate=options["consolidate"], dry_run=options["dry_run"],
                                           tier=options["tier"], force_compact=options["force_compact"],
                                           progress=bar)
        finally:
            self.stderr.ending = "\n"
        self.stdout.write(json.dumps(report.as_dict(), indent=2))
