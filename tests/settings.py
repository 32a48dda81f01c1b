"""Test settings: a throwaway config + data dir per run, then the real settings."""
from __future__ import annotations

import os
import tempfile

_TEST_HOME = tempfile.mkdtemp(prefix="bhgbrain-test-")
os.environ["BHGBRAIN_CONFIG"] = os.path.join(_TEST_HOME, "config.json")
os.environ.setdefault("BHGBRAIN_DEVICE_ID", "test-device")
os.environ.pop("BHGBRAIN_TOKEN", None)

from bhgbrain_site.settings import *  # noqa: E402,F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
BHGBRAIN_ACCESS_FLUSH_THREAD = False  # tests flush explicitly in their own thread/connection
# Off: a test's rolled-back feed rows are reused by the next test, so a snapshot written by one
# test could pass for another's store; tests/search/test_index_snapshots.py turns them on.
BHGBRAIN.index_snapshots = False  # noqa: F405
