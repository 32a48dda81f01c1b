"""The operation registry: every app's operations in one place, one validation and one access
check for every interface."""
from __future__ import annotations

import pytest

from bhgbrain_site import registry
from bhgbrain_site.core import pools
from bhgbrain_site.core.calls import CallContext, Principal
from bhgbrain_site.core.errors import Forbidden, InvalidInput, NotFound
from tests.conftest import remember

pytestmark = pytest.mark.django_db
CLI = CallContext(actor="cli")
ALICE = CallContext(actor="alice", principal=Principal(name="alice", namespaces=frozenset({"alice"})))
ALICE_READ_ONLY = CallContext(actor="alice", principal=Principal(name="ro", namespaces=frozenset({"alice"}), read_only=True))
SEED_TOOLS = ("remember", "recall", "search", "forget", "tag", "collections", "category", "bootstrap", "import",
              "backup", "repair")
CONVERSATION_TOOLS = ("thread_append", "event", "handoff")


def test_the_tools_are_the_seeds_then_the_conversation_ones_and_every_operation_says_what_it_does() -> None:
    assert tuple(op.name for op in registry.tools()) == SEED_TOOLS + CONVERSATION_TOOLS  # the seed's order first
    assert tuple(r.uri for r in registry.resources()) == (
        "memory://list", "memory://inject", "memory://handoff", "category://list", "collection://list",
        "health://status", "memory://{id}", "category://{name}", "collection://{name}", "memory://{id}/history")
    for name in (*SEED_TOOLS, "memories.list", "memories.get", "memories.history", "audit.list", "archive.list",
                 "store.health"):
        operation = registry.get_operation(name)
        assert operation.description and operation.input_model.model_config["extra"] == "forbid"


def test_operations_that_are_not_tools_are_not_reachable_as_tools() -> None:
    with pytest.raises(NotFound, match="Unknown tool"):
        registry.call_tool("backups.restore_file", {"path": "/etc/passwd.bhgb"}, CLI)
    with pytest.raises(NotFound, match="Unknown tool"):
        registry.call_tool("memories.list", {}, CLI)


def test_query_strings_are_coerced_but_json_bodies_are_strict(hash_embedder) -> None:
    remember("The billing service runs on Kubernetes")
    assert len(registry.call("memories.list", {"limit": "5"}, CLI, coerce=True)["items"]) == 1
    with pytest.raises(InvalidInput, match="limit"):
        registry.call("memories.list", {"limit": "5"}, CLI)  # a JSON body must send a number
    with pytest.raises(InvalidInput, match="limit"):
        registry.call("memories.list", {"limit": "0"}, CLI, coerce=True)
    with pytest.raises(InvalidInput, match="nope"):
        registry.call("memories.list", {"nope": "1"}, CLI, coerce=True)


def test_resources_map_uris_onto_operations(hash_embedder) -> None:
    memory_id = remember("The billing service runs on Kubernetes", namespace="alice").id
    page = registry.read_resource("memory://list?namespace=alice&limit=1&utm_source=x&cursor=", CLI)
    assert [item["id"] for item in page["items"]] == [memory_id]  # unknown and blank parameters are ignored
    assert registry.read_resource(f"memory://{memory_id}?namespace=alice", CLI)["id"] == memory_id
    with pytest.raises(NotFound):
        registry.read_resource(f"memory://{memory_id}?namespace=bob", CLI)
    with pytest.raises(InvalidInput, match="id"):
        registry.read_resource("memory://not-a-uuid", CLI)
    with pytest.raises(NotFound, match="Unknown resource"):
        registry.read_resource("memory://list/extra", CLI)


def test_a_scoped_caller_is_pinned_to_its_namespaces(hash_embedder) -> None:
    remember("Bob's roadmap: ship the search rewrite", namespace="bob")
    written = registry.call("remember", {"content": "Alice's note: the cache TTL is five minutes"}, ALICE)
    assert registry.call("memories.get", {"id": written["id"], "namespace": "alice"}, CLI)["id"] == written["id"]
    with pytest.raises(Forbidden):
        registry.call("search", {"query": "roadmap", "namespace": "bob"}, ALICE)
    with pytest.raises(Forbidden):
        registry.read_resource("memory://list?namespace=bob", ALICE)
    with pytest.raises(Forbidden, match="read-only"):
        registry.call("remember", {"content": "Another note"}, ALICE_READ_ONLY)
    assert registry.call("search", {"query": "note"}, ALICE_READ_ONLY)["results"]  # reading is allowed
    with pytest.raises(Forbidden, match="master token"):
        registry.call("store.stats", {}, ALICE)
    assert registry.read_resource("health://status", ALICE)["status"] in ("healthy", "degraded")


def test_memory_list_expiring_within_as_a_resource_query(hash_embedder) -> None:
    soon = remember("Scratch: rotate the staging certificate", retention_tier="T3")  # 30 days
    remember("The billing service runs on Kubernetes", retention_tier="T0")
    listed = registry.read_resource("memory://list?expiring_within=31d", CLI)
    assert [m["id"] for m in listed["items"]] == [soon.id] and listed["total_results"] == 1
    assert registry.read_resource("memory://list?expiring_within=29d", CLI)["items"] == []
    assert registry.read_resource("memory://list?expiring_within=", CLI)["total_results"] == 2  # blank: no filter
    for bad in ("7x", "7", "1.5d", "0h", 7):
        with pytest.raises(InvalidInput, match="expiring_within"):
            registry.call("memories.list", {"expiring_within": bad}, CLI)


def _terminate_this_thread_s_backend() -> int:
    """Close this thread's PostgreSQL session from the server's side, as a database, pooler or proxy
    does with a connection left idle; returns the session's pid."""
    import time

    import psycopg
    from django.db import connection

    pid = connection.connection.info.backend_pid
    with psycopg.connect(**connection.get_connection_params(), autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        deadline = time.monotonic() + 10
        while admin.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone():
            assert time.monotonic() < deadline, "the backend did not end"
            time.sleep(0.05)
    return pid


@pytest.mark.django_db(transaction=True)
def test_a_connection_the_database_closed_while_idle_is_replaced_before_the_next_call(monkeypatch, hash_embedder) -> None:
    from django.db import OperationalError, connection

    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL closes idle sessions; an SQLite connection has no server to lose")
    remember("The idle connection marker sits in bay seven")
    listed = {"namespace": "global", "limit": 5}
    assert registry.call("memories.list", listed, CLI)["items"]

    monkeypatch.setattr(pools, "IDLE_CHECK_S", 3600.0)  # not idle long enough: not checked
    _terminate_this_thread_s_backend()
    with pytest.raises(OperationalError):
        registry.call("memories.list", listed, CLI)  # what every call after an idle kill met before
    assert registry.call("memories.list", listed, CLI)["items"]  # the broken connection was dropped

    monkeypatch.setattr(pools, "IDLE_CHECK_S", 0.0)  # every call now comes after "long" idleness
    killed = _terminate_this_thread_s_backend()
    assert registry.call("memories.list", listed, CLI)["items"]
    assert connection.connection.info.backend_pid != killed
