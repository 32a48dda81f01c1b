"""What the MCP server tells a client unasked: progress of its long calls, and log messages at or
above the level it set (``logging/setLevel``).

A client connection (the stdio process, or one streamable-HTTP session) gets a :class:`Peer` the
first time it asks for something that outlives one request: a log level, a subscription
(mcp_bridge/subscriptions.py). The peer lives in the SDK's per-connection ``state`` and is
forgotten through the connection's ``exit_stack`` when the connection closes (DELETE, idle
timeout, end of stdin).

Operations run in the registry's worker threads; whatever they report (``CallContext.progress``,
a ``bhgbrain`` log record) hops back to the event loop with ``run_coroutine_threadsafe`` and the
worker waits (briefly) until it is sent, so a call's notifications go out before its result.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import logging
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, get_args

import anyio
from mcp import types
from mcp.server.connection import Connection
from mcp.shared.jsonrpc_dispatcher import progress_token_from_params

from bhgbrain_site.core.calls import Principal
from bhgbrain_site.core.log_format import client_safe
from bhgbrain_site.core.progress import Progress

LEVELS: tuple[str, ...] = get_args(types.LoggingLevel)  # severity ascending (RFC 5424)
# MCP level → the Python level at and above which records are sent.
PYTHON_LEVEL = {"debug": logging.DEBUG, "info": logging.INFO, "notice": logging.INFO + 5, "warning": logging.WARNING,
                "error": logging.ERROR, "critical": logging.CRITICAL, "alert": logging.CRITICAL + 5,
                "emergency": logging.CRITICAL + 9}
# Records of these loggers are about other callers (a refused token's preview): never shown to a client.
PRIVATE_LOGGERS = ("bhgbrain.security",)
SEND_WAIT = 2.0  # seconds a worker thread waits for its notification to be sent
PROGRESS_INTERVAL = 0.1  # seconds between two progress notifications of one call (the last is always sent)
STREAMED_KEY = "bhgbrain.mcp.streamed"  # in an HTTP request's scope: the request is answered with an SSE stream
_PEER_KEY = "bhgbrain.peer"


@dataclass(eq=False)
class Peer:
    """One client connection: where to send, whose it is, what it asked for."""

    connection: Connection
    principal: Principal
    log_level: int | None = None  # a Python level; None: no log messages
    watches: dict[str, Any] = field(default_factory=dict)  # subscribed URI → its Watch (subscriptions.py)

    @property
    def sees_everything(self) -> bool:
        return self.principal.namespaces is None


@dataclass(frozen=True)
class CallTarget:
    """The MCP request a worker thread works for (a context variable copied into the thread)."""

    peer: Peer | None
    session: Any  # the request's ServerSession
    request_id: Any
    streamed: bool  # its notifications can ride the request's own stream


PEERS: list[Peer] = []
_calling: contextvars.ContextVar[CallTarget | None] = contextvars.ContextVar("bhgbrain_mcp_call", default=None)
_loop: asyncio.AbstractEventLoop | None = None
_pending: set[asyncio.Task[Any]] = set()


def _connection(ctx: Any) -> Connection:
    # The SDK keeps per-connection state and teardown on `Connection` (documented for handlers and
    # middleware), but its request context does not expose it yet (TODO(L54) in mcp.server.runner).
    return ctx.session._connection  # noqa: SLF001


def streamed(ctx: Any) -> bool:
    """Whether notifications about this request can reach the client: always over stdio; over HTTP
    only when the request is answered with an SSE stream (mcp_bridge/streamable_http.py decides)."""
    request = getattr(ctx, "request", None)
    return request is None or bool(request.scope.get(STREAMED_KEY))


def peer_of(ctx: Any, principal: Principal | None = None) -> Peer | None:
    """The connection's peer; created (with ``principal``) when given one, else None if there is none."""
    connection = _connection(ctx)
    peer = connection.state.get(_PEER_KEY)
    if peer is None and principal is not None:
        _note_loop()
        peer = connection.state[_PEER_KEY] = Peer(connection, principal)
        PEERS.append(peer)
        connection.exit_stack.callback(_forget, peer)
        _install_log_handler()
    return peer


def _forget(peer: Peer) -> None:
    if peer in PEERS:
        PEERS.remove(peer)
    _log_handler.refresh()


def set_level(ctx: Any, principal: Principal, level: str) -> None:
    """``logging/setLevel``: this connection gets log messages at ``level`` and above."""
    peer = peer_of(ctx, principal)
    assert peer is not None
    peer.log_level = PYTHON_LEVEL[level]
    _log_handler.refresh()


def _note_loop() -> None:
    global _loop
    _loop = asyncio.get_running_loop()  # the server's one event loop, where notifications are sent


