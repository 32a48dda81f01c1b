"""The seed's store commands of the ``bhgbrain`` CLI: list, search, show, tier, stats, audit,
category, gc, archive, backup, and repair; ``store migrate`` (into PostgreSQL and Qdrant) and
``namespace quota`` (show or set a namespace's quota).

Each turns its arguments into one operation call (bhgbrain_site.registry) and prints the
result as JSON; errors print the envelope and exit 1. They run in-process on the configured
store (no server needed, migrated first by ``bhgbrain_site.cli.main``), as the local user
(full access). Long ones draw a progress bar on a terminal (bhgbrain_site.core.progress).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import Any

from bhgbrain_site.core.calls import CallContext
from bhgbrain_site.core.contracts import SLOTS, TIERS


def _ns(args: argparse.Namespace) -> str:
    from django.conf import settings

    return args.namespace or settings.BHGBRAIN.defaults.namespace


def _run(operation: str, arguments: dict[str, Any], label: str | None = None) -> int:
    """Run the operation (a bar labelled ``label`` on a terminal if it reports progress) and
    print its result, or the error envelope."""
    from bhgbrain_site import registry
    from bhgbrain_site.core.errors import to_envelope
    from bhgbrain_site.core.progress import terminal_progress

    try:
        with terminal_progress(label or operation) as progress:
            result, code = registry.call(operation, arguments, CallContext(actor="cli", progress=progress)), 0
    except Exception as exc:  # noqa: BLE001 - the envelope, as every interface answers (a bug: INTERNAL, logged with its traceback)
        result, code = to_envelope(exc)[1], 1
    print(json.dumps(result, indent=2, ensure_ascii=False, default=str))
    return code


def cmd_list(args: argparse.Namespace) -> int:
    arguments: dict[str, Any] = {"namespace": _ns(args), "limit": args.limit}
    if args.cursor:
        arguments["cursor"] = args.cursor
    if args.expiring_within is not None:
        arguments["expiring_within"] = args.expiring_within  # the operation validates it ("7d", "12h")
    return _run("memories.list", arguments)


def _time_scope(args: argparse.Namespace) -> dict[str, Any]:
    """--as-of and --history as the operations' as_of and include_history (validated there)."""
    scope: dict[str, Any] = {"as_of": args.as_of} if args.as_of else {}
    return {**scope, "include_history": True} if args.history else scope


def cmd_search(args: argparse.Namespace) -> int:
    return _run("search", {"query": args.query, "namespace": _ns(args), "mode": args.mode, "limit": args.limit,
                           **_time_scope(args)})


def cmd_recall(args: argparse.Namespace) -> int:
    arguments: dict[str, Any] = {"query": args.query, "namespace": _ns(args)}
    for name in ("limit", "min_score"):  # absent: the configured defaults
        if getattr(args, name) is not None:
            arguments[name] = getattr(args, name)
    return _run("recall", {**arguments, **_time_scope(args)})


def cmd_show(args: argparse.Namespace) -> int:
    return _run("memories.get", {"id": args.id, "namespace": _ns(args)})


def cmd_history(args: argparse.Namespace) -> int:
    return _run("memories.history", {"id": args.id, "namespace": _ns(args)})


def cmd_remember(args: argparse.Namespace) -> int:
    arguments: dict[str, Any] = {"content": args.content, "namespace": _ns(args), "source": "cli"}
    optional = {"collection": args.collection, "key": args.key, "valid_from": args.valid_from, "type": args.type,
                "retention_tier": args.tier}
    arguments.update({name: value for name, value in optional.items() if value is not None})
    if args.tag:
        arguments["tags"] = args.tag
    if args.supersedes:
        arguments["supersedes"] = args.supersedes
    return _run("remember", arguments)


def cmd_tier(args: argparse.Namespace) -> int:
    if args.tier_command == "show":
        return _run("memories.tier", {"id": args.id, "namespace": _ns(args)})
    if args.tier_command == "set":
        return _run("memories.set_tier", {"id": args.id, "tier": args.tier, "namespace": _ns(args)})
    page = {"namespace": _ns(args), "limit": args.limit, "tier": args.tier}
    return _run("memories.list", {**page, "cursor": args.cursor} if args.cursor else page)


def cmd_stats(args: argparse.Namespace) -> int:
    return _run("store.stats", {"by_tier": args.by_tier, "expiring": args.expiring})


