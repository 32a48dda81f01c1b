"""Quotas and write rates with two worker processes sharing one database (SQLite, PostgreSQL), over
real HTTP: concurrent writes from both workers never take a namespace past its quota (reject: exactly
the limit is admitted; trim: the namespace ends exactly at its limit, everything else archived), and a
token's write rate is one count for both workers."""
from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.live_server import LiveServer, fresh_postgres, server_env

MASTER = "workers-master-token"
WORKER = "x-bhgbrain-worker"
LIMIT = 10
CONFIG = {
    "security": {"rate_limit_rpm": 1_000_000},
    "namespaces": {"race": {"max_memories": LIMIT}, "race-trim": {"max_memories": LIMIT, "on_quota_exceeded": "trim"}},
}


@pytest.fixture(params=["sqlite", "postgres"], scope="module")
def backend(request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    if request.param == "sqlite":
        yield {}
        return
    with fresh_postgres("bhgbrain_quota_workers") as url:
        yield {"DATABASE_URL": url}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, backend: dict[str, str]) -> Iterator[tuple[LiveServer, str]]:
    live = LiveServer(home=tmp_path_factory.mktemp("quota-workers"), config=CONFIG,
                      env={**backend, "BHGBRAIN_TOKEN": MASTER}, workers=2)
    live.home.mkdir(parents=True, exist_ok=True)
    live.config_path.write_text(json.dumps(CONFIG))
    proc = subprocess.run([sys.executable, "-m", "bhgbrain_site.cli.main", f"--config={live.config_path}", "token",
                           "create", "--namespace", "rated", "--write-rate", "6"],
                          capture_output=True, text=True, env=server_env(live.env), timeout=120)
    assert proc.returncode == 0, proc.stderr
    live.start(timeout=180)
    yield live, proc.stdout.strip()
    live.stop()


def _burst(live: LiveServer, bodies: list[dict[str, Any]], token: str = MASTER) -> list[httpx.Response]:
    """Every body at once, 8 at a time, each on a fresh connection (so both workers take some)."""
    def send(body: dict[str, Any]) -> httpx.Response:
        return httpx.post(f"{live.url}/tool/remember", json=body, headers={"Authorization": f"Bearer {token}"},
                          timeout=120)

    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(send, bodies))


def _held(live: LiveServer, namespace: str) -> list[str]:
    response = httpx.get(f"{live.url}/api/memories/", params={"namespace": namespace, "limit": 100},
                         headers={"Authorization": f"Bearer {MASTER}"}, timeout=60)
    return [item["id"] for item in response.json()["items"]]


def _bodies(namespace: str, count: int) -> list[dict[str, Any]]:
    return [{"content": f"{namespace}: concurrent write number {i} about topic {i * 7919}", "namespace": namespace}
            for i in range(count)]


def test_concurrent_writes_on_two_workers_never_pass_a_reject_quota(server) -> None:  # noqa: ANN001
    live, _token = server
    responses = _burst(live, _bodies("race", 4 * LIMIT))
    assert len({r.headers[WORKER] for r in responses}) == 2  # both workers wrote
    outcomes = Counter(r.json().get("operation") or r.json()["error"]["code"] for r in responses)
    assert outcomes == {"ADD": LIMIT, "QUOTA_EXCEEDED": 3 * LIMIT}, outcomes
    assert len(_held(live, "race")) == LIMIT


def test_concurrent_writes_on_two_workers_trim_to_exactly_the_limit(server) -> None:  # noqa: ANN001
    live, _token = server
    responses = _burst(live, _bodies("race-trim", 4 * LIMIT))
    assert len({r.headers[WORKER] for r in responses}) == 2
    assert Counter(r.json().get("operation") for r in responses) == {"ADD": 4 * LIMIT}
    assert len(_held(live, "race-trim")) == LIMIT
    archived = httpx.get(f"{live.url}/api/archive/", params={"namespace": "race-trim", "limit": 100},
                         headers={"Authorization": f"Bearer {MASTER}"}).json()["entries"]
    assert len(archived) == 3 * LIMIT


def test_a_tokens_write_rate_is_counted_once_across_both_workers(server) -> None:  # noqa: ANN001
    live, token = server
    left = 60 - time.time() % 60
    if left < 25:  # the burst stays inside one minute of the sliding window
        time.sleep(left + 0.5)
    responses = _burst(live, [{**body, "namespace": "rated"} for body in _bodies("rated", 24)], token)
    assert len({r.headers[WORKER] for r in responses}) == 2
    statuses = Counter(r.status_code for r in responses)
    assert statuses == {200: 6, 429: 18}, statuses
    assert {r.json()["error"]["code"] for r in responses if r.status_code == 429} == {"RATE_LIMITED"}
