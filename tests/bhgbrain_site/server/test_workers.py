"""Several workers (`bhgbrain server start --workers 2`), real processes over real HTTP: on SQLite
without Redis (the rate limits in a counter file the workers share) and on PostgreSQL + Redis.

Every response names the worker that served it (``X-BHGBrain-Worker``); requests go on fresh
connections, several at a time, until both workers have answered, so each test sees both."""
from __future__ import annotations

import asyncio
import json
import sqlite3
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.live_server import LiveServer, fresh_postgres, unavailable
from tests.live_server import descendants as _descendants
from tests.live_server import process_table as _processes

REDIS = "redis://127.0.0.1:6379/0"
WORKER = "x-bhgbrain-worker"


def _redis_or_skip() -> None:
    import redis

    try:
        redis.Redis.from_url(REDIS, socket_connect_timeout=2).ping()
    except redis.RedisError as exc:
        unavailable(f"Redis is not reachable at {REDIS}: {exc}")


@pytest.fixture(params=["sqlite", "postgres+redis"], scope="module")
def backend(request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    """The server's env: its own SQLite, or a fresh PostgreSQL database and Redis."""
    if request.param == "sqlite":
        yield {}
        return
    _redis_or_skip()
    with fresh_postgres("bhgbrain_workers") as url:
        yield {"DATABASE_URL": url, "REDIS_URL": REDIS}


def _query(live: LiveServer, sql: str) -> list[tuple[Any, ...]]:
    """Read the server's database directly (SQLite file or PostgreSQL)."""
    url = live.env.get("DATABASE_URL")
    if url:
        import psycopg

        with psycopg.connect(url) as connection:
            return connection.execute(sql).fetchall()
    connection = sqlite3.connect(live.home / "bhgbrain.sqlite3", timeout=30)
    try:
        return connection.execute(sql).fetchall()
    finally:
        connection.close()


def _spread(send: Callable[[], httpx.Response], *, at_least: int, limit: int = 400) -> list[httpx.Response]:
    """Send ``send()`` 8 at a time on fresh connections until at least ``at_least`` responses came
    back and both workers answered some (at most ``limit``)."""
    responses: list[httpx.Response] = []
    with ThreadPoolExecutor(8) as pool:
        while len(responses) < limit:
            responses += list(pool.map(lambda _: send(), range(8)))
            if len(responses) >= at_least and len({r.headers[WORKER] for r in responses}) >= 2:
                break
    return responses


def _post(live: LiveServer, tool: str, body: dict[str, Any]) -> Callable[[], httpx.Response]:
    return lambda: httpx.post(f"{live.url}/tool/{tool}", json=body, timeout=60)


def _start(home: Path, env: dict[str, str], config: dict[str, Any], *, scheduler: bool = False) -> LiveServer:
    return LiveServer(home=home, config=config, env=dict(env), workers=2, scheduler=scheduler).start(timeout=180)


def test_a_rate_limit_admits_n_requests_in_all_across_two_workers(tmp_path: Path, backend: dict[str, str]) -> None:
    limit = 12
    live = _start(tmp_path, backend, {"security": {"rate_limit_rpm": limit}})
    try:
        responses = _spread(_post(live, "search", {"query": "anything"}), at_least=4 * limit)
    finally:
        live.stop()
    workers = Counter(r.headers[WORKER] for r in responses)
    assert len(workers) == 2, workers  # both workers answered: separate counters would admit up to 2N
    allowed = [r for r in responses if r.status_code == 200]
    refused = [r for r in responses if r.status_code == 429]
    assert len(allowed) == limit and len(allowed) + len(refused) == len(responses)
    # one shared counter: every remaining count from N-1 down to 0 was handed out exactly once
    assert sorted(int(r.headers["x-ratelimit-remaining"]) for r in allowed) == list(range(limit))
    assert {r.json()["error"]["code"] for r in refused} == {"RATE_LIMITED"}
    if not backend:  # SQLite: the workers count in their counter file, never under the store's write lock
        assert (live.home / "ratelimit.counters").is_file()
        tables = {name for (name,) in _query(live, "SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert "bhgbrain_cache" not in tables or _query(live, "SELECT count(*) FROM bhgbrain_cache") == [(0,)]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, backend: dict[str, str]) -> Iterator[LiveServer]:
    config = {"security": {"rate_limit_rpm": 100_000}, "observability": {"metrics_enabled": True}}
    live = _start(tmp_path_factory.mktemp("workers"), backend, config, scheduler=True)
    yield live
    live.stop()


def _search_calls(text: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "bhgbrain_tool_calls_total" and sample.labels == {"tool": "search", "outcome": "ok"}:
                return sample.value
    return 0.0


def _scrape(live: LiveServer) -> httpx.Response:
    return httpx.get(live.url + "/metrics", timeout=60)


def test_b_metrics_count_the_requests_of_both_workers(server: LiveServer) -> None:
    before = _search_calls(_scrape(server).text)
    searches = _spread(_post(server, "search", {"query": "metrics", "namespace": "metrics"}), at_least=24)
    assert {r.status_code for r in searches} == {200}
    assert len({r.headers[WORKER] for r in searches}) == 2
    scrapes = _spread(lambda: _scrape(server), at_least=2)
    assert len({s.headers[WORKER] for s in scrapes}) == 2  # whichever worker answers the scrape
    for scrape in scrapes:
        assert _search_calls(scrape.text) == before + len(searches)
    assert "# TYPE bhgbrain_tool_duration_seconds histogram" in scrapes[0].text


def test_c_a_memory_written_through_one_worker_is_found_through_the_other_at_once(server: LiveServer) -> None:
    for round_ in range(3):
        word = f"zebrafish{uuid.uuid4().hex[:8]}"
        written = httpx.post(f"{server.url}/tool/remember", timeout=60,
                             json={"content": f"Round {round_}: the {word} runbook lives in the ops wiki",
                                   "namespace": "handoff"})
        assert written.status_code == 200 and written.json()["operation"] == "ADD", written.text
        writer = written.headers[WORKER]

        def search(word: str = word) -> httpx.Response:
            return httpx.post(f"{server.url}/tool/search", json={"query": word, "namespace": "handoff"}, timeout=60)

        found = _spread(search, at_least=1)
        assert any(r.headers[WORKER] != writer for r in found)
        for response in found:  # each search, on either worker, right after the write
            assert [hit["id"] for hit in response.json()["results"]][:1] == [written.json()["id"]], response.text


def test_c_an_mcp_session_works_when_its_requests_reach_both_workers(server: LiveServer) -> None:
    import httpx2
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    served: list[str] = []

    async def record(response: httpx2.Response) -> None:
        served.append(response.headers.get(WORKER, "?"))

    async def session() -> list[Any]:
        client = httpx2.AsyncClient(timeout=httpx2.Timeout(30, read=120), event_hooks={"response": [record]},
                                    limits=httpx2.Limits(max_keepalive_connections=0))  # a new connection each request
        async with client, streamable_http_client(server.url + "/mcp", http_client=client) as streams:
            async with ClientSession(streams[0], streams[1]) as mcp:
                await mcp.initialize()
                results = [await mcp.call_tool("remember", {"content": "MCP across workers", "namespace": "mcp"})]
                for _ in range(60):  # which worker accepts a new connection is chance: call until both have served
                    results.append(await mcp.call_tool("search", {"query": "MCP across workers", "namespace": "mcp"}))
                    if len(results) > 12 and len(set(served) - {"?"}) >= 2:
                        break
                return results

    results = asyncio.run(asyncio.wait_for(session(), timeout=120))
    assert all(result.is_error is not True for result in results), results
    assert all(result.structured_content["results"] for result in results[1:])
    assert len(set(served) - {"?"}) == 2, served
    # stateless: the SDK's "Terminating session: None" after each request is not logged
    assert "Terminating session: None" not in server.stderr()


def test_c_kept_alive_connections_are_shared_out_between_the_workers(server: LiveServer) -> None:
    """Agents connecting one after another: each new connection goes to the worker serving fewer
    (bhgbrain_site.server.accept). Left to chance, 16 connections strayed 4-6 ahead on one worker in 13
    of 15 tries, and 7 of 8 once landed on one worker."""
    clients = [httpx.Client(base_url=server.url, timeout=60) for _ in range(16)]
    try:
        served = [client.get("/health").headers[WORKER] for client in clients]
        again = [client.get("/health").headers[WORKER] for client in clients]  # the same kept-alive connections
    finally:
        for client in clients:
            client.close()
    assert again == served
    lead, worst = 0, 0
    for worker in served:
        lead += 1 if worker == served[0] else -1
        worst = max(worst, abs(lead))
    assert len(set(served)) == 2 and worst <= 3 and abs(lead) <= 2, served


def test_d_the_scheduler_runs_once_not_once_per_worker(server: LiveServer) -> None:
    assert server.proc is not None
    table = _processes()
    children = {pid: table[pid][2] for pid, (ppid, _, _) in table.items() if ppid == server.proc.pid}
    workers = [pid for pid, cmd in children.items() if "spawn_main" in cmd]
    keepers = [pid for pid, cmd in children.items() if "bhgbrain_site.server.scheduler_keeper" in cmd]
    assert len(workers) == 2 and len(keepers) == 1, children
    cluster = [pid for pid in _descendants(table, server.proc.pid) if "qcluster" in table[pid][2] and pid not in keepers]
    assert cluster and len({table[pid][1] for pid in cluster}) == 1  # one django-q2 cluster: one process group
    for worker in workers:
        assert not any("qcluster" in table[pid][2] for pid in _descendants(table, worker))
    # the first vector_sync (due at start) runs exactly once
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline:
        runs = _query(server, "SELECT COUNT(*) FROM django_q_task WHERE func = 'memories.tasks.vector_sync'")[0][0]
        if runs:
            break
        time.sleep(1)
    time.sleep(3)
    assert _query(server, "SELECT COUNT(*) FROM django_q_task WHERE func = 'memories.tasks.vector_sync'")[0][0] == 1
    if server.env.get("REDIS_URL"):  # the cluster's queue is in Redis: it reports its stats there
        import redis

        keys = redis.Redis.from_url(REDIS).keys("django_q:bhgbrain-*:cluster*")
        assert keys, "no django-q2 cluster registered in Redis"


def test_e_both_workers_accesses_are_counted_and_flushed_when_they_stop(server: LiveServer) -> None:
    written = httpx.post(f"{server.url}/tool/remember", timeout=60,
                         json={"content": "The access ledger for the two-worker test", "namespace": "access"}).json()
    searches = _spread(_post(server, "search", {"query": "access ledger", "namespace": "access"}), at_least=10)
    assert all(r.json()["results"][0]["id"] == written["id"] for r in searches)
    assert len({r.headers[WORKER] for r in searches}) == 2
    server.stop()  # at once: each worker's last batch (flushed every 2 s) is written as it stops
    try:
        memory_id = uuid.UUID(written["id"]).hex  # SQLite stores a UUID as 32 hex digits; PostgreSQL reads them too
        count = _query(server, f"SELECT access_count FROM memories WHERE id = '{memory_id}'")[0][0]  # noqa: S608
        assert count == len(searches)
    finally:
        server.start(timeout=180)  # for any test that runs after this one


def test_server_start_refuses_several_workers_on_qdrant_local_mode(tmp_path: Path) -> None:
    live = LiveServer(home=tmp_path, config={"vector_index": "qdrant"}, workers=2)
    live.home.mkdir(parents=True, exist_ok=True)
    live.config_path.write_text(json.dumps(live.config))
    import subprocess

    from tests.live_server import server_env

    proc = subprocess.run(live.command(), capture_output=True, text=True, env=server_env(), timeout=120)
    assert proc.returncode == 2 and 'qdrant.mode "external"' in proc.stderr