def cmd_audit(args: argparse.Namespace) -> int:
    arguments: dict[str, Any] = {"namespace": _ns(args), "limit": args.limit}
    return _run("audit.list", {**arguments, "operation": args.operation} if args.operation else arguments)


def cmd_category(args: argparse.Namespace) -> int:
    arguments: dict[str, Any] = {"action": args.category_command, "namespace": _ns(args)}
    if args.category_command != "list":
        arguments["name"] = args.name
    if args.category_command == "set":
        content = args.content if args.content is not None else sys.stdin.read()  # the seed's interactive set
        arguments.update(slot=args.slot, content=content)
    return _run("category", arguments)


def cmd_gc(args: argparse.Namespace) -> int:
    arguments: dict[str, Any] = {"consolidate": args.consolidate, "dry_run": args.dry_run, "force_compact": args.force_compact}
    return _run("retention.cleanup", {**arguments, "tier": args.tier} if args.tier else arguments, label="gc")


def cmd_archive(args: argparse.Namespace) -> int:
    """archive list | search QUERY | restore ID, in one namespace (default: the configured one)."""
    if args.archive_command == "restore":
        return _run("archive.restore", {"id": args.id, "namespace": _ns(args), "tier": args.tier})
    arguments: dict[str, Any] = {"namespace": _ns(args), "limit": args.limit}
    return _run("archive.list", {**arguments, "query": args.query} if args.archive_command == "search" else arguments)


def cmd_backup(args: argparse.Namespace) -> int:
    """backup create | list | restore PATH; the CLI runs on the server, so restore reads any path."""
    if args.backup_command == "restore":
        return _run("backups.restore_file", {"path": os.path.abspath(args.path)}, label="backup restore")
    return _run("backup", {"action": args.backup_command}, label=f"backup {args.backup_command}")


def cmd_repair(args: argparse.Namespace) -> int:
    """Rebuild this store from the shared Qdrant (the repair tool)."""
    arguments: dict[str, Any] = {"dry_run": args.dry_run}
    return _run("repair", {**arguments, "device_id": args.device_id} if args.device_id else arguments)


def cmd_store(args: argparse.Namespace) -> int:
    """store migrate: copy this store into PostgreSQL (and Qdrant), then verify the copy.

    Not an operation of the registry: it works on databases and folders named on the server's
    command line and runs for minutes, so it is offered by the CLI only (bhgbrain_site.cli.store_migrate)."""
    from bhgbrain_site.cli.store_migrate import store_migrate
    from bhgbrain_site.core.errors import DomainError, to_envelope

    try:
        report = store_migrate(target_url=args.to_database, vector_index=args.to_vector_index,
                               qdrant_url=args.qdrant_url, qdrant_path=args.qdrant_path,
                               batch_size=args.batch_size, samples=args.samples)
    except DomainError as exc:
        print(json.dumps(to_envelope(exc)[1], indent=2, ensure_ascii=False))
        return 1
    print(json.dumps(report, indent=2, ensure_ascii=False, default=str))
    return 0 if report.get("ok") else 1


def _limit(text: str) -> int | None:
    """A limit as typed: a whole number of at least 1, or "none" (no limit)."""
    if text.lower() in ("none", "null", "unlimited"):
        return None
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: a whole number of at least 1, or none")
    return int(text)


def _max_memories(text: str) -> int | str:
    """``--max-memories``: a number, or "none" kept as a word (an option not given is None)."""
    return _limit(text) or "none"


def _tier_budget(text: str) -> tuple[str, int | None]:
    """``T2=500`` or ``T2=none``."""
    tier, _, value = text.partition("=")
    if tier.upper() not in TIERS or not value:
        raise argparse.ArgumentTypeError(f"{text!r}: TIER=N or TIER=none, TIER one of {', '.join(TIERS)}")
    return tier.upper(), _limit(value)


def cmd_namespace_quota(args: argparse.Namespace) -> int:
    """namespace quota [NS] [--max-memories N|none] [--tier T2=N|none]... [--policy reject|trim] [--reset]."""
    if args.namespace is None:
        return _run("namespaces.quotas", {})
    arguments: dict[str, Any] = {"namespace": args.namespace}
    if args.max_memories is not None:
        arguments["max_memories"] = None if args.max_memories == "none" else args.max_memories
    if args.tier:
        arguments["tier_budgets"] = dict(args.tier)
    if args.policy:
        arguments["on_quota_exceeded"] = args.policy
    if args.reset:
        arguments["reset"] = True
    return _run("namespaces.set_quota" if len(arguments) > 1 else "namespaces.quota", arguments)


