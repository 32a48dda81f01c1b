"""What a process does when it starts: the admin modules it discovers, the migrations it checks."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from django.contrib import admin
from django.db.migrations.recorder import MigrationRecorder

from bhgbrain_site.cli.main import store_is_current
from memories.models import Memory
from tests.live_server import server_env

ROOT = Path(__file__).resolve().parents[2]

_DISCOVERY = textwrap.dedent("""
    import json, sys
    from bhgbrain_site import admin_app
    if sys.argv[1] == "stdio":
        admin_app.serve_no_admin()
    import django
    django.setup()
    from django.contrib import admin
    from memories.models import Memory
    at_start = "memories.admin.model_admins" in sys.modules
    import bhgbrain_site.urls  # noqa: F401 - a process that loads the URLs serves the admin
    print(json.dumps({"at_start": at_start, "after_urls": admin.site.is_registered(Memory)}))
""")


@pytest.mark.parametrize(("process", "at_start"), [("stdio", False), ("http", True)])
def test_only_a_process_serving_no_admin_skips_the_admin_modules(tmp_path: Path, process: str, at_start: bool) -> None:
    env = server_env({"BHGBRAIN_CONFIG": str(tmp_path / "config.json"), "DJANGO_SETTINGS_MODULE": "bhgbrain_site.settings",
                      "PYTHONPATH": str(ROOT)})
    done = subprocess.run([sys.executable, "-c", _DISCOVERY, process], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"at_start": at_start, "after_urls": True}


def test_the_test_process_discovered_the_admin() -> None:
    assert admin.site.is_registered(Memory)


@pytest.mark.django_db
def test_a_migrated_store_is_current_until_a_migration_is_not_recorded() -> None:
    assert store_is_current()
    MigrationRecorder.Migration.objects.filter(app="memories").order_by("-name").first().delete()
    assert not store_is_current()


@pytest.mark.django_db
def test_a_store_without_its_cache_table_is_not_current(settings) -> None:  # noqa: ANN001
    settings.CACHES = {**settings.CACHES, "ratelimit": {"BACKEND": "django.core.cache.backends.db.DatabaseCache",
                                                        "LOCATION": "bhgbrain_no_such_table"}}
    assert not store_is_current()


@pytest.mark.django_db
def test_a_store_without_the_table_of_several_workers_rate_limits_is_not_current(settings) -> None:  # noqa: ANN001
    """A store migrated while one worker served it has no rate-limit table; started with several
    workers (our counter-safe database cache) it must be brought up to date, not served as is."""
    settings.CACHES = {**settings.CACHES, "ratelimit": {"BACKEND": "bhgbrain_site.core.shared_cache.CounterDatabaseCache",
                                                        "LOCATION": "bhgbrain_no_such_table"}}
    assert not store_is_current()
