"""The MCP server (mcp SDK 2.x low-level ``Server``): the registry's tools and resources.

This package is the MCP transport only: it imports the operation registry
(bhgbrain_site.registry), never an app. Tool results carry the JSON both as
``structuredContent`` and as one text block; a DomainError becomes ``isError: true`` with the
error envelope. Operations are synchronous Django code, so they run in worker threads. Over
HTTP the ASGI shell authenticates the request and leaves the caller's principal in the scope
(``PRINCIPAL_SCOPE_KEY``); over stdio the caller is the local user.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar, cast

from mcp import types
from mcp.server.lowlevel import Server

from bhgbrain_site import registry
from bhgbrain_site.core.calls import CallContext, Principal
from bhgbrain_site.core.errors import to_envelope
from bhgbrain_site.core.pools import READ_POOL, WRITE_POOL, in_pool
from mcp_bridge import notifications, prompts, stdio_pipes, subscriptions
from mcp_bridge.schemas import lean_schema

logger = logging.getLogger("bhgbrain.mcp")

PRINCIPAL_SCOPE_KEY = "bhgbrain.principal"
NO_ACCESS = Principal(name="none", namespaces=frozenset(), read_only=True)
T = TypeVar("T")

# Over stdio the server answers `initialize` while Django is still starting in a background
# thread; every call that reaches the registry (it loads the apps' operations) waits for it.
_ready = threading.Event()
_ready.set()  # the HTTP server starts Django first; stdio clears this until it is up
_startup_error: list[BaseException] = []


def _wait_ready() -> None:
    _ready.wait()
    if _startup_error:
        raise RuntimeError("server start-up failed; see the log") from _startup_error[0]

INSTRUCTIONS = (
    "BHGBrain is your persistent memory. Use `recall` (semantic) or `search` (hybrid) before "
    "answering questions about past work; use `remember` to store decisions, facts and procedures "
    "worth keeping. Read memory://inject at the start of a session for standing context."
)


def _json(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, default=str)


def _caller(ctx: Any, transport: str) -> CallContext:
    """stdio is the local user (full access); over HTTP the principal the ASGI shell found."""
    request = getattr(ctx, "request", None)
    if transport == "stdio" or request is None:
        return CallContext(actor=f"mcp:{transport}")
    peer = request.client.host if getattr(request, "client", None) else "unknown"
    principal = request.scope.get(PRINCIPAL_SCOPE_KEY) or NO_ACCESS  # never widen access here
    return CallContext(actor=f"mcp:http:{peer}", principal=principal)


def _annotations(op: registry.Operation) -> types.ToolAnnotations:
    """The registry's hints as MCP tool annotations; every tool acts on this store only."""
    writes = not op.read_only
    return types.ToolAnnotations(title=op.title, read_only_hint=op.read_only, destructive_hint=writes and op.hints.destructive,
                                 idempotent_hint=op.read_only or op.hints.idempotent, open_world_hint=False)


def tool_definitions() -> list[types.Tool]:
    schemas = input_schemas()
    return [
        types.Tool(name=t.name, title=t.title, description=t.description, input_schema=schemas[t.name],
                   output_schema=_output_schema(t), annotations=_annotations(t))
        for t in registry.tools()
    ]


@functools.cache
def input_schemas() -> dict[str, dict[str, Any]]:
    """Every tool's input schema by name, built once (the tools are fixed once the registry is loaded)."""
    return {t.name: t.input_model.model_json_schema() for t in registry.tools()}


def tool_input_schema(name: str) -> dict[str, Any] | None:
    """One tool's input schema, for the SDK's check of a 2026-07-28 call's ``Mcp-Param-*`` headers.
    Without it the SDK runs the whole ``tools/list`` handler before every such call with arguments
    (measured: a Python SDK ``Client`` call took 50 ms instead of 10)."""
    _wait_ready()
    return input_schemas().get(name)


def _output_schema(operation: registry.Operation) -> dict[str, Any] | None:
    """The operation's output schema in the form clients validate fastest (mcp_bridge/schemas.py)."""
    schema = operation.output_schema()
    return None if schema is None else lean_schema(schema)


def _run_tool(name: str, arguments: dict[str, Any], caller: CallContext) -> types.CallToolResult:
    try:
        result = registry.call_tool(name, arguments, caller)
    except Exception as exc:  # noqa: BLE001 - every failure becomes the envelope (bugs → INTERNAL)
        _status, body = to_envelope(exc)
        return types.CallToolResult(content=[types.TextContent(type="text", text=_json(body))], structured_content=body, is_error=True)
    return types.CallToolResult(content=[types.TextContent(type="text", text=_json(result))], structured_content=result)


def _in_thread(work: Callable[[], T], operation: str | None = None) -> Awaitable[T]:
    """Run Django work, once Django is up, in the registry's thread pools (the ones HTTP uses: each
    thread keeps its database connection, so a call sets none up): the read pool, or the write
    pool for an ``operation`` that writes."""

    def run() -> T:
        _wait_ready()
        return work()

    if operation is None:
        executor = READ_POOL
    elif _ready.is_set():
        executor = registry.executor_for(operation)
    else:
        executor = WRITE_POOL  # which pool is unknown until the apps are loaded
    return in_pool(executor, run)


def _read(uri: str, caller: CallContext) -> types.ReadResourceResult:
    try:
        body = registry.read_resource(uri, caller)
    except Exception as exc:  # noqa: BLE001 - the envelope is the resource's content
        _status, body = to_envelope(exc)
        body = {**body, "isError": True}
    return types.ReadResourceResult(contents=[types.TextResourceContents(uri=uri, mime_type="application/json", text=_json(body))])


