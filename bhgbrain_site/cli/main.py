"""The ``bhgbrain`` command: server start/status/token, health, tool calls, manage."""
from __future__ import annotations

import argparse
import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bhgbrain_site.core.calls import CallContext


class CommandParser(argparse.ArgumentParser):
    """Every (sub)command accepts ``--config=PATH``, before or after the subcommand (the seed
    writes ``server start --stdio --config=PATH``); the last one given wins."""

    def __init__(self, *args: Any, config_default: str | None = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.add_argument("--config", default=config_default,
                          help="path of config.json (default: $BHGBRAIN_CONFIG or ~/.bhgbrain/config.json)")


def _setup_django(config: str | None) -> None:
    if config:
        os.environ["BHGBRAIN_CONFIG"] = os.path.abspath(os.path.expanduser(config))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bhgbrain_site.settings")
    import django
    from django.core.exceptions import ImproperlyConfigured

    try:
        django.setup()
    except ImproperlyConfigured as exc:
        print(f"bhgbrain: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def migrate_store() -> None:
    """Create or upgrade the store's tables: every command that reads or writes it works on a
    brand-new data dir. A store already up to date is left alone (checked in a few ms: `migrate`
    itself takes ≈0.15 s to find that out, on the way of every stdio session's first call)."""
    from django.core.management import call_command

    if store_is_current():
        return
    call_command("migrate", interactive=False, verbosity=0, stdout=sys.stderr)
    call_command("createcachetable", verbosity=0)  # the rate limits' table when several workers share the database


def store_is_current() -> bool:
    """Whether `migrate` and `createcachetable` would change nothing: Django's own migration plan
    (what `migrate` runs) is empty and every database cache table exists. Anything else (a new
    migration, a brand-new store, a loader error) answers False, and the commands run."""
    from django.conf import settings
    from django.db import DatabaseError, connection
    from django.db.migrations.exceptions import MigrationSchemaMissing
    from django.db.migrations.executor import MigrationExecutor

    try:
        tables = set(connection.introspection.table_names())
        executor = MigrationExecutor(connection)
        pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
    except (DatabaseError, MigrationSchemaMissing, ValueError, LookupError):
        return False  # `migrate` itself will say what is wrong
    return not pending and all(table in tables for table in _database_cache_tables(settings.CACHES))


def _database_cache_tables(caches: dict[str, dict[str, Any]]) -> list[str]:
    """The tables of the database caches `createcachetable` creates: any subclass of Django's,
    ours included (bhgbrain_site.core.shared_cache.CounterDatabaseCache: the rate limits of several workers;
    a name test missed it, so a store first served by one worker got no table and every
    request of a multi-worker server failed)."""
    from django.core.cache.backends.db import BaseDatabaseCache
    from django.utils.module_loading import import_string

    return [str(c["LOCATION"]) for c in caches.values() if issubclass(import_string(c["BACKEND"]), BaseDatabaseCache)]


# `bhgbrain manage <these>` inspect or change the migrations themselves: never migrate first
MIGRATION_COMMANDS = frozenset({"migrate", "makemigrations", "showmigrations", "sqlmigrate", "squashmigrations", "help"})


def _err(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def command_name() -> str:
    """How the user runs this command: ``bhgbrain`` when that is on PATH (pipx, uv, an activated
    venv), else the console script beside this Python (a clone's ``.venv/bin/bhgbrain``)."""
    script = Path(sys.executable).parent / "bhgbrain"
    found = shutil.which("bhgbrain")
    if found and (not script.exists() or Path(found).resolve() == script.resolve()):
        return "bhgbrain"
    if script.exists():
        with_cwd = os.path.relpath(script)
        return with_cwd if not with_cwd.startswith("..") else str(script)
    return f"{sys.executable} -m bhgbrain_site.cli.main"


def _banner(host: str, port: int, scheduler: int | None, workers: int) -> None:
    from django.conf import settings

    token_env = settings.BHGBRAIN.transport.http.bearer_token_env
    auth = f"bearer token required (${token_env})" if os.environ.get(token_env) else f"no token (${token_env} unset): loopback only"
    db = settings.DATABASES["default"]
    command = command_name()
    _err(
        "\n".join(
            [
                "BHGBrain server",
                f"  listening   http://{host}:{port}  (health: /health, MCP: /mcp, tools: POST /tool/<name>, admin: /admin/)",
                f"  workers     {workers} (pid {os.getpid()}{' supervises them' if workers > 1 else ''})",
                f"  shared      {_shared_state(workers)}",
                f"  config      {settings.BHGBRAIN_CONFIG_PATH}",
                f"  data        {settings.BHGBRAIN_DATA_DIR}",
                f"  database    {db['ENGINE'].rsplit('.', 1)[-1]}: {db['NAME']}",
                f"  logs        {settings.BHGBRAIN_LOG_DIR / 'bhgbrain.log'}",
                f"  device id   {settings.BHGBRAIN_DEVICE_ID}",
                f"  embeddings  {settings.BHGBRAIN.embedding.provider} ({settings.BHGBRAIN.embedding.model})",
                f"  scheduler   {f'django-q2 cluster (pid {scheduler})' if scheduler else 'disabled (--no-scheduler)'}",
                f"  auth        {auth}",
                f"  admin login: {command} manage createsuperuser",
                "               (or non-interactive: DJANGO_SUPERUSER_USERNAME=... DJANGO_SUPERUSER_EMAIL=... "
                f"DJANGO_SUPERUSER_PASSWORD=... {command} manage createsuperuser --noinput)",
            ]
        )
    )


def _shared_state(workers: int) -> str:
    from django.conf import settings

    if settings.REDIS_URL:
        return "Redis (rate limits, the scheduler's queue)"
    if workers > 1:
        limits = settings.CACHES["ratelimit"]  # as settings chose it for several workers (file or table)
        where = (f"a file the workers map, {Path(limits['LOCATION']).name}" if limits["BACKEND"].endswith("SharedCounterCache")
                 else f"table {limits['LOCATION']}")
        return f"the database (the scheduler's queue); rate limits: {where}; connections shared out in turn"
    return "in this process (rate limits); the database (the scheduler's queue)"


def _start_scheduler() -> subprocess.Popen[bytes]:
    """django-q2's cluster (bhgbrain_site.server.qcluster) under bhgbrain_site.server.scheduler_keeper, which
    ends the cluster's whole process group (workers included) when this server stops or dies; logs go
    to stderr. One cluster per server, however many HTTP workers it has."""
    from bhgbrain_site.server.schedules import register_schedules

    register_schedules()
    command = [sys.executable, "-m", "bhgbrain_site.server.scheduler_keeper", "--",
               sys.executable, "-m", "bhgbrain_site.server.qcluster"]
    env = {k: v for k, v in os.environ.items() if k != MULTIPROC_ENV}
    return subprocess.Popen(command, stdout=sys.stderr, env=env)


def _stop_scheduler(keeper: subprocess.Popen[bytes]) -> None:
    """Ask the keeper to stop the cluster; SIGKILL it if it has not within its grace (the cluster's
    processes then die with it, by their parent-death signal). A second Ctrl-C or SIGTERM meanwhile
    is ignored: it would only cut this bounded wait short and leave the keeper behind."""
    from bhgbrain_site.server.scheduler_keeper import GRACE_SECONDS

    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)
    keeper.send_signal(signal.SIGTERM)
    try:
        keeper.wait(timeout=GRACE_SECONDS + KEEPER_EXIT_SECONDS)
    except subprocess.TimeoutExpired:
        keeper.kill()
        keeper.wait()


KEEPER_EXIT_SECONDS = 0.5  # for the keeper itself to exit after its grace (a loaded machine)
HTTP_STOP_SECONDS = 5  # in-flight requests finish within this, then they are cancelled (uvicorn)


MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _metrics_dir(data_dir: Path) -> Path:
    """This run's folder for prometheus-client's multiprocess files (``data_dir/metrics/<pid>``),
    empty at start; folders of servers that are gone are removed."""
    root = data_dir / "metrics"
    root.mkdir(exist_ok=True)
    for old in root.iterdir():
        if old.is_dir() and (not old.name.isdigit() or int(old.name) == os.getpid() or not _pid_alive(int(old.name))):
            shutil.rmtree(old, ignore_errors=True)
    directory = root / str(os.getpid())
    directory.mkdir()
    return directory


def _flush_accesses() -> None:
    from django.db import DatabaseError

    from memories.access import tracker

    try:
        tracker.flush()
    except DatabaseError:
        logging.getLogger("bhgbrain.retention").exception("final access flush failed")


def _flushing_on_shutdown(app: Any) -> Any:
    """``app`` that writes this process's pending accesses when its server shuts down (ASGI
    lifespan). A spawned worker never runs ``atexit``: uvicorn re-raises SIGTERM after its graceful
    stop, and a worker's SIGTERM is the default one, which ends the process at once."""
    from asgiref.sync import sync_to_async

    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan":
            await app(scope, receive, send)
            return

        async def receive_flushing() -> dict[str, Any]:
            message = await receive()
            if message["type"] == "lifespan.shutdown":
                await sync_to_async(_flush_accesses, thread_sensitive=False)()
            return message

        await app(scope, receive_flushing, send)

    return wrapped


def worker_application() -> Any:
    """uvicorn's app factory: runs once in each process that serves HTTP (the server itself with
    one worker, each spawned worker with several). Each process warms its own in-process indexes
    and flushes its own access batch when it stops."""
    import multiprocessing

    if multiprocessing.parent_process() is not None:
        from bhgbrain_site.server.scheduler_keeper import die_with_parent

        die_with_parent()  # no worker keeps serving the port on its own
    from bhgbrain_site.asgi import application
    from bhgbrain_site.server.warmup import start_warming

    start_warming()
    return _flushing_on_shutdown(application)


def _exit_on_signal(signum: int, frame: object) -> None:
    raise SystemExit(0)


def _serve_stdio(config: str | None) -> int:
    """MCP over stdio: stdout carries only the protocol; logs go to stderr and the log file.

    Django starts (and migrates) in a background thread while `initialize` is answered.
    """
    import anyio

    from bhgbrain_site.core.config import ConfigError, data_dir_for, load_config

    if config:
        os.environ["BHGBRAIN_CONFIG"] = os.path.abspath(os.path.expanduser(config))
    try:
        settings_file, config_path = load_config()
    except ConfigError as exc:
        _err(f"bhgbrain: {exc}")
        return 2
    if not settings_file.transport.stdio.enabled:
        _err("transport.stdio.enabled is false: the stdio transport is disabled in the config.")
        return 2

    if settings_file.index_snapshots:  # hashed on another core while the SDK is imported and Django starts
        from memories.indexes.snapshot_digests import DIRECTORY_NAME, verify_ahead

        verify_ahead(data_dir_for(settings_file, config_path) / DIRECTORY_NAME)

    def start_django() -> None:
        from bhgbrain_site.admin_app import serve_no_admin

        serve_no_admin()  # no admin pages over stdio: their modules stay unimported
        _setup_django(None)
        migrate_store()
        from bhgbrain_site.server.warmup import start_warming

        start_warming()

    from mcp_bridge.server import serve_stdio

    anyio.run(serve_stdio, start_django, backend_options=_event_loop_options())
    _finish_snapshot_writes()
    return 0


STDIO_EXIT_WAIT = 1.8  # seconds; MCP clients close stdin, then wait a little (the Python SDK: 2 s) before terminating the server


def _finish_snapshot_writes() -> None:
    """A stdio session ended: let an index snapshot being written (after this process loaded the
    index from the database) finish, so the next session opens it instead of loading again."""
    snapshots = sys.modules.get("memories.indexes.snapshots")  # not imported: no index was ever loaded here
    if snapshots is not None and not snapshots.finish_writes(STDIO_EXIT_WAIT):
        logging.getLogger("bhgbrain").info("stdio session ended with an index snapshot still being written")


def _event_loop_options() -> dict[str, bool]:
    """uvloop when installed (it is, but on Windows), as uvicorn uses for HTTP."""
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return {}
    return {"use_uvloop": True}


def cmd_server_start(args: argparse.Namespace) -> int:
    from django.conf import settings

    from bhgbrain_site.server.security import StartupRefused, check_binding

    if args.stdio:
        return _serve_stdio(None)

    http = settings.BHGBRAIN.transport.http
    if not http.enabled:
        _err("transport.http.enabled is false: the HTTP server is disabled in the config.")
        return 2
    host, port = args.host or http.host, args.port or http.port
    try:
        for warning in check_binding(settings.BHGBRAIN, host):
            _err("!" * 72 + "\n" + warning + "\n" + "!" * 72)
    except StartupRefused as exc:
        _err(str(exc))
        return 2
    workers = settings.BHGBRAIN_WORKERS
    refusal = _workers_refusal(workers)
    if refusal:
        _err(refusal)
        return 2
    migrate_store()
    scheduler = None if args.no_scheduler else _start_scheduler()
    _banner(host, port, scheduler.pid if scheduler else None, workers)
    metrics_dir = None
    if workers > 1:
        for warning in _workers_warnings():
            _err(warning)
        # set before the workers start: each one imports prometheus-client in multiprocess mode
        metrics_dir = _metrics_dir(settings.BHGBRAIN_DATA_DIR)
        os.environ[MULTIPROC_ENV] = str(metrics_dir)
    import uvicorn

    # uvicorn shuts down gracefully on SIGTERM, then re-raises it to the previous handler:
    # make that handler an orderly exit so the scheduler child is stopped too. (With several
    # workers uvicorn's supervisor takes SIGTERM itself, stops the workers and returns.)
    signal.signal(signal.SIGTERM, _exit_on_signal)
    try:
        uvicorn.run("bhgbrain_site.cli.main:worker_application", factory=True, host=host, port=port, workers=workers,
                    log_level="warning", lifespan="on", loop=_http_loop(workers), timeout_graceful_shutdown=HTTP_STOP_SECONDS)
    except KeyboardInterrupt:
        pass  # Ctrl-C: uvicorn has stopped and raised it again; stop like on SIGTERM
    finally:
        if scheduler is not None:
            _stop_scheduler(scheduler)
        if metrics_dir is not None:
            shutil.rmtree(metrics_dir, ignore_errors=True)
    return 0


def _http_loop(workers: int) -> str:
    """uvicorn's event loop: with several workers, one that shares the connections out
    (bhgbrain_site.server.accept); with one, uvicorn's own choice (uvloop when installed)."""
    return "bhgbrain_site.server.accept:new_event_loop" if workers > 1 else "auto"


def _workers_refusal(workers: int) -> str | None:
    """Why these settings cannot run ``workers`` processes (None if they can)."""
    from django.conf import settings

    config = settings.BHGBRAIN
    if workers > 1 and config.vector_index == "qdrant" and config.qdrant.mode == "embedded":
        return ("--workers/transport.http.workers > 1 needs qdrant.mode \"external\": qdrant-client's local mode "
                "locks its folder to one process.")
    if settings.REDIS_URL:
        import redis

        try:
            redis.Redis.from_url(settings.REDIS_URL, socket_connect_timeout=5).ping()
        except redis.RedisError as exc:
            return f"redis_url/REDIS_URL is set but Redis does not answer: {exc}"
    return None


def _workers_warnings() -> list[str]:
    from django.conf import settings

    warnings = []
    if settings.DATABASES["default"]["ENGINE"].endswith("sqlite3"):
        warnings.append("note: several workers on SQLite: allowed (WAL lets processes share the file), but every write "
                        "waits for the one write lock; PostgreSQL (DATABASE_URL) is the scale-out path.")
    if settings.BHGBRAIN.vector_index == "embedded":
        warnings.append("note: vector_index \"embedded\": each worker loads its own copy of the in-process indexes "
                        "(memory and start-up time times the workers).")
    return warnings


def cmd_server_status(args: argparse.Namespace) -> int:
    from django.conf import settings

    http = settings.BHGBRAIN.transport.http
    url = f"http://{http.host}:{http.port}/health"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - fixed local URL
            body = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        body = json.loads(exc.read() or b"{}")
    except (urllib.error.URLError, OSError) as exc:
        _err(f"server not reachable at {url}: {exc}")
        return 1
    print(json.dumps(body, indent=2))
    return 0 if body.get("status") in ("healthy", "degraded") else 1


def cmd_server_token(args: argparse.Namespace) -> int:
    print(secrets.token_hex(32))
    return 0


def cmd_health(args: argparse.Namespace) -> int:
    from bhgbrain_site import registry

    snapshot = registry.call("store.health", {}, CallContext(actor="cli"))
    print(json.dumps(snapshot, indent=2))
    return 0 if snapshot["status"] != "unhealthy" else 1


def _print_result(result: Any) -> None:
    print(json.dumps(result, indent=2, ensure_ascii=False))


def cmd_tool(args: argparse.Namespace) -> int:
    from bhgbrain_site import registry
    from bhgbrain_site.core.errors import DomainError, to_envelope
    from bhgbrain_site.core.progress import terminal_progress

    try:
        arguments = json.loads(args.arguments)
        with terminal_progress(args.name) as progress:
            result = registry.call_tool(args.name, arguments, CallContext(actor="cli", progress=progress))
        _print_result(result)
    except json.JSONDecodeError:
        _err("arguments must be a JSON object")
        return 2
    except DomainError as exc:
        _print_result(to_envelope(exc)[1])
        return 1
    return 0


def cmd_forget(args: argparse.Namespace) -> int:
    args.name, args.arguments = "forget", json.dumps({"id": args.id})
    return cmd_tool(args)


def cmd_token_create(args: argparse.Namespace) -> int:
    from bhgbrain_site.core.errors import DomainError
    from memories.api_tokens import token_create

    try:
        row, plain = token_create(name=args.name, namespaces=args.namespace, read_only=args.read_only, actor="cli",
                                  write_rate_per_minute=args.write_rate)
    except DomainError as exc:
        _err(exc.message)
        return 2
    scope = ", ".join(row.namespaces) + (" (read-only)" if row.read_only else "")
    if row.write_rate_per_minute is not None:
        scope += f", at most {row.write_rate_per_minute} writing calls a minute"
    _err(f"Created token {row.name!r} for {scope}. It is shown once; store it now:")
    print(plain)
    return 0


def cmd_token_list(args: argparse.Namespace) -> int:
    from memories.api_tokens import tokens_list

    for row in tokens_list():
        state = "revoked" if row["revoked"] else ("read-only" if row["read_only"] else "read-write")
        rate = f"{row['write_rate_per_minute']}/min" if row["write_rate_per_minute"] is not None else "-"
        print(f"{row['id']}\t{row['name']}\t{row['prefix']}…\t{state}\t{rate}\t{','.join(row['namespaces'])}")
    return 0


def cmd_token_revoke(args: argparse.Namespace) -> int:
    from memories.api_tokens import token_revoke

    updated = token_revoke(prefix=args.prefix, actor="cli")
    _err(f"revoked {updated} token(s)")
    return 0 if updated else 1


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="bhgbrain", description="BHGBrain: a persistent memory server for AI agents",
                           config_default=None)
    sub = parser.add_subparsers(dest="command", required=True)

    server = sub.add_parser("server", help="run or inspect the server").add_subparsers(dest="server_command", required=True)
    start = server.add_parser("start", help="start the HTTP server and the scheduler")
    start.add_argument("--host")
    start.add_argument("--port", type=int)
    start.add_argument("--workers", type=int, choices=range(1, 65), metavar="N",
                       help="HTTP worker processes (default: transport.http.workers, 1); the scheduler runs once")
    start.add_argument("--no-scheduler", action="store_true", help="do not start the django-q2 cluster")
    start.add_argument("--stdio", action="store_true", help="speak MCP on stdin/stdout (for Claude Desktop, Codex, ...)")
    start.set_defaults(func=cmd_server_start, store=False)  # it migrates itself, after checking the binding
    server.add_parser("status", help="query /health of the running server").set_defaults(func=cmd_server_status, store=False)
    server.add_parser("token", help="print a new random bearer token").set_defaults(func=cmd_server_token, store=False)

    sub.add_parser("health", help="full health check (in-process)").set_defaults(func=cmd_health)
    token = sub.add_parser("token", help="scoped API tokens").add_subparsers(dest="token_command", required=True)
    create = token.add_parser("create", help="create a token limited to namespaces (printed once)")
    create.add_argument("--namespace", action="append", required=True, help="repeat for several namespaces")
    create.add_argument("--read-only", action="store_true")
    create.add_argument("--write-rate", type=int, metavar="N",
                        help="at most N writing calls a minute, counted by every worker together (default: no limit)")
    create.add_argument("--name", default="api-token")
    create.set_defaults(func=cmd_token_create)
    token.add_parser("list", help="list tokens (never their values)").set_defaults(func=cmd_token_list)
    revoke = token.add_parser("revoke", help="revoke by the prefix shown in `token list`")
    revoke.add_argument("prefix")
    revoke.set_defaults(func=cmd_token_revoke)
    from bhgbrain_site.cli.store import add_store_commands

    add_store_commands(sub)
    tool = sub.add_parser("tool", help="call a tool with JSON arguments, e.g. bhgbrain tool remember '{\"content\": \"...\"}'")
    tool.add_argument("name")
    tool.add_argument("arguments", nargs="?", default="{}")
    tool.set_defaults(func=cmd_tool)
    forget = sub.add_parser("forget", help="permanently delete a memory")
    forget.add_argument("id")
    forget.set_defaults(func=cmd_forget)
    sub.add_parser("manage", help="run a Django management command (e.g. createsuperuser)", add_help=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if args.command == "server" and getattr(args, "stdio", False) and not rest:
        return _serve_stdio(args.config)
    if getattr(args, "workers", None):
        os.environ["BHGBRAIN_WORKERS"] = str(args.workers)  # settings (caches, MCP) and the workers read it
    _setup_django(args.config)
    if args.command == "manage":
        from django.core.management import execute_from_command_line

        if rest and rest[0] not in MIGRATION_COMMANDS and not rest[0].startswith("-"):
            migrate_store()  # e.g. createsuperuser on a brand-new store
        execute_from_command_line(["bhgbrain manage", *rest])
        return 0
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    if getattr(args, "store", True):  # every command that reads or writes the store
        migrate_store()
    return int(args.func(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
