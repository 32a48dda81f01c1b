"""``django.contrib.admin``'s app config, which leaves the apps' admin modules unimported in a
process that serves no admin pages.

Django's own ``AdminConfig`` imports every app's ``admin`` module when Django starts (the
console, unfold's mixins: about 350 modules, ≈0.35 s). A stdio MCP server never serves the
admin, and its clients wait for that start before their first call, so it calls
``serve_no_admin()`` before setting Django up. Every other process discovers them at start as
before, and the URL conf discovers them in any case (bhgbrain_site/urls.py), so a process that
skipped them still serves a complete admin if it ever loads the URLs.
"""
from __future__ import annotations

from django.contrib.admin.apps import SimpleAdminConfig

_discover = True


def serve_no_admin() -> None:
    """Before Django is set up: this process serves no admin pages, so skip their discovery."""
    global _discover
    _discover = False


class AdminConfig(SimpleAdminConfig):
    """Django's ``AdminConfig`` (the checks, then the discovery), the discovery unless
    ``serve_no_admin()`` was called."""

    def ready(self) -> None:
        super().ready()
        if _discover:
            self.module.autodiscover()
