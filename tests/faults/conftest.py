"""Shared by the fault tests: a store of its own for real server processes (SQLite in the home, or a
fresh PostgreSQL database), reading that store directly, and running the CLI on it."""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.live_server import fresh_postgres, server_env, unavailable

__all__ = ["unavailable", "store_backend", "query", "id_hex", "id_column", "cli", "store_task", "finished", "answer_json",
           "answer_embeddings", "QuietHandler", "serve_in_thread"]


def answer_json(handler: BaseHTTPRequestHandler, status: int, payload: dict[str, Any]) -> None:
    """A stub HTTP server's JSON answer (the fake embedding providers of these tests)."""
    raw = json.dumps(payload).encode()
    handler.send_response(status)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(len(raw)))
    handler.end_headers()
    handler.wfile.write(raw)


def answer_embeddings(handler: BaseHTTPRequestHandler, body: dict[str, Any], encode: Callable[[str], Any]) -> None:
    """An OpenAI-compatible answer to a /v1/embeddings request ``body``: each input ``encode``d."""
    texts = [body["input"]] if isinstance(body["input"], str) else body["input"]
    data = [{"object": "embedding", "index": i, "embedding": encode(text)} for i, text in enumerate(texts)]
    answer_json(handler, 200, {"object": "list", "data": data, "model": body["model"],
                               "usage": {"prompt_tokens": 0, "total_tokens": 0}})


class QuietHandler(BaseHTTPRequestHandler):
    """A stub server's request handler that logs nothing."""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the http.server API
        return


def serve_in_thread(handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    """A stub HTTP server on 127.0.0.1 (a free port), serving on a daemon thread."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture(scope="module")
def store_backend() -> Iterator[dict[str, str]]:
    """The env of the server processes a module starts: their own SQLite (each home has its own), or,
    when the suite runs on PostgreSQL (DATABASE_URL set), a fresh PostgreSQL database for the module."""
    if not os.environ.get("DATABASE_URL"):
        yield {}
        return
    with fresh_postgres("bhgbrain_faults") as url:
        yield {"DATABASE_URL": url}


def query(home: Path, env: dict[str, str], sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Read a store directly: the SQLite file in ``home``, or the PostgreSQL database of ``env``."""
    url = env.get("DATABASE_URL")
    if url:
        import psycopg

        with psycopg.connect(url) as connection:
            return connection.execute(sql.replace("?", "%s"), params).fetchall()
    connection = sqlite3.connect(home / "bhgbrain.sqlite3", timeout=30)
    try:
        return connection.execute(sql, params).fetchall()
    finally:
        connection.close()


def id_hex(memory_id: str) -> str:
    """How a memory id is compared in SQL on both engines (SQLite stores 32 hex digits)."""
    return uuid.UUID(memory_id).hex


def id_column(env: dict[str, str], column: str = "id") -> str:
    """``column`` as 32 hex digits on either engine."""
    return f"replace(CAST({column} AS text), '-', '')" if env.get("DATABASE_URL") else column


ROOT = Path(__file__).resolve().parents[2]


def cli(home: Path, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    """Start ``bhgbrain --config=HOME/config.json ARGS`` as its own process on the store."""
    command = [sys.executable, "-m", "bhgbrain_site.cli.main", f"--config={home / 'config.json'}", *args]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=server_env(env), cwd=ROOT)


def store_task(home: Path, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    """Start ``python -m tests.faults.store_tasks ARGS`` (product code in a process of its own) on
    the store whose config is HOME/config.json."""
    extra = {**env, "DJANGO_SETTINGS_MODULE": "bhgbrain_site.settings", "BHGBRAIN_CONFIG": str(home / "config.json")}
    return subprocess.Popen([sys.executable, "-m", "tests.faults.store_tasks", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=server_env(extra), cwd=ROOT)


def finished(process: subprocess.Popen[str], timeout: float = 180) -> Any:
    """Wait for a store task (a hang guard, not a timing assertion); its JSON answer."""
    stdout, stderr = process.communicate(timeout=timeout)
    assert process.returncode == 0, stderr[-3000:]
    return json.loads(stdout.strip().splitlines()[-1])
