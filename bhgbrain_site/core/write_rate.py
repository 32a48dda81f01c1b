"""A scoped token's write rate: at most ``write_rate_per_minute`` writing calls in any 60 s, counted
by every worker of the server together (the registry checks it before a writing operation runs).

A sliding-window counter: the calls of the current minute plus those of the previous minute
weighted by the share of it still inside the last 60 s. Both counts live in the ``ratelimit``
cache, the one the per-address rate limit uses (settings.CACHES): Redis when configured; with
several workers and no Redis a file the workers map (SQLite) or the database (PostgreSQL); this
process's memory when it is the only one serving HTTP. A call is counted (``incr``, atomic in each
of them) before it is judged and uncounted when refused, so the workers together never admit more
than the limit; a refusal says in ``retry_after`` how many seconds until one more call fits.
"""
from __future__ import annotations

import math
import time

from django.core.cache import BaseCache, caches

from bhgbrain_site.core.calls import Principal
from bhgbrain_site.core.errors import RateLimited

WINDOW = 60  # seconds


def _counted(cache: BaseCache, name: str) -> int:
    """Add one to ``name`` (opening it for two windows, so the next minute still reads it)."""
    for _ in range(3):
        cache.add(name, 0, timeout=2 * WINDOW)
        try:
            return cache.incr(name)
        except ValueError:  # it expired between add and incr: open it again
            continue
    raise RuntimeError("write rate: the counter kept expiring")


def retry_after(previous: int, current: int, limit: int, into: float) -> int:
    """Seconds until one more call fits, nobody else calling: within this minute when the previous
    minute's weight alone is in the way, else into the next, where this minute's calls weigh."""
    if current + 1 <= limit and previous > 0:
        return max(1, math.ceil(WINDOW * (1 - (limit - current - 1) / previous) - into))
    later = WINDOW * max(0.0, 1 - (limit - 1) / current) if current else 0.0
    return max(1, math.ceil(WINDOW - into + later))


def write_admit(principal: Principal, *, now: float | None = None) -> None:
    """Count one writing call of ``principal``; RATE_LIMITED (with ``retry_after``) when it would
    take the principal past its write rate. Nothing for a principal without one."""
    limit = principal.write_rate_per_minute
    if limit is None:
        return
    minute, into = divmod(time.time() if now is None else now, WINDOW)
    cache = caches["ratelimit"]
    current = f"wr:{principal.key}:{int(minute)}"
    previous = int(cache.get(f"wr:{principal.key}:{int(minute) - 1}") or 0)
    count = _counted(cache, current)
    if previous * (1 - into / WINDOW) + count <= limit:
        return
    cache.decr(current)
    raise RateLimited(f"Write rate of {principal.name!r} exceeded: {limit} writing calls per minute",
                      retry_after=retry_after(previous, count - 1, limit, into))
