"""How fast an MCP client gets `initialize` answered over stdio, on a large store.

    .venv/bin/python bench/mcp_initialize.py [--size 100000] [--runs 5] [--primed]

Builds a store of --size memories (bulk-loaded like bench/search_latency.py: real e5 vectors
of generated sentences), then launches `bhgbrain --config=… server start --stdio` the way an
MCP client does, --runs times, and reports: process start → `initialize` answered, → first
`tools/list`, → first `recall` (which loads the model and the vector index), and the server
process's RSS after `initialize` and after the first `recall`. Prints p50/max. With
``--primed`` the store gets its index snapshots (and vector graphs) written first, the state a
server or any session that ran a few seconds leaves; without it the first sessions load the
indexes from the database.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

if TYPE_CHECKING:
    from mcp.client.stdio import StdioServerParameters


def build_store(home: Path, size: int, seed: int, *, primed: bool = False) -> None:
    import search_latency as sl

    sl.setup_django(home, None)
    from memories.embeddings import get_embedder

    embedder = get_embedder()
    sentences = sl.make_sentences(3000, random.Random(seed))
    vectors = sl.sentence_vectors(sentences, seed, embedder)
    seconds = sl.bulk_load(size, ["global"], sentences, vectors.vectors, embedder, seed)
    print(f"store: {size} memories bulk-loaded in {seconds:.1f} s", flush=True)
    if primed:
        write_snapshots(home)


def write_snapshots(home: Path, namespace: str = "global") -> float:
    """Leave the store as a process that ran a while leaves it: both index snapshots written,
    with the vector graphs a large search in ``namespace`` builds (without this, the first
    sessions load the indexes from the database and may end before their background snapshot
    write does, and every process builds the same graphs). Seconds spent."""
    from memories.indexes.embedded import EmbeddedVectorIndex, get_vector_index
    from search.bm25 import text_index
    from search.selectors import memories_search

    started = time.perf_counter()
    memories_search(query="prime the indexes", namespace=namespace, collection=None, mode="hybrid", limit=5)
    vectors = get_vector_index()
    if isinstance(vectors, EmbeddedVectorIndex) and vectors.ann is not None:
        vectors.ann.wait()
    for index in (vectors, text_index._index):  # noqa: SLF001 - the process's text index
        thread = index.snapshot_keeper.thread
        if thread is not None:
            thread.join()
        index.save_snapshot()
    seconds = time.perf_counter() - started
    names = sorted(path.name for path in (home / "index-snapshots").iterdir())
    print(f"store: snapshots written in {seconds:.1f} s: {names}", flush=True)
    return seconds


def stdio_pids(config: Path) -> list[int]:
    """The MCP stdio server processes started with ``config`` (found by their command line)."""
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if f"--config={config}".encode() in argv and b"--stdio" in argv:
            pids.append(int(cmdline.parent.name))
    return pids


def server_rss_mib(config: Path) -> float:
    """VmRSS of a stdio server started with ``config``."""
    for pid in stdio_pids(config):
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            continue
    return float("nan")


def stdio_parameters(config: Path) -> StdioServerParameters:
    """The command line an MCP client (Claude Desktop) runs: ``bhgbrain --config=… server start --stdio``."""
    from mcp.client.stdio import StdioServerParameters

    script = Path(sys.executable).with_name("bhgbrain")
    return StdioServerParameters(command=str(script), args=[f"--config={config}", "server", "start", "--stdio"])


async def one_session(config: Path) -> dict[str, float]:
    from mcp import ClientSession
    from mcp.client.stdio import stdio_client

    params = stdio_parameters(config)
    started = time.perf_counter()
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            initialized = time.perf_counter() - started
            rss_initialized = server_rss_mib(config)
            await session.list_tools()
            listed = time.perf_counter() - started
            result = await session.call_tool("recall", {"query": "when is the next deploy of the mobile app?"})
            recalled = time.perf_counter() - started
            assert result.is_error is not True, result
            rss_recalled = server_rss_mib(config)
    return {"initialize": initialized, "tools_list": listed, "first_recall": recalled,
            "rss_mib_after_initialize": rss_initialized, "rss_mib_after_first_recall": rss_recalled}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--json")
    parser.add_argument("--primed", action="store_true",
                        help="write the index snapshots (and graphs) before the sessions, as a server that ran a while leaves them")
    args = parser.parse_args()
    home = Path(tempfile.mkdtemp(prefix="bhgbrain-mcp-init-"))
    build_store(home, args.size, args.seed, primed=args.primed)
    runs = [asyncio.run(one_session(home / "config.json")) for _ in range(args.runs)]
    print(f"{'seconds from process start (RSS in MiB)':28} {'p50':>7} {'max':>7}")
    summary = {}
    for key in ("initialize", "tools_list", "first_recall", "rss_mib_after_initialize", "rss_mib_after_first_recall"):
        values = [r[key] for r in runs]
        summary[key] = {"p50": statistics.median(values), "max": max(values)}
        print(f"{key:28} {summary[key]['p50']:7.2f} {summary[key]['max']:7.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"size": args.size, "runs": runs, "summary": summary}, indent=2))


if __name__ == "__main__":
    main()
