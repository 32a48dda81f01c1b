"""The seed's store commands of the ``bhgbrain`` CLI: list, search, show, tier, stats, audit,
category, gc, archive, backup.

Each is a thin call into a tool, a resource or a selector, printed as JSON; errors print the
envelope and exit 1. They run in-process on the configured store (no server needed).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Callable
from urllib.parse import urlencode

TIERS = ("T0", "T1", "T2", "T3")


def _ns(args: argparse.Namespace) -> str:
    from django.conf import settings

    return args.namespace or settings.BHGBRAIN.defaults.namespace


def _run(produce: Callable[[], Any]) -> int:
    from django.core.management import call_command

    from bhgbrain_site.errors import DomainError, to_envelope

    call_command("migrate", interactive=False, verbosity=0)
    try:
        result = produce()
    except DomainError as exc:
        result, code = to_envelope(exc)[1], 1
    else:
        code = 0
    print(json.dumps(result, indent=2, ensure_ascii=False, default=str))
    return code


def _cli() -> Any:  # noqa: ANN401 - a CallContext
    from mcp_bridge.registry import CallContext

    return CallContext(actor="cli")


def cmd_list(args: argparse.Namespace) -> int:
    from mcp_bridge.resources import read_resource

    query = urlencode({"namespace": _ns(args), "limit": args.limit})
    return _run(lambda: read_resource(f"memory://list?{query}", _cli()))


def cmd_search(args: argparse.Namespace) -> int:
    from mcp_bridge.registry import call_tool

    arguments = {"query": args.query, "namespace": _ns(args), "mode": args.mode, "limit": args.limit}
    return _run(lambda: call_tool("search", arguments, _cli()))


def cmd_show(args: argparse.Namespace) -> int:
    from mcp_bridge.resources import read_resource

    return _run(lambda: read_resource(f"memory://{args.id}?{urlencode({'namespace': _ns(args)})}", _cli()))


def _tier_view(memory: Any) -> dict[str, Any]:  # noqa: ANN401 - a Memory
    from memories.selectors import iso

    return {"id": str(memory.id), "namespace": memory.namespace, "summary": memory.summary,
            "retention_tier": memory.retention_tier, "expires_at": iso(memory.expires_at),
            "decay_eligible": memory.decay_eligible, "review_due": iso(memory.review_due),
            "access_count": memory.access_count, "last_accessed": iso(memory.last_accessed)}


def cmd_tier(args: argparse.Namespace) -> int:
    from bhgbrain_site.errors import NotFound
    from memories.selectors import memories_page, memory_get
    from memories.services import memory_edit

    def show() -> dict[str, Any]:
        memory = memory_get(memory_id=args.id, namespace=_ns(args))
        if memory is None:
            raise NotFound(f"Memory {args.id} not found")
        return _tier_view(memory)

    if args.tier_command == "show":
        return _run(show)
    if args.tier_command == "set":
        def change() -> dict[str, Any]:
            show()  # the memory must exist in the namespace
            return _tier_view(memory_edit(memory_id=args.id, changes={"retention_tier": args.tier}, actor="cli"))

        return _run(change)
    return _run(lambda: memories_page(namespace=_ns(args), limit=args.limit, cursor=args.cursor, tier=args.tier))


def cmd_stats(args: argparse.Namespace) -> int:
    from memories.selectors import store_stats

    return _run(lambda: store_stats(by_tier=args.by_tier, expiring=args.expiring))


def cmd_audit(args: argparse.Namespace) -> int:
    from memories.selectors import audit_entries

    return _run(lambda: {"entries": audit_entries(namespace=_ns(args), limit=args.limit, operation=args.operation)})


def cmd_category(args: argparse.Namespace) -> int:
    from mcp_bridge.registry import call_tool

    arguments: dict[str, Any] = {"action": args.category_command, "namespace": _ns(args)}
    if args.category_command != "list":
        arguments["name"] = args.name
    if args.category_command == "set":
        content = args.content if args.content is not None else sys.stdin.read()  # the seed's interactive set
        arguments.update(slot=args.slot, content=content)
    return _run(lambda: call_tool("category", arguments, _cli()))


def cmd_gc(args: argparse.Namespace) -> int:
    from retention.cleanup import retention_cleanup

    return _run(lambda: retention_cleanup(consolidate=args.consolidate, dry_run=args.dry_run, tier=args.tier).as_dict())


def cmd_archive(args: argparse.Namespace) -> int:
    """archive list | search QUERY | restore ID, in one namespace (default: the configured one)."""
    from retention import archive

    if args.archive_command == "restore":
        return _run(lambda: archive.archive_restore(memory_id=args.id, namespace=_ns(args), actor="cli", tier=args.tier))
    query = args.query if args.archive_command == "search" else None
    return _run(lambda: {"entries": archive.archive_entries(namespace=_ns(args), query=query, limit=args.limit)})


def cmd_backup(args: argparse.Namespace) -> int:
    """backup create | list | restore PATH; the CLI runs on the server, so restore reads any path."""
    from memories import backup

    if args.backup_command == "create":
        return _run(lambda: backup.backup_create(actor="cli").as_dict())
    if args.backup_command == "list":
        return _run(lambda: {"backups": [info.as_dict() for info in backup.backups_list()]})
    return _run(lambda: backup.backup_restore(path=os.path.abspath(args.path), actor="cli", allow_any_path=True))


def add_store_commands(sub: Any) -> None:  # noqa: ANN401 - argparse's subparsers action
    def command(name: str, helptext: str, func: Callable[[argparse.Namespace], int], parent: Any = sub) -> argparse.ArgumentParser:  # noqa: ANN401
        parser = parent.add_parser(name, help=helptext)
        parser.add_argument("--namespace", help="default: the configured one")
        parser.set_defaults(func=func)
        return parser

    command("list", "recent memories, newest first", cmd_list).add_argument("--limit", type=int, default=20)
    search = command("search", "hybrid search (or --mode fulltext|semantic)", cmd_search)
    search.add_argument("query")
    search.add_argument("--mode", choices=("hybrid", "fulltext", "semantic"), default="hybrid")
    search.add_argument("--limit", type=int, default=10)
    command("show", "one memory in full (counts as an access)", cmd_show).add_argument("id")

    tier = sub.add_parser("tier", help="retention tiers").add_subparsers(dest="tier_command", required=True)
    command("show", "a memory's tier, expiry and access count", cmd_tier, tier).add_argument("id")
    tier_set = command("set", "change a memory's tier (expiry recomputed)", cmd_tier, tier)
    tier_set.add_argument("id")
    tier_set.add_argument("tier", choices=TIERS)
    tier_list = command("list", "memories of one tier", cmd_tier, tier)
    tier_list.add_argument("--tier", choices=TIERS, required=True)
    tier_list.add_argument("--limit", type=int, default=20)
    tier_list.add_argument("--cursor")

    stats = command("stats", "counts, sizes and collections", cmd_stats)
    stats.add_argument("--by-tier", action="store_true")
    stats.add_argument("--expiring", action="store_true", help="memories expiring within pre_expiry_warning_days")
    audit = command("audit", "recent audit entries", cmd_audit)
    audit.add_argument("--limit", type=int, default=50)
    audit.add_argument("--operation")

    category = sub.add_parser("category", help="policy categories").add_subparsers(dest="category_command", required=True)
    command("list", "every category of the namespace", cmd_category, category)
    command("get", "one category's content", cmd_category, category).add_argument("name")
    category_set = command("set", "create or update (content from --content or stdin)", cmd_category, category)
    category_set.add_argument("name")
    category_set.add_argument("--slot", default="custom",
                              choices=("company-values", "architecture", "coding-requirements", "custom"))
    category_set.add_argument("--content")
    command("delete", "delete a category", cmd_category, category).add_argument("name")

    gc = sub.add_parser("gc", help="archive and delete expired memories now")
    gc.add_argument("--consolidate", action="store_true", help="first mark long-unused, unimportant memories stale")
    gc.add_argument("--dry-run", action="store_true", help="count what would be archived and deleted; change nothing")
    gc.add_argument("--tier", choices=("T1", "T2", "T3"), help="only this tier (T0 never expires)")
    gc.set_defaults(func=cmd_gc)
    archive = sub.add_parser("archive", help="memories removed by the cleanup").add_subparsers(dest="archive_command", required=True)
    command("list", "recently archived", cmd_archive, archive).add_argument("--limit", type=int, default=20)
    archive_search = command("search", "archived memories matching a query", cmd_archive, archive)
    archive_search.add_argument("query")
    archive_search.add_argument("--limit", type=int, default=20)
    archive_restore = command("restore", "bring one back (same id, T2 unless --tier)", cmd_archive, archive)
    archive_restore.add_argument("id")
    archive_restore.add_argument("--tier", default="T2", choices=TIERS)

    backups = sub.add_parser("backup", help="whole-store backups (.bhgb)").add_subparsers(dest="backup_command", required=True)
    backups.add_parser("create", help="back up every namespace into <data_dir>/backups").set_defaults(func=cmd_backup)
    backups.add_parser("list", help="list known backups").set_defaults(func=cmd_backup)
    restore = backups.add_parser("restore", help="replace the store with a .bhgb backup (the current one is saved first)")
    restore.add_argument("path")
    restore.set_defaults(func=cmd_backup)
