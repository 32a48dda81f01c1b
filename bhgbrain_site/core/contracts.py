"""The names, patterns and caps of the seed's contracts, defined once for every layer.

Tool schemas, config validation, model fields, services, the CLI and the admin all read
them from here, so a limit can never differ between two interfaces.
"""
from __future__ import annotations

import re
from typing import Final, Literal

# The seed's tools (MCP tools/list and POST /tool/<name>), in the order clients list them.
TOOLS: Final = ("remember", "recall", "search", "forget", "tag", "collections", "category", "bootstrap", "import",
                "backup", "repair", "thread_append", "event", "handoff")
RESOURCES: Final = ("memory://list", "memory://inject", "memory://handoff", "category://list", "collection://list",
                    "health://status", "memory://{id}", "category://{name}", "collection://{name}",
                    "memory://{id}/history")
TIERS: Final = ("T0", "T1", "T2", "T3")
TIER_LABELS: Final = {"T0": "foundational", "T1": "institutional", "T2": "operational", "T3": "transient"}
MEMORY_TYPES: Final = ("episodic", "semantic", "procedural")
SOURCES: Final = ("cli", "api", "agent", "import")
SLOTS: Final = ("company-values", "architecture", "coding-requirements", "custom")
EVENT_STATUSES: Final = ("planned", "done", "cancelled")

Tier = Literal["T0", "T1", "T2", "T3"]
MemoryTypeName = Literal["episodic", "semantic", "procedural"]
SourceName = Literal["cli", "api", "agent", "import"]
SlotName = Literal["company-values", "architecture", "coding-requirements", "custom"]
EventStatus = Literal["planned", "done", "cancelled"]

NAMESPACE_MAX: Final = 200
COLLECTION_MAX: Final = 100
TAG_MAX: Final = 100
CATEGORY_NAME_MAX: Final = 100
MAX_TAGS: Final = 20  # tags a memory holds
SUMMARY_MAX: Final = 120  # characters of a summary (the first line, cut with "...")
CONTENT_MAX: Final = 100_000  # characters a remember call may send
IMPORT_MAX: Final = 500_000  # characters of a profile import or bootstrap answers
PATH_MAX: Final = 4096  # characters of a backup path
QUERY_MAX: Final = 500  # characters of a search / recall / inject query
DEVICE_ID_MAX: Final = 64
THREAD_MAX: Final = 200  # characters of a thread id (the client's, scoped to the namespace)
SPEAKER_MAX: Final = 100
MESSAGE_ID_MAX: Final = 200  # characters of a message id (the idempotency key of a threaded write)
FACT_KEY_MAX: Final = 200  # characters of a fact key (a namespace-scoped slot: "alice/home-city")
SUPERSEDES_MAX: Final = 100  # memories one remember may supersede
THREAD_BATCH_MAX: Final = 500  # messages one thread_append call may carry
CONTEXT_TURNS_MAX: Final = 5  # neighbouring turns a search or recall result may carry (with_context)
ERROR_ECHO_MAX: Final = 200  # characters of a client-supplied name quoted back in an error
JSON_DEPTH_MAX: Final = 32  # levels of nesting an operation's arguments may have (theirs need 4)

NAMESPACE_PATTERN: Final = rf"^[a-zA-Z0-9/-]{{1,{NAMESPACE_MAX}}}$"
COLLECTION_PATTERN: Final = rf"^[a-zA-Z0-9-]{{1,{COLLECTION_MAX}}}$"
TAG_PATTERN: Final = rf"^[a-zA-Z0-9-]{{1,{TAG_MAX}}}$"
CATEGORY_NAME_PATTERN: Final = rf"^[a-zA-Z0-9._-]{{1,{CATEGORY_NAME_MAX}}}$"

_NAMESPACE_RE = re.compile(NAMESPACE_PATTERN)
_COLLECTION_RE = re.compile(COLLECTION_PATTERN)
_TAG_RE = re.compile(TAG_PATTERN)


def is_namespace(value: object) -> bool:
    return isinstance(value, str) and _NAMESPACE_RE.match(value) is not None


def is_collection(value: object) -> bool:
    return isinstance(value, str) and _COLLECTION_RE.match(value) is not None


def is_tag(value: object) -> bool:
    return isinstance(value, str) and _TAG_RE.match(value) is not None
