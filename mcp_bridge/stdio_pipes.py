"""MCP stdio on the event loop's own pipe I/O, not a worker thread per line.

The SDK's ``stdio_server()`` reads stdin and writes stdout through ``anyio.wrap_file``: every line
read, every write and every flush is a hop to a worker thread and back (three per call), which
is most of a stdio call's overhead on a busy machine. When stdin and stdout are pipes or
sockets (as MCP clients start a server: pipes from the Python SDK, socket pairs from Node's
``child_process``) this module
serves the same SDK transport from non-blocking pipe transports on the loop. A terminal or a
regular file keeps the SDK's own path (a terminal must not be left non-blocking, and a file
cannot be watched by the loop).

As the SDK does, while serving fd 0 reads the null device and fd 1 writes to stderr, so stray
output of a library or a child process cannot corrupt the protocol; both are restored after.
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import stat
import sys
from collections.abc import AsyncIterator

MAX_LINE = 1 << 27  # bytes a message may have before it is refused as malformed (128 MiB)
TOO_LONG = "{too long}"  # what a refused line becomes: the SDK answers it as any unparsable line


def _kind(fd: int) -> str | None:
    """"pipe", "socket" (Node's child_process connects a child's stdio with socket pairs) or None."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return None
    if stat.S_ISFIFO(mode):
        return "pipe"
    return "socket" if stat.S_ISSOCK(mode) else None


def _same_file(fd_a: int, fd_b: int) -> bool:
    a, b = os.fstat(fd_a), os.fstat(fd_b)
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def pipes_available() -> bool:
    """Whether stdin and stdout are pipes or sockets (the fast path applies; not on Windows,
    whose event loop has no pipe transports for inherited handles)."""
    return sys.platform != "win32" and _kind(0) is not None and _kind(1) is not None


class PipeLines:
    """stdin's lines as text, in the shape ``stdio_server(stdin=...)`` iterates."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self._reader = reader

    def __aiter__(self) -> PipeLines:
        return self

    async def __anext__(self) -> str:
        line = await self._line()
        if not line:
            raise StopAsyncIteration
        return line.decode("utf-8", errors="replace")

    async def _line(self) -> bytes:
        try:
            return await self._reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:
            return exc.partial  # the last line had no newline (or end of input: b"")
        except asyncio.LimitOverrunError:
            await self._skip_line()
            return TOO_LONG.encode()

    async def _skip_line(self) -> None:
        """Drop the rest of an oversized line, a buffer at a time."""
        while True:
            try:
                await self._reader.readuntil(b"\n")
                return
            except asyncio.LimitOverrunError as exc:
                await self._reader.readexactly(exc.consumed)
            except asyncio.IncompleteReadError:
                return


class PipeText:
    """stdout, in the shape ``stdio_server(stdout=...)`` writes to: ``write`` hands the text to the
    loop's transport, ``flush`` returns once the transport holds none of it (its write buffer's
    high-water mark is 0), so every message the SDK flushes is on the wire."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        writer.transport.set_write_buffer_limits(high=0)  # type: ignore[attr-defined]

    async def write(self, text: str) -> None:
        self._writer.write(text.encode("utf-8"))

    async def flush(self) -> None:
        await self._writer.drain()


def _claim(fd: int, diversion: int) -> int:
    """A private duplicate of ``fd`` for the protocol; ``fd`` itself now points at ``diversion``."""
    import fcntl  # POSIX only, as is this path

    private = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    os.dup2(diversion, fd)
    return private


def _restore(fd: int, private: int) -> None:
    with contextlib.suppress(OSError):
        os.set_blocking(private, True)  # shared with whoever holds the pipe after us
        os.dup2(private, fd)
    with contextlib.suppress(OSError):
        os.close(private)


async def _transport(fd: int, protocol: asyncio.BaseProtocol, *, writing: bool) -> asyncio.BaseTransport:
    """A loop transport on ``fd``: a pipe transport on a pipe, a socket transport on a socket (a
    write-pipe transport takes a readable socket for a closed one)."""
    loop = asyncio.get_running_loop()
    if _kind(fd) == "pipe":
        # closefd=False: the descriptor is closed by _restore, after fd 0 or 1 points back at it.
        pipe = os.fdopen(fd, "wb" if writing else "rb", buffering=0, closefd=False)
        connect = loop.connect_write_pipe if writing else loop.connect_read_pipe
        transport, _ = await connect(lambda: protocol, pipe)
    else:
        transport, _ = await loop.create_connection(lambda: protocol, sock=socket.socket(fileno=os.dup(fd)))
    return transport


async def _connect(fd_in: int, fd_out: int) -> tuple[PipeLines, PipeText, list[asyncio.BaseTransport]]:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_LINE, loop=loop)
    read_protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
    read_transport = await _transport(fd_in, read_protocol, writing=False)
    write_transport, write_protocol = read_transport, read_protocol  # one socket both ways: one transport
    if not (_kind(fd_out) == "socket" and _same_file(fd_in, fd_out)):
        write_protocol = asyncio.streams.FlowControlMixin(loop=loop)  # type: ignore[attr-defined]
        write_transport = await _transport(fd_out, write_protocol, writing=True)
    writer = asyncio.StreamWriter(write_transport, write_protocol, reader, loop)  # type: ignore[arg-type]
    return PipeLines(reader), PipeText(writer), [read_transport, write_transport]


@contextlib.asynccontextmanager
async def pipe_stdio() -> AsyncIterator[tuple[PipeLines, PipeText]]:
    """stdin and stdout as loop-driven pipe streams (call only when :func:`pipes_available`)."""
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        fd_in = _claim(0, null)
    finally:
        os.close(null)
    fd_out = _claim(1, 2)
    transports: list[asyncio.BaseTransport] = []
    try:
        lines, text, transports = await _connect(fd_in, fd_out)
        yield lines, text  # every message the SDK wrote was flushed: nothing is left to write
    finally:
        for transport in dict.fromkeys(transports):
            transport.close()
        _restore(1, fd_out)
        _restore(0, fd_in)
