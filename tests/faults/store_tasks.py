"""Run product code in a process of its own on a test store: ``python -m tests.faults.store_tasks
TASK ARGS`` with BHGBRAIN_CONFIG (and DATABASE_URL) naming the store. Prints one JSON line.

- ``vector_sync``: the scheduler's job (memories.tasks.vector_sync), now.
- ``cleanup STOP_FILE``: the scheduler's cleanup job (retention.tasks.cleanup), at once, then again and
  again until STOP_FILE exists; prints the reports.
- ``seed NAMESPACE COUNT EXPIRED``: COUNT new T2 memories through the remember service, the first
  EXPIRED of them made due (``expires_at`` yesterday, through the write funnel); prints their ids.
"""
from __future__ import annotations

import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any


def _seed(namespace: str, count: int, expired: int) -> list[str]:
    from datetime import timedelta

    from django.db import transaction
    from django.utils import timezone

    from memories import funnel
    from memories.remember import RememberInput, memory_remember

    ids = []
    for i in range(count):
        content = f"Memo {i} of batch {uuid.uuid4().hex[:8]}: the garden shed gets a coat of paint, colour sample {i}"
        ids.append(memory_remember(data=RememberInput(content=content, namespace=namespace, collection="general"),
                                   actor="seed").id)
    now = timezone.now()
    with transaction.atomic():
        funnel.update_memories([uuid.UUID(i) for i in ids[:expired]], {"expires_at": now - timedelta(days=1)},
                               audit=None, at=now)
    return ids


def _cleanup_until(stop: Path) -> list[dict[str, Any]]:
    from retention.tasks import cleanup

    reports = [cleanup()]
    while not stop.exists():
        time.sleep(0.05)
        reports.append(cleanup())
    return reports


def main(task: str, *args: str) -> Any:
    import django

    django.setup()
    from bhgbrain_site.cli.main import migrate_store

    migrate_store()  # as every bhgbrain command does first
    if task == "vector_sync":
        from memories.tasks import vector_sync

        return vector_sync()
    if task == "cleanup":
        return _cleanup_until(Path(args[0]))
    if task == "seed":
        return _seed(args[0], int(args[1]), int(args[2]))
    raise SystemExit(f"unknown task {task}")


if __name__ == "__main__":
    print(json.dumps(main(*sys.argv[1:])))
