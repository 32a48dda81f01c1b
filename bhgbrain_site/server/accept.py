"""Several HTTP workers share out their connections: the one serving fewer takes the next.

uvicorn's workers share the socket its supervisor bound, and a worker's event loop accepts every
pending connection as soon as the socket turns readable. Which worker wakes first is chance, and a
kept-alive connection stays with the worker that accepted it for good: agents connecting one
after another, or all at once, landed 4/4, 5/3, 6/2 and 8/0 on two workers (docs/performance.md),
and the worker holding 6 or 8 of them queued their requests behind its one GIL while the other
idled. So with ``workers > 1`` each worker's loop (``new_event_loop``, uvicorn's ``loop=``
factory) accepts one connection at a time, and first waits a moment that grows with the
connections it already serves (``DELAY_PER_CONNECTION`` each, at most ``MAX_DELAY``): every
worker is woken by the same readiness, and the one with fewer connections reaches ``accept`` first.
No state is shared between the workers; a worker with no connection accepts at once, and one
that is busy (the GIL held by a request) simply leaves the connection to the other.
"""
from __future__ import annotations

import asyncio
import logging
import socket
import ssl as ssl_module
from collections.abc import Callable
from typing import Any

logger = logging.getLogger("bhgbrain")

DELAY_PER_CONNECTION = 0.001  # seconds: larger than a woken idle process's scheduling jitter
MAX_DELAY = 0.02  # a new connection to workers that all serve 20 or more waits at most this
RETRY_AFTER_ERROR = 1.0  # seconds, as asyncio's own accept loop pauses after running out of descriptors


def accept_delay(live: int) -> float:
    """How long a worker serving ``live`` connections waits before it takes a new one."""
    return min(live * DELAY_PER_CONNECTION, MAX_DELAY)


class BalancedAcceptor:
    """Stands in for the ``asyncio.Server`` uvicorn keeps per listening socket (it calls
    ``close`` and ``wait_closed`` only): one task accepting from ``sock``."""

    def __init__(self, loop: asyncio.AbstractEventLoop, protocol_factory: Callable[[], asyncio.Protocol],
                 sock: socket.socket, ssl: ssl_module.SSLContext | None, backlog: int) -> None:
        self._loop, self._factory, self._sock, self._ssl = loop, protocol_factory, sock, ssl
        self._transports: set[asyncio.BaseTransport] = set()
        self._connecting: set[asyncio.Task[None]] = set()  # accepted, transport not made yet (a TLS handshake)
        sock.setblocking(False)  # the workers share the open file: every one of them polls
        sock.listen(backlog)  # uvicorn's supervisor binds; asyncio's create_server would listen here
        self._task = loop.create_task(self._accept_forever())
        self._task.add_done_callback(_report_end)

    def live(self) -> int:
        """Connections this worker serves now (closed ones are dropped as they are counted)."""
        self._transports = {t for t in self._transports if not t.is_closing()}
        return len(self._transports) + len(self._connecting)

    def close(self) -> None:
        self._task.cancel()

    async def wait_closed(self) -> None:
        try:
            await self._task
        except asyncio.CancelledError:
            pass

    async def _accept_forever(self) -> None:
        while True:
            await self._readable()
            delay = accept_delay(self.live())
            if delay:
                await asyncio.sleep(delay)
            try:
                connection, _ = self._sock.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                continue  # another worker took it, or the client gave up
            except OSError as exc:  # out of descriptors or memory, mostly: a pause, as asyncio's own loop makes
                logger.error("accepting an HTTP connection failed (%s); retrying in %.0f s", exc, RETRY_AFTER_ERROR)
                await asyncio.sleep(RETRY_AFTER_ERROR)
                continue
            task = self._loop.create_task(self._connect(connection))
            self._connecting.add(task)  # also the task's only strong reference
            task.add_done_callback(self._connecting.discard)

    async def _readable(self) -> None:
        """Until a connection is pending (the reader is removed again: the socket stays
        readable while this worker waits its turn, and the wait must not spin)."""
        ready = self._loop.create_future()
        fd = self._sock.fileno()
        self._loop.add_reader(fd, lambda: ready.done() or ready.set_result(None))
        try:
            await ready
        finally:
            self._loop.remove_reader(fd)

    async def _connect(self, connection: socket.socket) -> None:
        connection.setblocking(False)
        if connection.family in (socket.AF_INET, socket.AF_INET6):
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            transport, _ = await self._loop.connect_accepted_socket(self._factory, connection, ssl=self._ssl)
        except (OSError, ssl_module.SSLError) as exc:  # the client went away, or its TLS handshake failed
            logger.debug("an accepted HTTP connection was dropped: %s", exc)
            connection.close()
        else:
            self._transports.add(transport)


def _report_end(task: asyncio.Task[None]) -> None:
    """A worker that stops accepting for any reason but its shutdown says so (it would serve its
    open connections and take no new one)."""
    if not task.cancelled() and task.exception() is not None:
        logger.error("this worker stopped accepting HTTP connections", exc_info=task.exception())


def _base_loop_class() -> type[asyncio.AbstractEventLoop]:
    try:
        import uvloop
    except ImportError:
        return asyncio.SelectorEventLoop
    return uvloop.Loop


class BalancedLoop(_base_loop_class()):  # type: ignore[misc]
    """A loop whose servers on an inherited socket (uvicorn's workers) accept in turn."""

    async def create_server(self, protocol_factory: Callable[[], asyncio.Protocol], host: Any = None,
                            port: Any = None, *, sock: socket.socket | None = None,
                            ssl: ssl_module.SSLContext | None = None, backlog: int = 100, **kwargs: Any) -> Any:
        if sock is None or host is not None or port is not None:
            return await super().create_server(protocol_factory, host, port, sock=sock, ssl=ssl, backlog=backlog,
                                               **kwargs)
        return BalancedAcceptor(self, protocol_factory, sock, ssl, backlog)


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvicorn's loop factory for several workers (``loop="bhgbrain_site.server.accept:new_event_loop"``)."""
    return BalancedLoop()
