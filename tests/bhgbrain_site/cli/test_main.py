"""The seed's CLI reference, run as an operator runs it: the console script on its own store."""
from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.live_server import server_env

BHGBRAIN = str(Path(sys.executable).parent / "bhgbrain")


def _fresh_config(home: Path, **extra: Any) -> Path:
    """A config whose data dir does not exist yet: the store is brand new."""
    home.mkdir(parents=True, exist_ok=True)
    config = home / "config.json"
    config.write_text(json.dumps({"data_dir": str(home / "data"), "embedding": {"provider": "none"}, **extra}))
    return config


def _cli(*args: str, env: dict[str, str] | None = None, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([BHGBRAIN, *args], capture_output=True, text=True, env=server_env(env), timeout=120, input=stdin)


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


def test_search_and_recall_as_of_and_with_history(tmp_path: Path) -> None:
    config = _fresh_config(tmp_path)

    def run(*args: str, expect: int = 0) -> Any:
        proc = _cli(f"--config={config}", *args)
        assert proc.returncode == expect, proc.stdout + proc.stderr
        return json.loads(proc.stdout)

    ids = [run("tool", "remember", json.dumps({"content": content, "key": "team/lead", "valid_from": since}))["id"]
           for content, since in (("CLI: the team lead is Ana", "2026-01-05"), ("CLI: the team lead is now Bo", "2026-03-10"))]
    ana, bo = ids
    assert [r["id"] for r in run("search", "team lead", "--mode", "fulltext")["results"]] == [bo]
    then = run("search", "team lead", "--mode", "fulltext", "--as-of", "2026-02-01")["results"]
    assert [(r["id"], r["superseded_by"]) for r in then] == [(ana, bo)]
    history = run("search", "team lead", "--mode", "fulltext", "--history")["results"]
    assert [(r["id"], r["current"]) for r in history] == [(bo, True), (ana, False)]
    for command in ("search", "recall"):
        refused = run(command, "team lead", "--as-of", "someday", expect=1)
        assert refused["error"]["code"] == "INVALID_INPUT" and "as_of" in refused["error"]["message"]


# one command of each family, each on its own brand-new store: (arguments, exit code, what stdout holds)
FRESH_STORE_COMMANDS = [
    (("health",), 0, '"components"'),
    (("token", "list"), 0, ""),
    (("token", "revoke", "bhg_nothing"), 1, ""),
    (("token", "create", "--namespace", "alice"), 0, "bhg_"),
    (("tool", "search", '{"query": "anything", "mode": "fulltext"}'), 0, '"results": []'),
    (("forget", "00000000-0000-0000-0000-000000000000"), 1, '"NOT_FOUND"'),
    (("list",), 0, '"items": []'),
    (("search", "anything", "--mode", "fulltext"), 0, '"results": []'),
    (("tier", "list", "--tier", "T0"), 0, '"items": []'),
    (("stats", "--by-tier", "--expiring"), 0, '"memory_count": 0'),
    (("audit",), 0, '"entries": []'),
    (("category", "list"), 0, '"categories": []'),
    (("gc", "--dry-run"), 0, "{"),
    (("archive", "list"), 0, '"entries": []'),
    (("backup", "list"), 0, '"backups": []'),
    (("repair", "--dry-run"), 1, '"INVALID_INPUT"'),  # needs vector_index qdrant: an answer, not a crash
    (("server", "token"), 0, ""),
    (("manage", "createsuperuser", "--noinput", "--username", "op", "--email", "op@example.com"), 0, ""),
]


@pytest.mark.parametrize(("args", "code", "shown"), FRESH_STORE_COMMANDS, ids=[" ".join(c[0][:2]) for c in FRESH_STORE_COMMANDS])
def test_every_command_family_works_on_a_brand_new_store(tmp_path: Path, args: tuple[str, ...], code: int, shown: str) -> None:
    config = _fresh_config(tmp_path)
    proc = _cli(f"--config={config}", *args, env={"DJANGO_SUPERUSER_PASSWORD": "op-password-1"})
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and "no such table" not in proc.stderr
    assert shown in proc.stdout


def test_config_is_accepted_after_the_subcommand(tmp_path: Path) -> None:
    """The seed writes `server start --stdio --config=PATH`; both places work, for every command."""
    config = _fresh_config(tmp_path)
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}}
    remember = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "remember", "arguments": {"content": "Stored over stdio with --config after start"}}}
    messages = [initialize, {"jsonrpc": "2.0", "method": "notifications/initialized"}, remember]
    server = subprocess.Popen([BHGBRAIN, "server", "start", "--stdio", f"--config={config}"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=server_env())
    assert server.stdin is not None and server.stdout is not None
    server.stdin.write("".join(json.dumps(m) + "\n" for m in messages))
    server.stdin.flush()
    replies = [json.loads(server.stdout.readline()) for _ in range(2)]
    server.stdin.close()
    server.wait(timeout=60)
    assert replies[0]["result"]["serverInfo"]["name"] == "bhgbrain"
    assert replies[1]["result"]["structuredContent"]["operation"] == "ADD", replies[1]
    assert (tmp_path / "data" / "bhgbrain.sqlite3").exists()  # the store of this config, not ~/.bhgbrain
    before = _cli(f"--config={config}", "list")
    after = _cli("list", "--limit", "5", f"--config={config}")
    spaced = _cli("list", "--config", str(config))
    for proc in (before, after, spaced):
        assert proc.returncode == 0, proc.stderr
        assert [m["content"] for m in json.loads(proc.stdout)["items"]] == ["Stored over stdio with --config after start"]
    health = _cli("health", f"--config={config}")
    assert health.returncode == 0 and json.loads(health.stdout)["memory_count"] == 1


def test_list_expiring_within(tmp_path: Path) -> None:
    """The seed's `bhgbrain list --expiring-within 7d`: what expires in that window, nothing else."""
    config = _fresh_config(tmp_path, retention={"tier_ttl": {"T3": 5}})

    def remember(content: str, tier: str) -> str:
        proc = _cli(f"--config={config}", "tool", "remember", json.dumps({"content": content, "retention_tier": tier}))
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)["id"]

    soon = remember("Scratch: the flaky login test is quarantined", "T3")  # expires in 5 days
    remember("The release train leaves every second Tuesday", "T2")  # in 90 days
    remember("All services log in UTC", "T0")  # never

    def listed(window: str) -> list[str]:
        proc = _cli(f"--config={config}", "list", "--expiring-within", window)
        assert proc.returncode == 0, proc.stderr
        return [m["id"] for m in json.loads(proc.stdout)["items"]]

    assert listed("7d") == [soon]
    assert listed("4d") == []
    assert listed("130h") == [soon]
    assert len(listed("100d")) == 2  # T0 never expires
    first = json.loads(_cli(f"--config={config}", "list", "--limit", "2").stdout)
    rest = json.loads(_cli(f"--config={config}", "list", "--limit", "2", "--cursor", first["cursor"]).stdout)
    assert len(first["items"]) == 2 and [m["id"] for m in rest["items"]] == [soon]  # the oldest comes last
    for bad in ("7x", "7", "d", "-7d", "0d", "7 d"):
        proc = _cli(f"--config={config}", "list", f"--expiring-within={bad}")
        assert proc.returncode == 1, bad
        error = json.loads(proc.stdout)["error"]
        assert error["code"] == "INVALID_INPUT" and "expiring_within" in error["message"], bad


