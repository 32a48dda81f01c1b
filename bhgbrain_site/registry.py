"""The operation registry: each operation defined once, every interface an adapter over it.

An app declares its operations in its ``operations.py``: an input model (pydantic,
``extra="forbid"``), a handler that calls one service or selector, and whether a call
``writes`` or acts on the ``whole_store``; it also maps its resource URIs onto operations.
The registry imports every installed app's ``operations`` module on first use.

:func:`call` is the one path an operation runs by, whichever interface asked: MCP
(tools and resources), ``POST /tool/<name>``, ``GET /resource``, the REST viewsets and the
CLI. It validates the arguments (JSON bodies strictly typed; query strings coerced), checks
the caller's principal (namespaces, read-only, whole store, write rate), pins the namespace of
a scoped caller so services filter by it, and records the call's metrics. Operations marked
``tool`` are the seed's MCP tools; the others are reached only through the REST and CLI
adapters that name them.
"""
from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlsplit

from pydantic import BaseModel, ValidationError

from bhgbrain_site.core.calls import CallContext, Principal
from bhgbrain_site.core.contracts import ERROR_ECHO_MAX, RESOURCES, TOOLS
from bhgbrain_site.core.errors import DomainError, Forbidden, InvalidInput, NotFound, describe_validation_error, storage_reason
from bhgbrain_site.core.inputs import check_storable
from bhgbrain_site.core.metrics import metrics
from bhgbrain_site.core.pools import EMBED_POOL, READ_POOL, WRITE_POOL, drop_broken_connections
from bhgbrain_site.core.write_rate import write_admit

T = TypeVar("T")


Handler = Callable[[Any, CallContext], dict[str, Any]]


def _never(params: Any) -> bool:
    return False


@dataclass(frozen=True)
class Hints:
    """What a client may assume about an operation's effect (MCP tool annotations). ``destructive``:
    some call deletes something stored, or overwrites it without keeping the old version (a dedup
    merge or a category edit keeps a revision: not destructive). ``idempotent``: repeating a call
    with the same arguments changes nothing more. Whether it writes at all is its ``writes``."""

    destructive: bool = False
    idempotent: bool = False


@dataclass(frozen=True)
class Operation:
    name: str
    input_model: type[BaseModel]
    handler: Handler
    writes: Callable[[Any], bool] = _never
    whole_store: bool = False  # reads or replaces every namespace: the master token only
    tool: bool = True  # one of the seed's tools (MCP tools/list, POST /tool/<name>)
    scoped: bool = True  # reads or writes a namespace (health does not)
    title: str = ""  # a human name (MCP clients show it)
    output_model: type[BaseModel] | None = None  # the shape of every successful result
    hints: Hints = field(default_factory=Hints)
    embeds: bool = False  # may embed passages: waits for the model (runs in the embedding writes' pool)

    @property
    def description(self) -> str:
        return (self.handler.__doc__ or "").strip()

    @property
    def read_only(self) -> bool:
        """Never writes, whatever its arguments (HTTP runs these in the read pool)."""
        return self.writes is _never

    def output_schema(self) -> dict[str, Any] | None:
        """The JSON schema of a successful result: always an object at the top (MCP requires it),
        a union of shapes (``anyOf``) for an operation whose result depends on its action."""
        if self.output_model is None:
            return None
        return {"type": "object", **self.output_model.model_json_schema(mode="serialization")}


@dataclass(frozen=True)
class Resource:
    """A URI (static, or a template such as ``memory://{id}``) read by one operation: the
    template's variables and the URI's query string become the operation's arguments."""

    uri: str
    name: str
    description: str
    operation: str
    fixed: Mapping[str, Any] = field(default_factory=dict)

    @property
    def is_template(self) -> bool:
        return "{" in self.uri

    def match(self, base: str) -> dict[str, str] | None:
        if not self.is_template:
            return {} if base == self.uri else None
        pattern = re.sub(r"\\\{(\w+)\\\}", r"(?P<\1>[^/?#]+)", re.escape(self.uri))
        found = re.fullmatch(pattern, base)
        return found.groupdict() if found else None


