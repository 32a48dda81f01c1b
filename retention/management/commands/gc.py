"""``python manage.py gc [--consolidate]``: run the retention cleanup now."""
from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from retention.cleanup import retention_cleanup


class Command(BaseCommand):
    help = "Archive and delete expired memories (with --consolidate: first mark long-unused ones stale)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--consolidate", action="store_true", help="mark stale memories first (seed: gc --consolidate)")
        parser.add_argument("--dry-run", action="store_true", help="count what would go; change nothing")
        parser.add_argument("--tier", choices=("T1", "T2", "T3"), help="only this tier")

    def handle(self, *args: Any, **options: Any) -> None:
        report = retention_cleanup(consolidate=options["consolidate"], dry_run=options["dry_run"], tier=options["tier"])
        self.stdout.write(json.dumps(report.as_dict(), indent=2))