def _command(parent: Any, name: str, helptext: str, func: Callable[[argparse.Namespace], int]) -> argparse.ArgumentParser:
    """A subcommand that acts on one namespace (``--namespace``, default: the configured one)."""
    parser = parent.add_parser(name, help=helptext)
    parser.add_argument("--namespace", help="default: the configured one")
    parser.set_defaults(func=func)
    return parser


def _add_reads(sub: Any) -> None:
    listing = _command(sub, "list", "recent memories, newest first", cmd_list)
    listing.add_argument("--limit", type=int, default=20)
    listing.add_argument("--cursor", help="the cursor of the previous page")
    listing.add_argument("--expiring-within", metavar="DURATION",
                         help="only memories that expire within it: a number and d, h or m (7d, 12h, 30m)")
    search = _command(sub, "search", "hybrid search (or --mode fulltext|semantic)", cmd_search)
    search.add_argument("query")
    search.add_argument("--mode", choices=("hybrid", "fulltext", "semantic"), default="hybrid")
    search.add_argument("--limit", type=int, default=10)
    recall = _command(sub, "recall", "semantic recall above --min-score", cmd_recall)
    recall.add_argument("query")
    recall.add_argument("--limit", type=int, help="default: defaults.recall_limit")
    recall.add_argument("--min-score", type=float)
    for reader in (search, recall):
        reader.add_argument("--as-of", metavar="TIME",
                            help="the facts valid then: an ISO 8601 date (its end, UTC) or date-time")
        reader.add_argument("--history", action="store_true", help="each result followed by its older versions")
    _command(sub, "show", "one memory in full (counts as an access)", cmd_show).add_argument("id")
    _command(sub, "history", "the versions of a memory's fact, oldest first, with their validity",
             cmd_history).add_argument("id")
    remember = _command(sub, "remember", "store a memory (the remember tool)", cmd_remember)
    remember.add_argument("content")
    remember.add_argument("--collection")
    remember.add_argument("--tag", action="append", help="repeat for several tags")
    remember.add_argument("--type", choices=("semantic", "episodic", "procedural"))
    remember.add_argument("--tier", choices=TIERS)
    remember.add_argument("--key", help='the fact\'s slot, e.g. "alice/home-city": the newest fact of a key is current')
    remember.add_argument("--supersedes", action="append", metavar="ID", help="a memory this one replaces (repeatable)")
    remember.add_argument("--valid-from", metavar="TIME", help="ISO 8601: since when it holds (default: now)")
    stats = _command(sub, "stats", "counts, sizes and collections", cmd_stats)
    stats.add_argument("--by-tier", action="store_true")
    stats.add_argument("--expiring", action="store_true", help="memories expiring within pre_expiry_warning_days")
    audit = _command(sub, "audit", "recent audit entries", cmd_audit)
    audit.add_argument("--limit", type=int, default=50)
    audit.add_argument("--operation")


def _add_tier(sub: Any) -> None:
    tier = sub.add_parser("tier", help="retention tiers").add_subparsers(dest="tier_command", required=True)
    _command(tier, "show", "a memory's tier, expiry and access count", cmd_tier).add_argument("id")
    tier_set = _command(tier, "set", "change a memory's tier (expiry recomputed)", cmd_tier)
    tier_set.add_argument("id")
    tier_set.add_argument("tier", choices=TIERS)
    tier_list = _command(tier, "list", "memories of one tier", cmd_tier)
    tier_list.add_argument("--tier", choices=TIERS, required=True)
    tier_list.add_argument("--limit", type=int, default=20)
    tier_list.add_argument("--cursor")


def _add_category(sub: Any) -> None:
    category = sub.add_parser("category", help="policy categories").add_subparsers(dest="category_command", required=True)
    _command(category, "list", "every category of the namespace", cmd_category)
    _command(category, "get", "one category's content", cmd_category).add_argument("name")
    category_set = _command(category, "set", "create or update (content from --content or stdin)", cmd_category)
    category_set.add_argument("name")
    category_set.add_argument("--slot", default="custom", choices=SLOTS)
    category_set.add_argument("--content")
    _command(category, "delete", "delete a category", cmd_category).add_argument("name")