_operations: dict[str, Operation] = {}
_resources: list[Resource] = []
_loaded = False
_load_lock = threading.Lock()


def operation(
    name: str, input_model: type[BaseModel], *, writes: Callable[[Any], bool] = _never,
    whole_store: bool = False, tool: bool = True, scoped: bool = True, title: str = "",
    output: type[BaseModel] | None = None, hints: Hints | None = None, embeds: bool = False,
) -> Callable[[Handler], Handler]:
    """Register ``handler(params, ctx)`` under ``name``; its docstring is the description,
    ``output`` the model of its results, ``title`` and ``hints`` what clients show and assume,
    ``embeds`` whether a call may wait for the embedding model (the pool it runs in)."""

    def register(handler: Handler) -> Handler:
        if name in _operations:
            raise RuntimeError(f"operation {name!r} is registered twice")
        _operations[name] = Operation(name, input_model, handler, writes, whole_store, tool, scoped, title, output,
                                      hints or Hints(), embeds)
        return handler

    return register


def resource(uri: str, name: str, description: str, *, operation: str, fixed: Mapping[str, Any] | None = None) -> None:
    _resources.append(Resource(uri, name, description, operation, dict(fixed or {})))


def _load() -> None:
    global _loaded
    if _loaded:
        return
    with _load_lock:
        if not _loaded:
            from django.utils.module_loading import autodiscover_modules

            autodiscover_modules("operations")
            _loaded = True


def get_operation(name: str) -> Operation:
    _load()
    found = _operations.get(name)
    if found is None:
        raise NotFound(f"Unknown operation: {name[:ERROR_ECHO_MAX]}")
    return found


def executor_for(name: str) -> Executor:
    """The read pool for an operation that never writes, the embedding writes' pool for one that
    may embed passages, the write pool otherwise (and for unknown names)."""
    try:
        found = get_operation(name)
    except DomainError:
        return WRITE_POOL
    if found.read_only:
        return READ_POOL
    return EMBED_POOL if found.embeds else WRITE_POOL


def input_model(name: str) -> type[BaseModel]:
    """The input model of an operation (the REST schema documents request bodies with it)."""
    return get_operation(name).input_model


def output_model(name: str) -> type[BaseModel]:
    """The output model of an operation (the REST schema documents responses with it)."""
    found = get_operation(name).output_model
    if found is None:
        raise RuntimeError(f"operation {name!r} declares no output model")
    return found


def operations() -> list[Operation]:
    """Every operation (the tools and those only the REST and CLI adapters call), by name."""
    _load()
    return sorted(_operations.values(), key=lambda op: op.name)


def tools() -> list[Operation]:
    """The tools, in the seed's order (bhgbrain_site.core.contracts.TOOLS)."""
    _load()
    order = {name: position for position, name in enumerate(TOOLS)}
    return sorted((op for op in _operations.values() if op.tool), key=lambda op: order.get(op.name, len(order)))


def resources() -> list[Resource]:
    """The resources, in the seed's order (bhgbrain_site.core.contracts.RESOURCES)."""
    _load()
    order = {uri: position for position, uri in enumerate(RESOURCES)}
    return sorted(_resources, key=lambda r: order.get(r.uri, len(order)))


def _parse(model: type[BaseModel], arguments: Any, coerce: bool) -> BaseModel:
    if not isinstance(arguments, dict):
        raise InvalidInput("Invalid input: the arguments must be a JSON object")
    check_storable(arguments)
    try:
        return model.model_validate(arguments, strict=False if coerce else None)
    except ValidationError as exc:
        raise InvalidInput(describe_validation_error(exc)) from None


