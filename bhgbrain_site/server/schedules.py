"""The scheduler's jobs (django-q2 schedules), registered each time the server starts."""
from __future__ import annotations

from django.conf import settings


def register_schedules() -> list[str]:
    """vector_sync every 5 minutes; the retention cleanup on ``retention.cleanup_schedule`` (cron)."""
    from django_q.models import Schedule

    Schedule.objects.update_or_create(
        name="bhgbrain.vector_sync",
        defaults={"func": "memories.tasks.vector_sync", "schedule_type": Schedule.MINUTES, "minutes": 5},
    )
    Schedule.objects.update_or_create(
        name="bhgbrain.retention_cleanup",
        defaults={"func": "retention.tasks.cleanup", "schedule_type": Schedule.CRON,
                  "cron": settings.BHGBRAIN.retention.cleanup_schedule},
    )
    return ["bhgbrain.vector_sync", "bhgbrain.retention_cleanup"]