def _add_retention(sub: Any) -> None:
    gc = sub.add_parser("gc", help="archive and delete expired memories now")
    gc.add_argument("--consolidate", action="store_true", help="first mark long-unused, unimportant memories stale")
    gc.add_argument("--dry-run", action="store_true", help="count what would be archived and deleted; change nothing")
    gc.add_argument("--tier", choices=TIERS[1:], help="only this tier (T0 never expires)")
    gc.add_argument("--force-compact", action="store_true",
                    help="compact the database (and Qdrant) even below retention.compaction_deleted_threshold")
    gc.set_defaults(func=cmd_gc)
    archive = sub.add_parser("archive", help="memories removed by the cleanup").add_subparsers(dest="archive_command", required=True)
    _command(archive, "list", "recently archived", cmd_archive).add_argument("--limit", type=int, default=20)
    archive_search = _command(archive, "search", "archived memories matching a query", cmd_archive)
    archive_search.add_argument("query")
    archive_search.add_argument("--limit", type=int, default=20)
    archive_restore = _command(archive, "restore", "bring one back (same id, T2 unless --tier)", cmd_archive)
    archive_restore.add_argument("id")
    archive_restore.add_argument("--tier", default="T2", choices=TIERS)


def _add_backup(sub: Any) -> None:
    backups = sub.add_parser("backup", help="whole-store backups (.bhgb)").add_subparsers(dest="backup_command", required=True)
    backups.add_parser("create", help="back up every namespace into <data_dir>/backups").set_defaults(func=cmd_backup)
    backups.add_parser("list", help="list known backups").set_defaults(func=cmd_backup)
    restore = backups.add_parser("restore", help="replace the store with a .bhgb backup (the current one is saved first)")
    restore.add_argument("path")
    restore.set_defaults(func=cmd_backup)


def _add_repair(sub: Any) -> None:
    repair = sub.add_parser("repair", help="recover memories missing here from the shared Qdrant (vector_index qdrant)")
    repair.add_argument("--dry-run", action="store_true", help="count what would be recovered; change nothing")
    repair.add_argument("--device-id", help="only the memories this device created")
    repair.set_defaults(func=cmd_repair)


def _add_store(sub: Any) -> None:
    store = sub.add_parser("store", help="move the whole store").add_subparsers(dest="store_command", required=True)
    migrate = store.add_parser(
        "migrate", help="copy this store into PostgreSQL (and Qdrant) without re-embedding; resumable; verified")
    migrate.add_argument("--to-database", required=True, metavar="URL",
                         help="postgres://user:password@host:port/dbname (an existing, empty database)")
    migrate.add_argument("--to-vector-index", choices=("embedded", "qdrant"),
                         help="the target's vector index (default: this config's vector_index)")
    qdrant = migrate.add_mutually_exclusive_group()
    qdrant.add_argument("--qdrant-url", metavar="URL", help="a Qdrant server (API key: the config's qdrant.api_key_env)")
    qdrant.add_argument("--qdrant-path", metavar="DIR", help="Qdrant local mode in this folder")
    migrate.add_argument("--batch-size", type=int, default=500, help="rows per committed batch (at most 1000)")
    migrate.add_argument("--samples", type=int, default=8, help="memories whose searches are compared on both stores")
    migrate.set_defaults(func=cmd_store)


def _add_namespace(sub: Any) -> None:
    namespace = sub.add_parser("namespace", help="namespaces' quotas").add_subparsers(dest="namespace_command",
                                                                                     required=True)
    quota = namespace.add_parser("quota", help="show a namespace's quota and use (every namespace's without NS), or set it")
    quota.add_argument("namespace", nargs="?", help="the namespace (omitted: list every namespace)")
    quota.add_argument("--max-memories", type=_max_memories, metavar="N|none",
                       help="live memories the namespace may hold (none: no limit)")
    quota.add_argument("--tier", action="append", type=_tier_budget, metavar="T2=N|none",
                       help="a tier's budget; repeat for several tiers")
    quota.add_argument("--policy", choices=("reject", "trim"),
                       help="a write past the quota: reject it (QUOTA_EXCEEDED) or trim the least-used memories")
    quota.add_argument("--reset", action="store_true", help="drop what was set here or in the admin: the config applies")
    quota.set_defaults(func=cmd_namespace_quota)


def add_store_commands(sub: Any) -> None:
    """The seed's store commands, onto the ``bhgbrain`` parser's subcommands."""
    for add in (_add_reads, _add_tier, _add_category, _add_retention, _add_backup, _add_repair, _add_store,
                _add_namespace):
        add(sub)
