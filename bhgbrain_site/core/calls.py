"""Who is calling and what watches a call: the types every layer's services and interfaces share.

Services take a ``Principal`` or a ``progress`` callback from here, never from the operation
registry (bhgbrain_site.registry), which is the interfaces' dispatcher.
"""
from __future__ import annotations

from dataclasses import dataclass

from bhgbrain_site.core.errors import Forbidden
from bhgbrain_site.core.progress import Progress


@dataclass(frozen=True)
class Principal:
    """Who may do what: every namespace (``namespaces`` None) or a set, optionally read-only, and
    how many writing calls a minute (``write_rate_per_minute``, None: no limit), counted under
    ``key`` (a scoped token's id) by every worker together."""

    name: str
    namespaces: frozenset[str] | None
    read_only: bool = False
    write_rate_per_minute: int | None = None
    key: str = ""

    def default_namespace(self, configured: str) -> str:
        """The configured default, unless this principal may not use it: then its first namespace."""
        if self.namespaces is None or configured in self.namespaces or not self.namespaces:
            return configured
        return sorted(self.namespaces)[0]

    def check(self, namespace: str, *, writes: bool) -> None:
        if self.namespaces is not None and namespace not in self.namespaces:
            raise Forbidden(f'This token may not access namespace "{namespace}"')
        if writes and self.read_only:
            raise Forbidden("This token is read-only")


FULL_ACCESS = Principal(name="full", namespaces=None)


@dataclass(frozen=True)
class CallContext:
    """Who is calling: ``actor`` for the audit log (``client_id``), ``principal`` for access,
    ``progress`` for long operations (None: nobody watches)."""

    actor: str
    principal: Principal = FULL_ACCESS
    progress: Progress | None = None
