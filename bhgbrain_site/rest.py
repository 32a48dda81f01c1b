"""DRF glue: the exception handler (the one error envelope) and the base of every REST viewset.

A viewset action is an adapter over the operation registry: it gathers the operation's
arguments from the path, the query string and the body, and calls it with the caller's
context, so validation and namespace scoping are the registry's, never the view's.
"""
from __future__ import annotations

import functools
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, ClassVar

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, HttpResponse
from rest_framework import exceptions, viewsets
from rest_framework.permissions import SAFE_METHODS
from rest_framework.request import Request
from rest_framework.response import Response

from bhgbrain_site import registry
from bhgbrain_site.core.calls import CallContext
from bhgbrain_site.core.errors import InvalidInput, error_for_status, to_envelope
from bhgbrain_site.core.pools import EMBED_POOL, READ_POOL, WRITE_POOL

# Set on the views OperationViewSet.as_view makes: bhgbrain_site.server.asgi_routes serves them straight
# from ASGI (they need none of Django's middleware: no session, no CSRF, no cookie).
POOLED = "bhgbrain_pooled"


def _drf_message(exc: exceptions.APIException) -> str:
    detail = exc.detail
    if isinstance(detail, dict):
        return "Invalid input: " + "; ".join(f"{field}: {' '.join(map(str, msgs if isinstance(msgs, list) else [msgs]))}"
                                             for field, msgs in detail.items())
    if isinstance(detail, list):
        return "Invalid input: " + "; ".join(map(str, detail))
    return str(detail)


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response:
    """DRF's errors and our DomainErrors, all as {"error": {code, message, retryable}}."""
    if isinstance(exc, exceptions.APIException):
        exc = error_for_status(exc.status_code, _drf_message(exc))
    status, body = to_envelope(exc)
    retry_after = body["error"].get("retry_after")
    return Response(body, status=status, headers={"Retry-After": str(retry_after)} if retry_after is not None else None)


def call_context(request: Request) -> CallContext:
    """The caller of a request: the principal the bearer middleware found (bhgbrain_site.server.security)."""
    actor = f"api:{request.META.get('REMOTE_ADDR') or 'unknown'}"
    principal = getattr(request, "bhgbrain_principal", None)
    return CallContext(actor=actor, principal=principal) if principal else CallContext(actor=actor)


def _plain(response: HttpResponse) -> HttpResponse:
    """A rendered DRF response as a plain one: Django would otherwise render it again in a thread
    of its own (one more hop per request, on a thread created for the request)."""
    render = getattr(response, "render", None)
    if render is None:
        return response
    render()
    plain = HttpResponse(response.content, status=response.status_code)
    for header, value in response.items():
        plain[header] = value
    return plain


def _pool(viewset: type[OperationViewSet], method: str, action: str | None) -> Executor:
    """The pool a request to this viewset runs in (bhgbrain_site.core.pools)."""
    if method in SAFE_METHODS or viewset.reads_only:
        return READ_POOL
    return EMBED_POOL if action in viewset.embedding_actions else WRITE_POOL


class OperationViewSet(viewsets.ViewSet):
    """Each action gathers an operation's arguments and returns what the operation returns.

    Under ASGI the (synchronous) DRF view runs in the registry's thread pools, like /tool and
    MCP calls: the read pool for GET and for a viewset whose POSTs only read (``reads_only``),
    the embedding writes' pool for an action that stores passages (``embedding_actions``: they
    wait for the model), the write pool otherwise. Left to Django, each request would run on a
    thread created for it, with a database connection opened and closed for it. Under WSGI (and Django's test client)
    the view runs in the caller's thread, as a plain DRF view does.
    """

    reads_only: ClassVar[bool] = False  # search and recall: POST, but nothing written
    embedding_actions: ClassVar[frozenset[str]] = frozenset()  # actions that embed (registry.Operation.embeds)

    @classmethod
    def as_view(cls, actions: dict[str, str] | None = None, **initkwargs: Any) -> Callable[..., Any]:
        view = super().as_view(actions, **initkwargs)

        def run(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            return _plain(view(request, *args, **kwargs))

        @functools.wraps(view)
        async def pooled(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if not isinstance(request, ASGIRequest):  # WSGI, the test client: the caller's own thread
                return await sync_to_async(run, thread_sensitive=True)(request, *args, **kwargs)
            method = request.method or "GET"
            executor = _pool(cls, method, (actions or {}).get(method.lower()))
            return await sync_to_async(run, thread_sensitive=False, executor=executor)(request, *args, **kwargs)

        setattr(pooled, POOLED, True)
        return pooled

    def run(self, name: str, arguments: dict[str, Any], *, status: int = 200, coerce: bool = False) -> Response:
        result = registry.call(name, arguments, call_context(self.request), coerce=coerce)
        return Response(result, status=status)

    def body(self) -> dict[str, Any]:
        """The request body, which must be a JSON object (an empty body is an empty object)."""
        if not self.request.body:  # read first: DRF then parses the cached bytes
            return {}
        data = self.request.data
        if not isinstance(data, dict):
            raise InvalidInput("Invalid input: the body must be a JSON object")
        return dict(data)

    def query(self, *names: str, **renamed: str) -> dict[str, str]:
        """The query parameters ``names`` (and ``renamed``: operation argument → parameter), blanks dropped."""
        params = self.request.query_params
        wanted = {**{name: name for name in names}, **renamed}
        return {arg: params[key] for arg, key in wanted.items() if params.get(key, "") != ""}
