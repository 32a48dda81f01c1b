"""Resource registry: the five static resources and three templates, one definition each,
served by MCP ``resources/read`` and ``GET /resource?uri=``."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable
from urllib.parse import parse_qs, urlsplit

from django.conf import settings

from bhgbrain_site.errors import InvalidInput, NotFound
from mcp_bridge.registry import CallContext

NAMESPACE_RE = re.compile(r"^[a-zA-Z0-9/-]{1,200}$")


@dataclass(frozen=True)
class Resource:
    uri: str  # static URI, or a template such as memory://{id}
    name: str
    description: str
    handler: Callable[[dict[str, str], dict[str, str], CallContext], dict[str, Any]]
    scoped: bool = True  # reads a namespace's data (health://status does not)

    @property
    def is_template(self) -> bool:
        return "{" in self.uri


def _query(uri: str) -> dict[str, str]:
    params = parse_qs(urlsplit(uri).query, keep_blank_values=True)
    return {key: values[-1] for key, values in params.items()}


def _namespace(query: dict[str, str]) -> str:
    namespace = query.get("namespace") or settings.BHGBRAIN.defaults.namespace
    if not NAMESPACE_RE.match(namespace):
        raise InvalidInput("namespace: must match ^[a-zA-Z0-9/-]{1,200}$")
    return namespace


def _checked_query(uri: str, ctx: CallContext) -> dict[str, str]:
    """Parse the query and check the caller may read its namespace (resources never write)."""
    query = _query(uri)
    if not query.get("namespace"):
        query["namespace"] = ctx.principal.default_namespace(settings.BHGBRAIN.defaults.namespace)
    ctx.principal.check(_namespace(query), writes=False)
    return query


def _limit(query: dict[str, str], default: int = 20) -> int:
    raw = query.get("limit", str(default))
    if not raw.isdigit() or not 1 <= int(raw) <= 100:
        raise InvalidInput("limit: must be an integer from 1 to 100")
    return int(raw)


def _memory_list(args: dict[str, str], query: dict[str, str], ctx: CallContext) -> dict[str, Any]:
    from memories.selectors import memories_page

    return memories_page(namespace=_namespace(query), limit=_limit(query), cursor=query.get("cursor"))


def _memory_inject(args: dict[str, str], query: dict[str, str], ctx: CallContext) -> dict[str, Any]:
    from search.inject import build_inject

    text_query = query.get("query") or None
    if text_query and len(text_query) > 500:
        raise InvalidInput("query: at most 500 characters")
    return build_inject(namespace=_namespace(query), query=text_query)


def _category_list(args: dict[str, str], query: dict[str, str], ctx: CallContext) -> dict[str, Any]:
    from categories.selectors import categories_list

    return {"categories": categories_list(namespace=_namespace(query))}


def _collection_list(args: dict[str, str], query: dict[str, str], ctx: CallContext) -> dict[str, Any]:
    from memories.selectors import collections_list

    return {"collections": collections_list(namespace=_namespace(query))}


def _health(args: dict[str, str], query: dict[str, str], ctx: CallContext) -> dict[str, Any]:
    from bhgbrain_site.health import health_snapshot

    return health_snapshot()


def _memory_detail(args: dict[str, str], query: dict[str, str], ctx: CallContext) -> dict[str, Any]:
    import uuid

    from memories.selectors import memory_get, memory_to_dict
    from retention.services import memories_touch

    try:
        memory_id = str(uuid.UUID(args["id"]))
    except ValueError:
        raise InvalidInput("id: must be a UUID") from None
    memory = memory_get(memory_id=memory_id, namespace=_namespace(query))
    if memory is None:
        raise NotFound(f"Memory {memory_id} not found")
    memories_touch(memory_ids=[memory_id])
    return memory_to_dict(memory)


def _category_detail(args: dict[str, str], query: dict[str, str], ctx: CallContext) -> dict[str, Any]:
    from categories.selectors import category_get

    return category_get(namespace=_namespace(query), name=args["name"])


def _collection_detail(args: dict[str, str], query: dict[str, str], ctx: CallContext) -> dict[str, Any]:
    from memories.selectors import memories_page

    name = args["name"]
    if not re.match(r"^[a-zA-Z0-9-]{1,100}$", name):
        raise InvalidInput("name: must match ^[a-zA-Z0-9-]{1,100}$")
    page = memories_page(namespace=_namespace(query), limit=_limit(query), cursor=query.get("cursor"), collection=name)
    return {"name": name, **page}


RESOURCES: list[Resource] = [
    Resource("memory://list", "Memory list", "Cursor-paginated memories, newest first (?namespace=&limit=1..100&cursor=)", _memory_list),
    Resource("memory://inject", "Session inject", "Budgeted context block: categories, then the most useful memories (?namespace=&query=)", _memory_inject),
    Resource("category://list", "Category list", "Policy categories of the namespace with previews (?namespace=)", _category_list),
    Resource("collection://list", "Collection list", "Collections of the namespace with memory counts (?namespace=)", _collection_list),
    Resource("health://status", "Health", "The full health snapshot", _health, scoped=False),
    Resource("memory://{id}", "Memory", "One memory by id (?namespace=); counts as an access", _memory_detail),
    Resource("category://{name}", "Category", "One category with its full content (?namespace=)", _category_detail),
    Resource("collection://{name}", "Collection", "Memories of one collection, newest first (?namespace=&limit=&cursor=)", _collection_detail),
]


def _match(resource: Resource, base: str) -> dict[str, str] | None:
    if not resource.is_template:
        return {} if base == resource.uri else None
    pattern = "^" + re.escape(resource.uri).replace(r"\{id\}", r"(?P<id>[^/?#]+)").replace(r"\{name\}", r"(?P<name>[^/?#]+)") + "$"
    match = re.match(pattern, base)
    return match.groupdict() if match else None


def read_resource(uri: str, ctx: CallContext) -> dict[str, Any]:
    """Resolve a resource URI (static first, then templates) and run its handler."""
    if not isinstance(uri, str) or not uri or len(uri) > 2000:
        raise InvalidInput("uri: required, at most 2000 characters")
    base = uri.split("?", 1)[0]
    for resource in sorted(RESOURCES, key=lambda r: r.is_template):
        args = _match(resource, base)
        if args is not None:
            query = _checked_query(uri, ctx) if resource.scoped else _query(uri)
            return resource.handler(args, query, ctx)
    raise NotFound(f"Unknown resource: {base[:200]}")