def calling(ctx: Any) -> contextvars.Token[CallTarget | None]:
    """Mark the current context (copied into the worker thread) as working for this request."""
    _note_loop()
    return _calling.set(CallTarget(peer_of(ctx), ctx.session, ctx.request_id, streamed(ctx)))


def done_calling(token: contextvars.Token[CallTarget | None]) -> None:
    _calling.reset(token)


def on_loop(make: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run ``make()`` on the server's event loop: from a worker thread, wait until it is done (at
    most SEND_WAIT); on the loop thread itself, in a task (never block the loop)."""
    loop = _loop
    if loop is None or loop.is_closed():
        return
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        task = loop.create_task(make())
        _pending.add(task)
        task.add_done_callback(_pending.discard)
        return
    future = asyncio.run_coroutine_threadsafe(make(), loop)
    try:
        future.result(timeout=SEND_WAIT)
    except (concurrent.futures.TimeoutError, anyio.ClosedResourceError, anyio.BrokenResourceError):
        pass  # a slow or departed client must not hold up, or break, the work that reported


# --------------------------------------------------------------------------- progress


class ProgressRelay:
    """``CallContext.progress`` for one call whose client passed a progress token: each report
    becomes ``notifications/progress`` on the call's own stream. Stages restart their counts, and
    MCP wants the progress value to grow, so each stage continues from where the last one ended;
    the message names the stage. At most one notification per PROGRESS_INTERVAL, except a stage's
    last."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.stage: str | None = None
        self.offset = 0.0  # where the current stage starts
        self.sent = -1.0  # the last value sent
        self.sent_at = 0.0

    def __call__(self, stage: str, done: int, total: int | None) -> None:
        if stage != self.stage:
            self.stage, self.offset = stage, max(self.sent, 0.0) + (1 if self.sent >= 0 else 0)
        value = self.offset + done
        last = total is not None and done >= total
        now = time.monotonic()
        if value <= self.sent or (not last and now - self.sent_at < PROGRESS_INTERVAL):
            return
        self.sent, self.sent_at = value, now
        overall = self.offset + total if total is not None else None
        message = f"{stage}: {done}" + (f"/{total}" if total is not None else "")
        on_loop(lambda: self.session.report_progress(value, overall, message))


def progress_for(ctx: Any) -> Progress | None:
    """A relay when the client asked for progress (and can receive it), else None: nobody watches."""
    if progress_token_from_params(ctx.params) is None or not streamed(ctx):
        return None
    return ProgressRelay(ctx.session)


# --------------------------------------------------------------------------- log messages


def _entry(record: logging.LogRecord) -> dict[str, Any] | None:
    text = client_safe(record.getMessage())  # the message only: never a traceback
    if text is None:
        return None
    level = next((name for name in reversed(LEVELS) if PYTHON_LEVEL[name] <= record.levelno), "debug")
    return {"level": level, "logger": record.name, "data": text}


def _send_to(peer: Peer, params: dict[str, Any], target: CallTarget | None) -> Callable[[], Coroutine[Any, Any, None]]:
    if target is not None and target.peer is peer and target.streamed:
        notification = types.LoggingMessageNotification(params=types.LoggingMessageNotificationParams(**params))
        return lambda: target.session.send_notification(notification, related_request_id=target.request_id)
    return lambda: peer.connection.notify("notifications/message", params)


class ClientLogHandler(logging.Handler):
    """Forwards ``bhgbrain`` log records to the peers that set a level at or below theirs: a
    record logged while serving a call goes to that call's peer (on the call's own stream when it
    has one); every record goes to the peers that see every namespace (stdio, the master token).
    A scoped client never hears about other namespaces' work."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.floor = logging.CRITICAL + 100  # the lowest level any peer wants

    def refresh(self) -> None:
        levels = [peer.log_level for peer in PEERS if peer.log_level is not None]
        self.floor = min(levels, default=logging.CRITICAL + 100)

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno < self.floor or record.name.startswith(PRIVATE_LOGGERS):
            return
        target = _calling.get()
        peers = [peer for peer in PEERS if peer.log_level is not None and record.levelno >= peer.log_level
                 and (peer.sees_everything or (target is not None and target.peer is peer))]
        if not peers:
            return
        params = _entry(record)
        if params is None:
            return
        for peer in peers:
            on_loop(_send_to(peer, params, target))

    def handle(self, record: logging.LogRecord) -> bool:
        # Without the handler's lock: emit may wait for the event loop, and the loop thread logging
        # meanwhile must not wait for that lock (emit is safe to run in several threads at once).
        if self.filter(record):
            self.emit(record)
        return True


_log_handler = ClientLogHandler()


def _install_log_handler() -> None:
    root = logging.getLogger("bhgbrain")
    if _log_handler not in root.handlers:
        root.addHandler(_log_handler)
