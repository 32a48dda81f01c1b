"""MCP prompts (prompts/list, prompts/get) and completions (completion/complete), both from the
operation registry: the apps declare the prompts, their arguments and what completes each one;
this module only speaks the protocol. Synchronous: the server runs these in its thread pools.

A prompt's failure is a JSON-RPC error (MCP has no ``isError`` for prompts): unknown prompt,
unknown, missing or malformed argument, or a namespace the caller may not read → "Invalid
params" with the error envelope as ``data``; anything else → "Internal error", never its text.
"""
from __future__ import annotations

from mcp import MCPError, types

from bhgbrain_site import registry
from bhgbrain_site.core.calls import CallContext
from bhgbrain_site.core.errors import to_envelope

# the envelope's HTTP statuses that mean "the request was wrong" (bad input, not found, forbidden)
_CLIENT_ERRORS = frozenset({400, 403, 404})


def prompt_definitions() -> list[types.Prompt]:
    return [
        types.Prompt(name=p.name, title=p.title, description=p.description, arguments=[
            types.PromptArgument(name=name, description=description, required=required)
            for name, description, required in p.arguments()
        ])
        for p in registry.prompts()
    ]


def _mcp_error(exc: Exception) -> MCPError:
    status, body = to_envelope(exc)
    code = types.INVALID_PARAMS if status in _CLIENT_ERRORS else types.INTERNAL_ERROR
    return MCPError(code, body["error"]["message"], data=body["error"])


def get_prompt(name: str, arguments: dict[str, str] | None, caller: CallContext) -> types.GetPromptResult:
    try:
        found, messages = registry.get_prompt(name, arguments, caller)
    except Exception as exc:  # noqa: BLE001 - every failure becomes a JSON-RPC error (bugs → INTERNAL)
        raise _mcp_error(exc) from None
    return types.GetPromptResult(description=found.description, messages=[
        types.PromptMessage(role=role, content=types.TextContent(type="text", text=text)) for role, text in messages
    ])


def complete(params: types.CompleteRequestParams, caller: CallContext) -> types.CompleteResult:
    """Values for one argument of a prompt or one variable of a resource template, from the
    namespaces the caller may read (the namespace already chosen in ``context``, else its default)."""
    chosen = dict(params.context.arguments or {}) if params.context else {}
    try:
        if isinstance(params.ref, types.PromptReference):
            kind = registry.completion_kind(prompt_name=params.ref.name, argument=params.argument.name)
        else:
            kind = registry.completion_kind(template=params.ref.uri, argument=params.argument.name)
        values, total = registry.complete(kind, params.argument.value, caller, namespace=chosen.get("namespace"))
    except Exception as exc:  # noqa: BLE001 - an unknown prompt is invalid params; a bug is INTERNAL
        raise _mcp_error(exc) from None
    return types.CompleteResult(completion=types.Completion(values=values, total=total, has_more=total > len(values)))
