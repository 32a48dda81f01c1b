"""Throughput and latency over HTTP with 1 and 2 server workers, as agents meet them.

A store of ``--size`` memories is bulk-loaded (real e5 sentence vectors, cached, as
bench/search_latency.py does), then for each worker count a real server is started
(``bhgbrain server start --workers N --no-scheduler``), every worker warmed up, and
``--concurrency`` clients send ``POST /tool/search`` (hybrid, natural-language questions, limit
10) — plus one ``remember`` in every ``--write-every`` requests — for ``--duration`` seconds.
Printed: requests/s, p50/p95/p99 of the whole HTTP round trip, errors, requests each worker
answered (``X-BHGBrain-Worker``), RSS of each worker after the run, the load average.

Usage (from the repository root)::

    .venv/bin/python bench/workers_load.py --size 10000 --workers 1,2
    .venv/bin/python bench/workers_load.py --database-url postgres://postgres@127.0.0.1:5432/postgres

No assertions about timings.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO_ROOT), str(REPO_ROOT / "bench")]

import httpx  # noqa: E402
import search_latency as lat  # noqa: E402 - bulk loading, Django set-up and machine facts are shared
from machine import load_average  # noqa: E402


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=10000, help="memories in the store; default 10000")
    parser.add_argument("--workers", default="1,2", help="worker counts to compare; default 1,2")
    parser.add_argument("--concurrency", type=int, default=8, help="clients sending at once; default 8")
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of load per worker count")
    parser.add_argument("--write-every", type=int, default=10, help="one remember in every N requests (0: none)")
    parser.add_argument("--no-keepalive", action="store_true",
                        help="a new connection per request (by default each client keeps one, as an agent does)")
    parser.add_argument("--namespaces", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--sentences", type=int, default=3000)
    parser.add_argument("--database-url", default=None, help="postgres://… (default: SQLite in a temp dir)")
    return parser.parse_args()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def descendants(pid: int) -> list[int]:
    found, pending = [], [pid]
    while pending:
        current = pending.pop()
        for task in Path(f"/proc/{current}/task").glob("*"):
            try:
                children = [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                continue
            found.extend(children)
            pending.extend(children)
    return found


def rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def start_server(home: Path, workers: int, env: dict[str, str], *,
                 scheduler: bool = False) -> tuple[subprocess.Popen[bytes], str]:
    """A real ``bhgbrain server start`` in its own process group (stop it with :func:`stop_server`)."""
    port = free_port()
    command = [sys.executable, "-m", "bhgbrain_site.cli.main", f"--config={home / 'config.json'}", "server", "start",
               f"--port={port}", f"--workers={workers}"] + ([] if scheduler else ["--no-scheduler"])
    log_path = home / f"server-{workers}.log"
    log = open(log_path, "wb")  # noqa: SIM115 - lives as long as the server
    proc = subprocess.Popen(command, stdout=log, stderr=log, env=env, cwd=REPO_ROOT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(log_path.read_text())
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        time.sleep(0.3)
    raise RuntimeError("the server did not answer /health in 120 s")


def stop_server(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server's process group (workers, scheduler), SIGKILL after 30 s."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


async def warm_up(url: str, workers: int, questions: list[str], namespaces: list[str]) -> None:
    """Until every worker has answered a search of every namespace (each loads its indexes)."""
    seen: set[tuple[str, str]] = set()
    deadline = time.monotonic() + 180
    while len(seen) < workers * len(namespaces) and time.monotonic() < deadline:
        async with httpx.AsyncClient(timeout=60) as client:  # a new connection may reach another worker
            tasks = [client.post(f"{url}/tool/search", json={"query": random.choice(questions), "namespace": ns,
                                                             "mode": "hybrid"}) for ns in namespaces for _ in range(2)]
            for ns_response in await asyncio.gather(*tasks):
                body = json.loads(ns_response.request.content)
                seen.add((ns_response.headers.get("x-bhgbrain-worker", "?"), body["namespace"]))


async def load(url: str, args: argparse.Namespace, questions: list[str], texts: list[str],
               namespaces: list[str]) -> dict[str, object]:
    latencies: list[float] = []
    errors: Counter[str] = Counter()
    per_worker: Counter[str] = Counter()
    stop_at = time.monotonic() + args.duration
    counter = 0

    async def client_loop(index: int) -> None:
        nonlocal counter
        rng = random.Random(args.seed + index)
        limits = httpx.Limits(max_connections=1, max_keepalive_connections=0 if args.no_keepalive else 1)
        async with httpx.AsyncClient(timeout=60, limits=limits) as client:
            while time.monotonic() < stop_at:
                counter += 1
                namespace = rng.choice(namespaces)
                if args.write_every and counter % args.write_every == 0:
                    tool, body = "remember", {"content": f"{rng.choice(texts)} (load {counter})", "namespace": namespace}
                else:
                    tool, body = "search", {"query": rng.choice(questions), "namespace": namespace, "mode": "hybrid",
                                            "limit": 10}
                started = time.perf_counter()
                try:
                    response = await client.post(f"{url}/tool/{tool}", json=body)
                except httpx.HTTPError as exc:
                    errors[type(exc).__name__] += 1
                    continue
                latencies.append((time.perf_counter() - started) * 1e3)
                per_worker[response.headers.get("x-bhgbrain-worker", "?")] += 1
                if response.status_code != 200:
                    errors[str(response.status_code)] += 1

    started = time.perf_counter()
    await asyncio.gather(*(client_loop(i) for i in range(args.concurrency)))
    elapsed = time.perf_counter() - started
    ordered = sorted(latencies)

    def pct(p: float) -> float:
        return ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))] if ordered else float("nan")

    return {"requests": len(latencies), "per_s": len(latencies) / elapsed, "p50": pct(0.5), "p95": pct(0.95),
            "p99": pct(0.99), "errors": dict(errors), "per_worker": dict(per_worker)}


def preload_store(home: Path, args: argparse.Namespace, *, metrics: bool = False) -> tuple[random.Random, list[str], list[str]]:
    """A server config without a rate limit (measure the server, not the limiter), and ``args.size``
    memories bulk-loaded over ``args.namespaces``: the seeded rng, the sentences, the namespaces."""
    config = json.loads((home / "config.json").read_text())
    config.setdefault("security", {})["rate_limit_rpm"] = 1_000_000
    if metrics:
        config.setdefault("observability", {})["metrics_enabled"] = True
    (home / "config.json").write_text(json.dumps(config))
    embedder, _ = lat.load_model()
    rng = random.Random(args.seed)
    sentences = lat.make_sentences(args.sentences, rng)
    vectors = lat.sentence_vectors(sentences, args.seed, embedder).vectors
    namespaces = lat.namespaces_for(args.size, args.namespaces)
    lat.bulk_load(args.size, namespaces, sentences, vectors, embedder, args.seed)
    return rng, sentences, namespaces


def run(args: argparse.Namespace, home: Path, db_url: str | None) -> None:
    lat.setup_django(home, db_url)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per request
    rng, sentences, namespaces = preload_store(home, args)
    from django.db import connections

    connections.close_all()
    questions = lat.make_questions(200, rng)
    texts = lat.make_sentences(500, random.Random(args.seed + 1), exclude=sentences)
    print(f"machine: {lat.machine_info()}")
    print(f"store: {args.size} memories in {len(namespaces)} namespaces ({lat.database_description()}); "
          f"{args.concurrency} clients ({'a new connection per request' if args.no_keepalive else 'one kept-alive connection each'})"
          f" for {args.duration:.0f} s, hybrid search"
          + (f" + 1 remember in {args.write_every}" if args.write_every else ""))
    print(f"  {'workers':<8}{'req/s':>8}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}{'errors':>8}  requests per worker; "
          "RSS per worker (MiB); load")
    env = {k: v for k, v in os.environ.items() if k not in ("BHGBRAIN_WORKERS", "PROMETHEUS_MULTIPROC_DIR")}
    for workers in [int(w) for w in args.workers.split(",")]:
        proc, url = start_server(home, workers, env)
        try:
            asyncio.run(warm_up(url, workers, questions, namespaces))
            result = asyncio.run(load(url, args, questions, texts, namespaces))
            pids = sorted(int(p) for p in result["per_worker"] if p.isdigit())  # X-BHGBrain-Worker: the pid
            rss = ", ".join(f"{rss_mib(p):.0f}" for p in pids)
            others = [p for p in [proc.pid, *descendants(proc.pid)] if p not in pids]
            rss += f" + {sum(rss_mib(p) for p in others):.0f} in {len(others)} other process(es)" if others else ""
            spread = ", ".join(str(n) for _, n in sorted(result["per_worker"].items()))
            print(f"  {workers:<8}{result['per_s']:>8.1f}{result['p50']:>9.1f}{result['p95']:>9.1f}{result['p99']:>9.1f}"
                  f"{sum(result['errors'].values()):>8}  [{spread}]; [{rss}]; {load_average()}")
            if result["errors"]:
                print(f"    errors: {result['errors']}")
        finally:
            stop_server(proc)


def main() -> int:
    args = parse_args()
    home = Path(tempfile.mkdtemp(prefix="bhgbrain-workers-"))
    try:
        with lat.database_url(args.database_url) as db_url:
            run(args, home, db_url)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
