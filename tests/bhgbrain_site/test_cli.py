"""The seed's CLI reference, run as an operator runs it: the console script on its own store."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.live_server import server_env


def test_store_commands_of_the_seed_cli(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"data_dir": str(tmp_path), "embedding": {"provider": "none"}}))
    bhgbrain = [str(Path(sys.executable).parent / "bhgbrain"), "--config", str(config)]

    def run(*args: str, stdin: str | None = None, expect: int = 0) -> Any:
        proc = subprocess.run([*bhgbrain, *args], capture_output=True, text=True, env=server_env(), timeout=120,
                              input=stdin)
        assert proc.returncode == expect, proc.stdout + proc.stderr
        return json.loads(proc.stdout)

    first = run("tool", "remember", json.dumps({"content": "CLI: the deploy window is Tuesday 10:00 UTC", "tags": ["deploy"]}))
    run("tool", "remember", json.dumps({"content": "CLI: staging lives in eu-west-1", "namespace": "infra"}))
    assert [m["id"] for m in run("list")["items"]] == [first["id"]]  # the default namespace only
    assert run("list", "--namespace", "infra")["items"][0]["summary"] == "CLI: staging lives in eu-west-1"
    assert run("search", "deploy window", "--mode", "fulltext")["results"][0]["id"] == first["id"]
    assert run("show", first["id"])["tags"] == ["deploy"]
    assert run("show", first["id"], "--namespace", "infra", expect=1)["error"]["code"] == "NOT_FOUND"
    assert run("tier", "show", first["id"])["retention_tier"] == "T2"
    changed = run("tier", "set", first["id"], "T0")
    assert changed["retention_tier"] == "T0" and changed["expires_at"] is None and changed["decay_eligible"] is False
    assert [m["id"] for m in run("tier", "list", "--tier", "T0")["items"]] == [first["id"]]
    stats = run("stats", "--by-tier", "--expiring")
    assert stats["memory_count"] == 2 and stats["counts_by_tier"]["T0"] == 1
    assert stats["namespaces"]["infra"] == [{"name": "general", "count": 1}] and stats["expiring"] == []
    assert [e["operation"] for e in run("audit", "--limit", "2")["entries"]] == ["EDIT", "ADD"]
    assert run("category", "set", "values", "--slot", "company-values", stdin="Safety first\n")["revision"] == 1
    assert run("category", "get", "values")["content"] == "Safety first"
    assert [c["name"] for c in run("category", "list")["categories"]] == ["values"]
    assert run("category", "delete", "values")["ok"] is True
    assert run("show", "not-a-uuid", expect=1)["error"]["code"] == "INVALID_INPUT"
