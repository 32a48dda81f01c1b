"""The tool registry: each tool defined once (input model, description, service call).

Used by ``POST /tool/<name>`` now, and by the MCP server and the CLI as they land.
A tool is registered only when its service exists.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from pydantic import BaseModel, ValidationError

from bhgbrain_site.errors import AuthRequired, InvalidInput, NotFound, describe_validation_error
from mcp_bridge.tokens import FULL_ACCESS, Principal


@dataclass(frozen=True)
class CallContext:
    """Who is calling: ``actor`` for the audit log (``client_id``), ``principal`` for access."""

    actor: str
    principal: Principal = FULL_ACCESS


@dataclass(frozen=True)
class Tool:
    name: str
    input_model: type[BaseModel]
    handler: Callable[[Any, CallContext], dict[str, Any]]
    writes: Callable[[Any], bool]
    whole_store: bool = False  # reads or replaces every namespace: the master token only

    @property
    def description(self) -> str:
        return (self.handler.__doc__ or "").strip()


_TOOLS: dict[str, Tool] = {}


def tool(
    name: str, input_model: type[BaseModel], *, writes: Callable[[Any], bool] = lambda params: False,
    whole_store: bool = False,
) -> Callable[[Callable[..., dict[str, Any]]], Callable[..., dict[str, Any]]]:
    """Register ``handler(params, ctx)`` under ``name``; its docstring is the description.
    ``writes(params)`` says whether the call changes data (refused for read-only tokens);
    ``whole_store`` tools (backup) act on every namespace and refuse scoped tokens."""

    def register(handler: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        _TOOLS[name] = Tool(name=name, input_model=input_model, handler=handler, writes=writes, whole_store=whole_store)
        return handler

    return register


def get_tool(name: str) -> Tool:
    _load_tools()
    if name not in _TOOLS:
        raise NotFound(f"Unknown tool: {name[:100]}")
    return _TOOLS[name]


def all_tools() -> list[Tool]:
    _load_tools()
    return list(_TOOLS.values())


def parse_arguments(tool_: Tool, arguments: Any) -> BaseModel:
    if not isinstance(arguments, dict):
        raise InvalidInput("Invalid input: the arguments must be a JSON object")
    try:
        return tool_.input_model.model_validate(arguments)
    except ValidationError as exc:
        raise InvalidInput(describe_validation_error(exc)) from None


def call_tool(name: str, arguments: Any, ctx: CallContext) -> dict[str, Any]:
    """Validate and run one tool call; raises DomainError subclasses on failure."""
    import time

    from bhgbrain_site.errors import DomainError
    from bhgbrain_site.metrics import metrics

    tool_ = get_tool(name)
    started, outcome = time.perf_counter(), "ok"
    try:
        params = parse_arguments(tool_, arguments)
        return tool_.handler(_scoped(tool_, params, ctx.principal), ctx)
    except DomainError as exc:
        outcome = exc.code
        raise
    except Exception:
        outcome = "INTERNAL"
        raise
    finally:
        metrics.tool_call(tool_.name, outcome, time.perf_counter() - started)


def _scoped(tool_: Tool, params: BaseModel, principal: Principal) -> BaseModel:
    """Check the caller may use the call's namespace; pin it so services filter by it."""
    from django.conf import settings

    if tool_.whole_store and principal.namespaces is not None:
        raise AuthRequired(f"The {tool_.name} tool acts on every namespace: it needs the master token")
    namespace = getattr(params, "namespace", None) or principal.default_namespace(settings.BHGBRAIN.defaults.namespace)
    principal.check(namespace, writes=tool_.writes(params))
    if principal.namespaces is None or "namespace" not in type(params).model_fields:
        return params
    return params.model_copy(update={"namespace": namespace})


def _load_tools() -> None:
    from mcp_bridge import tools  # noqa: F401 - registers the tools on import