class _Handlers:
    """The MCP requests this server answers, for one transport ("stdio" / "http": it only
    decides who the caller is)."""

    def __init__(self, transport: str) -> None:
        self.transport = transport

    async def list_tools(self, ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(tools=await _in_thread(tool_definitions))

    async def call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        caller = dataclasses.replace(_caller(ctx, self.transport), progress=notifications.progress_for(ctx))
        token = notifications.calling(ctx)  # log records of the call reach its client (notifications.py)
        try:
            return await _in_thread(lambda: _run_tool(params.name, dict(params.arguments or {}), caller), params.name)
        finally:
            notifications.done_calling(token)

    async def list_resources(self, ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
        resources = await _in_thread(registry.resources)
        return types.ListResourcesResult(resources=[
            types.Resource(uri=r.uri, name=r.name, description=r.description, mime_type="application/json")
            for r in resources if not r.is_template
        ])

    async def list_templates(self, ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListResourceTemplatesResult:
        resources = await _in_thread(registry.resources)
        return types.ListResourceTemplatesResult(resource_templates=[
            types.ResourceTemplate(uri_template=r.uri, name=r.name, description=r.description, mime_type="application/json")
            for r in resources if r.is_template
        ])

    async def read_resource(self, ctx: Any, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        caller = _caller(ctx, self.transport)
        token = notifications.calling(ctx)
        try:
            return await _in_thread(lambda: _read(str(params.uri), caller))
        finally:
            notifications.done_calling(token)

    async def set_level(self, ctx: Any, params: types.SetLevelRequestParams) -> types.EmptyResult:
        notifications.set_level(ctx, _caller(ctx, self.transport).principal, params.level)
        return types.EmptyResult()

    async def subscribe(self, ctx: Any, params: types.SubscribeRequestParams) -> types.EmptyResult:
        caller, uri = _caller(ctx, self.transport), str(params.uri)
        watch = await _in_thread(lambda: subscriptions.checked_watch(uri, caller))
        await subscriptions.subscribe(ctx, uri, watch, caller.principal)
        return types.EmptyResult()

    async def unsubscribe(self, ctx: Any, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
        await subscriptions.unsubscribe(ctx, str(params.uri))
        return types.EmptyResult()

    async def list_prompts(self, ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
        return types.ListPromptsResult(prompts=await _in_thread(prompts.prompt_definitions))

    async def get_prompt(self, ctx: Any, params: types.GetPromptRequestParams) -> types.GetPromptResult:
        caller = _caller(ctx, self.transport)
        return await _in_thread(lambda: prompts.get_prompt(params.name, params.arguments, caller))

    async def complete(self, ctx: Any, params: types.CompleteRequestParams) -> types.CompleteResult:
        caller = _caller(ctx, self.transport)
        return await _in_thread(lambda: prompts.complete(params, caller))


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("bhgbrain-django")
    except PackageNotFoundError:
        return "0.0.0"


def build_server(transport: str, *, sessions: bool = True) -> Server[Any]:
    """One MCP server; ``transport`` ("stdio" / "http") only decides who the caller is. Without
    ``sessions`` (stateless HTTP, several workers) nothing outlives a request: no subscriptions."""
    handlers = _Handlers(transport)
    server: Server[Any] = Server(
        "bhgbrain",
        version=_version(),
        instructions=INSTRUCTIONS,
        get_tool_input_schema=tool_input_schema,
        on_list_tools=handlers.list_tools,
        on_call_tool=handlers.call_tool,
        on_list_resources=handlers.list_resources,
        on_list_resource_templates=handlers.list_templates,
        on_read_resource=handlers.read_resource,
        on_list_prompts=handlers.list_prompts,
        on_get_prompt=handlers.get_prompt,
        on_completion=handlers.complete,
        on_subscribe_resource=handlers.subscribe if sessions else None,
        on_unsubscribe_resource=handlers.unsubscribe if sessions else None,
    )
    # Registered after construction: the constructor's on_set_logging_level warns that the 2026-07-28
    # protocol drops logging; the handshake versions clients speak today have it.
    server.add_request_handler("logging/setLevel", types.SetLevelRequestParams, handlers.set_level)
    return server


async def serve_stdio(start_django: Any = None) -> None:
    """MCP over stdin/stdout; the SDK diverts fd 1 to stderr while serving.

    ``start_django`` (set up Django and migrate) runs in a thread while the protocol is
    already being served, so `initialize` does not wait for it; tool and resource calls do.
    """
    if start_django is not None:
        _ready.clear()

        def boot() -> None:
            try:
                start_django()
            except BaseException as exc:  # noqa: BLE001 - reported to every waiting call
                _startup_error.append(exc)
                logger.exception("start-up failed")
            finally:
                _ready.set()

        threading.Thread(target=boot, name="bhgbrain-django-start", daemon=True).start()
    server = build_server("stdio")
    async with _stdio_streams() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


@contextlib.asynccontextmanager
async def _stdio_streams() -> AsyncIterator[Any]:
    """The SDK's stdio transport; on pipes (as MCP clients start servers) fed by the loop's own
    pipe I/O instead of a worker thread per line (mcp_bridge/stdio_pipes.py)."""
    from mcp.server.stdio import stdio_server

    if not stdio_pipes.pipes_available():
        async with stdio_server() as streams:
            yield streams
        return
    async with stdio_pipes.pipe_stdio() as (lines, text):
        async with stdio_server(stdin=cast(Any, lines), stdout=cast(Any, text)) as streams:
            yield streams
