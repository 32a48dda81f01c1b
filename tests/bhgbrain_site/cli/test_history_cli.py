"""`bhgbrain remember --key/--supersedes/--valid-from` and `bhgbrain history ID`, run as an
operator runs them: the console script on its own store."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.live_server import fresh_postgres, server_env


@pytest.fixture
def backend() -> Iterator[dict[str, str]]:
    """The CLI's store: its own SQLite, or a fresh PostgreSQL database when the suite runs on it."""
    if not os.environ.get("DATABASE_URL"):
        yield {}
        return
    with fresh_postgres("bhgbrain_history_cli") as url:
        yield {"DATABASE_URL": url}


def test_remember_and_history_commands(tmp_path: Path, backend: dict[str, str]) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"data_dir": str(tmp_path), "embedding": {"provider": "none"}}))
    bhgbrain = [str(Path(sys.executable).parent / "bhgbrain"), "--config", str(config)]

    def run(*args: str, expect: int = 0) -> Any:
        proc = subprocess.run([*bhgbrain, *args], capture_output=True, text=True, env=server_env(backend),
                              timeout=120)
        assert proc.returncode == expect, proc.stdout + proc.stderr
        return json.loads(proc.stdout)

    kong = run("remember", "The API gateway is Kong", "--key", "infra/gateway", "--valid-from", "2026-01-05",
               "--tag", "gateway")
    envoy = run("remember", "We moved the API gateway to Envoy", "--key", "INFRA/gateway", "--valid-from",
                "2026-04-01T09:00:00Z")
    assert (envoy["operation"], envoy["key"], envoy["superseded"]) == ("ADD", "infra/gateway", [kong["id"]])
    note = run("remember", "Gateway runbook: restart the pods one by one", "--namespace", "ops")
    again = run("remember", "Gateway runbook: drain, then restart the pods one by one", "--namespace", "ops",
                "--supersedes", note["id"])
    assert again["superseded"] == [note["id"]]
    history = run("history", kong["id"])
    assert [v["id"] for v in history["versions"]] == [kong["id"], envoy["id"]]
    assert history["versions"][0]["valid_until"] == "2026-04-01T09:00:00Z"
    assert history["versions"][0]["superseded"]["by"] == "cli" and history["versions"][0]["tags"] == ["gateway"]
    assert [v["id"] for v in run("history", again["id"], "--namespace", "ops")["versions"]] == [note["id"], again["id"]]
    assert run("history", kong["id"], "--namespace", "ops", expect=1)["error"]["code"] == "NOT_FOUND"
    assert run("history", "nope", expect=1)["error"]["code"] == "INVALID_INPUT"
    assert run("remember", "x", "--valid-from", "yesterday-ish", expect=1)["error"]["code"] == "INVALID_INPUT"
    assert run("remember", "y", "--supersedes", kong["id"], "--namespace", "ops", expect=1)["error"]["code"] == "NOT_FOUND"
