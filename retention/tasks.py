"""django-q2 tasks of the retention app (thin: one service call each)."""
from __future__ import annotations

from retention.cleanup import retention_cleanup


def cleanup() -> dict[str, object]:
    """The scheduled cleanup (``retention.cleanup_schedule``): archive and delete expired memories."""
    return retention_cleanup().as_dict()