def _scoped(op: Operation, params: BaseModel, principal: Principal) -> BaseModel:
    """Check the caller may use the call's namespace; pin it so services filter by it; count a
    writing call against the caller's write rate (a scoped token's ``write_rate_per_minute``)."""
    if op.whole_store and principal.namespaces is not None:
        raise Forbidden(f"The {op.name} tool acts on every namespace: it needs the master token")
    if not op.scoped:
        return params
    writes = op.writes(params)
    pinned = _pinned(params, principal, writes=writes)
    if writes:
        write_admit(principal)
    return pinned


def _pinned(params: BaseModel, principal: Principal, *, writes: bool) -> BaseModel:
    """The namespace of a call (its own, else the caller's default) checked against the caller,
    and set on the arguments of a scoped caller."""
    from django.conf import settings

    namespace = getattr(params, "namespace", None) or principal.default_namespace(settings.BHGBRAIN.defaults.namespace)
    principal.check(namespace, writes=writes)
    if principal.namespaces is None or "namespace" not in type(params).model_fields:
        return params
    return params.model_copy(update={"namespace": namespace})


_writes_done = 0  # calls of writing operations this process finished (ok or not)


def writes_done() -> int:
    """A counter that moves whenever a writing operation of this process finishes: a snapshot of
    the store (GET /health) taken before it may be out of date."""
    return _writes_done


def call(name: str, arguments: Any, ctx: CallContext, *, coerce: bool = False) -> dict[str, Any]:
    """Validate and run one operation; raises DomainError subclasses on failure.
    ``coerce``: the arguments come from a query string (text to be read as numbers, booleans)."""
    op = get_operation(name)
    drop_broken_connections()
    started, outcome = time.perf_counter(), "ok"
    try:
        params = _parse(op.input_model, arguments, coerce)
        return op.handler(_scoped(op, params, ctx.principal), ctx)
    except DomainError as exc:
        outcome = exc.code
        raise
    except Exception as exc:
        outcome = "STORAGE_UNAVAILABLE" if storage_reason(exc) else "INTERNAL"
        raise
    finally:
        metrics.tool_call(op.name, outcome, time.perf_counter() - started)
        if not op.read_only:
            global _writes_done
            _writes_done += 1


def call_tool(name: str, arguments: Any, ctx: CallContext) -> dict[str, Any]:
    """A tool call (MCP tools/call, POST /tool/<name>): only the seed's tools answer."""
    _load()
    found = _operations.get(name)
    if found is None or not found.tool:
        raise NotFound(f"Unknown tool: {name[:ERROR_ECHO_MAX]}")
    return call(name, arguments, ctx)


def _query(uri: str) -> dict[str, str]:
    """The URI's query string; blank values mean "not given"."""
    params = parse_qs(urlsplit(uri).query, keep_blank_values=True)
    return {key: values[-1] for key, values in params.items() if values[-1] != ""}


def read_resource(uri: str, ctx: CallContext) -> dict[str, Any]:
    """Resolve a resource URI (static first, then templates) and run its operation.
    Query parameters the operation does not know are ignored."""
    if not isinstance(uri, str) or not uri or len(uri) > 2000:
        raise InvalidInput("uri: required, at most 2000 characters")
    base = uri.split("?", 1)[0]
    for found in sorted(resources(), key=lambda r: r.is_template):
        variables = found.match(base)
        if variables is None:
            continue
        fields = get_operation(found.operation).input_model.model_fields
        arguments = {k: v for k, v in _query(uri).items() if k in fields and k not in found.fixed}
        return call(found.operation, {**arguments, **variables, **found.fixed}, ctx, coerce=True)
    raise NotFound(f"Unknown resource: {base[:ERROR_ECHO_MAX]}")


# --------------------------------------------------------------------------- prompts and completions

PromptMessages = list[tuple[str, str]]  # (role "user" | "assistant", text)
PromptHandler = Callable[[Any, CallContext], PromptMessages]
COMPLETION_MAX = 100  # values one completion answer carries (MCP's limit)


