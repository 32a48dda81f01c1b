"""Resource subscriptions: ``resources/subscribe`` / ``unsubscribe`` and
``notifications/resources/updated``, driven by the store's change feed.

Every write appends the change feed (memories/funnel.py) and category writes their audit row,
in the database every process shares; so one watcher task per server process reads both
(the ``changes.since`` operation) every POLL_SECONDS while anyone is subscribed, and a change
made by another worker, the admin, the CLI or the scheduler reaches the subscriber. With nobody
subscribed the watcher sleeps and reads nothing.

What a URI watches (its namespace: ``?namespace=``, else the caller's default):
``memory://{id}`` that memory; ``memory://list``, ``memory://handoff`` any memory of the
namespace; ``memory://inject`` any memory or category of it; ``collection://list`` any memory;
``collection://{name}`` the memories of that collection; ``category://list`` any category;
``category://{name}`` that category. A restore (the whole store replaced) updates every
subscription. Subscribing reads the resource once as the caller, so a scoped token can only
subscribe to what it may read; a URI naming none of this server's resources is accepted and
never changes. ``resources/list`` itself never changes (the lists are resources whose content
changes), so ``listChanged`` stays false.
"""
from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

from django.conf import settings
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import INVALID_PARAMS

from bhgbrain_site import registry
from bhgbrain_site.core.calls import CallContext, Principal
from bhgbrain_site.core.errors import DomainError
from bhgbrain_site.core.pools import READ_POOL, in_pool
from mcp_bridge.notifications import PEERS, Peer, peer_of

logger = logging.getLogger("bhgbrain.mcp")

POLL_SECONDS = 0.5
WATCHER = CallContext(actor="mcp:subscriptions")  # reads the feed of every namespace, tells each peer what it may see
# Which changes each resource follows: (memories of the namespace, categories of the namespace).
FOLLOWS = {
    "memory://list": (True, False), "memory://handoff": (True, False), "memory://inject": (True, True),
    "collection://list": (True, False), "category://list": (False, True),
}
UNWATCHABLE = {"health://status": "health://status changes all the time: read it when you need it"}


@dataclass(frozen=True)
class Watch:
    """What one subscribed URI follows."""

    namespace: str | None = None
    memory_id: str | None = None
    collection: str | None = None
    category: str | None = None
    memories: bool = False  # any memory of the namespace
    categories: bool = False  # any category of the namespace

    @property
    def follows_anything(self) -> bool:
        return bool(self.memory_id or self.collection or self.category or self.memories or self.categories)

    def fires(self, changes: dict[str, Any]) -> bool:
        if changes.get("reset"):
            return self.follows_anything
        return any(self._memory_fires(m) for m in changes["memories"]) or any(
            c["namespace"] == self.namespace and (self.categories or c["name"] == self.category) for c in changes["categories"])

    def _memory_fires(self, change: dict[str, Any]) -> bool:
        if change["id"] == self.memory_id:
            return True
        if change["namespace"] != self.namespace:
            return False
        return self.memories or (self.collection is not None and change["collection"] in (self.collection, None))


def watch_for(uri: str, principal: Principal) -> Watch:
    """What ``uri`` follows (an empty Watch for a URI that names none of our resources)."""
    base = uri.split("?", 1)[0]
    if base in UNWATCHABLE:
        raise MCPError(INVALID_PARAMS, UNWATCHABLE[base])
    query = parse_qs(urlsplit(uri).query)
    namespace = (query.get("namespace") or [""])[-1] or principal.default_namespace(settings.BHGBRAIN.defaults.namespace)
    for resource in sorted(registry.resources(), key=lambda r: r.is_template):
        variables = resource.match(base)
        if variables is None:
            continue
        if resource.uri == "memory://{id}":
            return Watch(namespace, memory_id=variables["id"])
        if resource.uri == "collection://{name}":
            return Watch(namespace, collection=variables["name"])
        if resource.uri == "category://{name}":
            return Watch(namespace, category=variables["name"])
        memories, categories = FOLLOWS.get(resource.uri, (False, False))
        return Watch(namespace, memories=memories, categories=categories)
    return Watch()


def checked_watch(uri: str, caller: CallContext) -> Watch:
    """The URI's watch, once the caller has read it (the registry's checks: namespaces, isolation)."""
    watch = watch_for(uri, caller.principal)
    if watch.follows_anything:
        try:
            registry.read_resource(uri, caller)
        except DomainError as exc:
            raise MCPError(INVALID_PARAMS, f"Cannot subscribe to {uri[:200]}: {exc.message}") from None
    return watch


class Watcher:
    """The process's one reader of the change feed, running while any peer watches something."""

    def __init__(self) -> None:
        self.position: dict[str, Any] | None = None
        self.wake = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Called at each subscribe, before it is answered: changes from now on are seen."""
        if self.position is None:
            answer = await in_pool(READ_POOL, registry.call, "changes.since", {}, WATCHER)
            self.position = answer["position"]
        if self.task is None or self.task.done():
            self.wake = asyncio.Event()
            self.task = asyncio.get_running_loop().create_task(self.run())
        self.wake.set()

    async def run(self) -> None:
        while True:
            if not any(peer.watches for peer in PEERS):
                self.position = None  # nothing to miss: the next subscribe starts from the end of the feed
                self.wake.clear()
                await self.wake.wait()
            await asyncio.sleep(POLL_SECONDS)
            try:
                await self.poll()
            except Exception:  # noqa: BLE001 - the database away for a moment: the next poll tries again
                logger.warning("subscriptions: reading the change feed failed; retrying", exc_info=True)

    async def poll(self) -> None:
        more = True
        while more and self.position is not None:
            changes = await in_pool(READ_POOL, registry.call, "changes.since", self.position, WATCHER)
            self.position, more = changes["position"], changes["more"]
            if changes["memories"] or changes["categories"] or changes["reset"]:
                await self.notify(changes)

    @staticmethod
    async def notify(changes: dict[str, Any]) -> None:
        for peer in list(PEERS):
            for uri, watch in list(peer.watches.items()):
                if watch.fires(changes):
                    await peer.connection.send_resource_updated(uri)


WATCHER_TASK = Watcher()


async def subscribe(ctx: Any, uri: str, watch: Watch, principal: Principal) -> None:
    """``resources/subscribe`` (``watch`` from :func:`checked_watch`): remember it, and make sure
    the watcher runs before the subscription is answered."""
    peer: Peer | None = peer_of(ctx, principal)
    assert peer is not None
    peer.watches[uri] = watch
    if watch.follows_anything:
        await WATCHER_TASK.start()


async def unsubscribe(ctx: Any, uri: str) -> None:
    """``resources/unsubscribe``: no more updates for ``uri`` on this connection."""
    peer = peer_of(ctx)
    if peer is not None:
        peer.watches.pop(uri, None)
