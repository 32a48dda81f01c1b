"""``python manage.py repair [--dry-run] [--device-id ID]``: rebuild this store from the shared Qdrant."""
from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from bhgbrain_site.core.contracts import DEVICE_ID_MAX
from bhgbrain_site.core.errors import DomainError
from bhgbrain_site.core.progress import terminal_progress
from memories.interop.repair import repair_from_index


class Command(BaseCommand):
    help = ("Insert the memories a shared Qdrant holds and this store lacks (vector_index \"qdrant\"), "
            "with their metadata, expiry and vectors; prints the report as JSON.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dry-run", action="store_true", help="count what would be recovered; change nothing")
        parser.add_argument("--device-id", help="only the memories this device created")

    def handle(self, *args: Any, **options: Any) -> None:
        device_id = options["device_id"]
        if device_id is not None and not 1 <= len(device_id) <= DEVICE_ID_MAX:
            raise CommandError(f"--device-id: 1 to {DEVICE_ID_MAX} characters")
        self.stderr.ending = ""  # the bar writes whole lines itself
        try:
            with terminal_progress("repair", self.stderr) as progress:  # drawn only when stderr is a terminal
                report = repair_from_index(dry_run=options["dry_run"], device_id=device_id, actor="manage.py",
                                           progress=progress)
        except DomainError as exc:
            raise CommandError(exc.message) from None
        finally:
            self.stderr.ending = "\n"
        self.stdout.write(json.dumps(report.as_dict(), indent=2))