@dataclass(frozen=True)
class Prompt:
    """A prompt template clients offer (as slash commands): its arguments are the fields of
    ``arguments_model`` (text, as MCP sends them; coerced like a query string), ``completes``
    names the completion kind of each argument that has one."""

    name: str
    title: str
    arguments_model: type[BaseModel]
    handler: PromptHandler
    completes: Mapping[str, str] = field(default_factory=dict)

    @property
    def description(self) -> str:
        return (self.handler.__doc__ or "").strip()

    def arguments(self) -> list[tuple[str, str, bool]]:
        """(name, description, required) of each argument."""
        return [(name, f.description or "", f.is_required()) for name, f in self.arguments_model.model_fields.items()]


# A completer answers (values, total) for what was typed: the whole-store kind "namespace" gets the
# namespaces the caller may see (None: every one), the others the one namespace to look in.
Completer = Callable[..., tuple[list[str], int]]

_prompts: dict[str, Prompt] = {}
_completers: dict[str, Completer] = {}
_resource_completions: dict[tuple[str, str], str] = {}  # (URI template, variable) → kind


def prompt(name: str, arguments_model: type[BaseModel], *, title: str,
           completes: Mapping[str, str] | None = None) -> Callable[[PromptHandler], PromptHandler]:
    """Register ``handler(params, ctx) -> [(role, text), …]`` as prompt ``name``; its docstring is
    the description."""

    def register(handler: PromptHandler) -> PromptHandler:
        if name in _prompts:
            raise RuntimeError(f"prompt {name!r} is registered twice")
        _prompts[name] = Prompt(name, title, arguments_model, handler, dict(completes or {}))
        return handler

    return register


def completer(kind: str, answer: Completer, *, resources: Mapping[str, str] | None = None) -> None:
    """Register how values of ``kind`` are completed; ``resources`` maps URI templates onto the
    variable this kind completes (``{"memory://{id}": "id"}``)."""
    _completers[kind] = answer
    for template, variable in (resources or {}).items():
        _resource_completions[(template, variable)] = kind


def prompts() -> list[Prompt]:
    _load()
    return sorted(_prompts.values(), key=lambda p: p.name)


def get_prompt(name: str, arguments: Mapping[str, str] | None, ctx: CallContext) -> tuple[Prompt, PromptMessages]:
    """Validate a prompt's arguments (unknown, missing or malformed: INVALID_INPUT naming it), check
    the caller may read its namespace, and build its messages."""
    _load()
    found = _prompts.get(name)
    if found is None:
        raise NotFound(f"Unknown prompt: {name[:ERROR_ECHO_MAX]}")
    params = _pinned(_parse(found.arguments_model, dict(arguments or {}), coerce=True), ctx.principal, writes=False)
    return found, found.handler(params, ctx)


def completion_kind(*, prompt_name: str | None = None, template: str | None = None, argument: str) -> str | None:
    """The kind of value an argument of a prompt (or a variable of a URI template) takes; None for
    an unknown prompt, template or argument (a completion is a hint: it has nothing to offer)."""
    _load()
    if prompt_name is not None:
        found = _prompts.get(prompt_name)
        return None if found is None else found.completes.get(argument)
    return _resource_completions.get((template or "", argument))


def complete(kind: str | None, prefix: str, ctx: CallContext, *, namespace: str | None = None) -> tuple[list[str], int]:
    """What may follow ``prefix`` for a value of ``kind``: (at most COMPLETION_MAX values, total),
    only from namespaces the caller may read (``namespace``: the one already chosen, else the
    caller's default). Nothing, never an error, for an unknown kind or a namespace out of reach."""
    from django.conf import settings

    answer = _completers.get(kind or "")
    if answer is None:
        return [], 0
    principal = ctx.principal
    if kind == "namespace":
        return answer(prefix=prefix, namespaces=principal.namespaces, limit=COMPLETION_MAX)
    namespace = namespace or principal.default_namespace(settings.BHGBRAIN.defaults.namespace)
    try:
        principal.check(namespace, writes=False)
    except Forbidden:
        return [], 0
    return answer(prefix=prefix, namespace=namespace, limit=COMPLETION_MAX)