def _on_terminal(*args: str) -> tuple[int, str, str]:
    """Run the CLI with stderr on a pseudo-terminal: (exit code, stdout, what the terminal showed)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([BHGBRAIN, *args], stdout=subprocess.PIPE, stderr=slave, text=True,
                            env=server_env({"TERM": "xterm", "COLUMNS": "120"}))
    os.close(slave)
    shown = bytearray()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            shown += chunk
        elif proc.poll() is not None:
            break
    os.close(master)
    assert proc.stdout is not None
    out = proc.stdout.read()
    return proc.wait(timeout=30), out, shown.decode(errors="replace")


def test_long_commands_draw_a_progress_bar_on_a_terminal_only(tmp_path: Path) -> None:
    config = _fresh_config(tmp_path, retention={"tier_budgets": {"T2": 2}})
    profile = json.dumps({"format": "freeform", "content": "First fact.\n\nSecond fact.\n\nThird fact."})
    code, out, terminal = _on_terminal(f"--config={config}", "tool", "import", profile)
    assert code == 0 and json.loads(out)["memories_created"] == 3
    assert "import: memories" in terminal and "3/3" in terminal
    piped = _cli(f"--config={config}", "tool", "import", profile.replace("fact", "point"))
    assert piped.returncode == 0 and json.loads(piped.stdout)["memories_created"] == 3
    assert "import" not in piped.stderr and "3/3" not in piped.stderr and "\x1b[" not in piped.stderr
    code, out, terminal = _on_terminal(f"--config={config}", "list")  # reports no progress: draws nothing
    assert code == 0 and "\x1b[" not in terminal and "list" not in terminal

    code, out, terminal = _on_terminal(f"--config={config}", "backup", "create")
    assert code == 0 and "backup create: memories" in terminal and "6/6" in terminal
    backup = json.loads(out)["path"]
    piped = _cli(f"--config={config}", "backup", "create")
    assert piped.returncode == 0 and "\x1b[" not in piped.stderr and "6/6" not in piped.stderr
    code, out, terminal = _on_terminal(f"--config={config}", "backup", "restore", backup)
    assert code == 0 and json.loads(out)["memory_count"] == 6
    assert "backup restore: restoring memories" in terminal and "6/6" in terminal
    code, out, terminal = _on_terminal(f"--config={config}", "gc")  # T2 holds 6, its budget is 2
    assert code == 0 and json.loads(out)["trimmed"]["T2"] == 4
    assert "gc: memories removed" in terminal and "4/4" in terminal
