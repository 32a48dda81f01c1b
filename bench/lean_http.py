"""A lean HTTP/1.1 client for the benches: one kept-alive connection on asyncio streams.

httpx costs about 1 ms of client CPU per request on the project's 2-vCPU VM (request and
response models, header normalisation, its connection pool, its own async backend), as much as
a small search. That is the client library's cost, not the transport's: curl, Node's undici or
a Go client pay a fraction of it. So the transport benches time ``/tool``, REST, raw MCP and
``/health`` with this client as well (``--http-client``), and the difference between the two
rows is what httpx adds. It speaks just enough HTTP/1.1 for the server under test: a request
with a JSON body, a response with Content-Length or chunked transfer coding, keep-alive.
"""
from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import urlencode, urlsplit


class LeanResponse:
    __slots__ = ("status_code", "headers", "content")

    def __init__(self, status_code: int, headers: dict[str, str], content: bytes) -> None:
        self.status_code, self.headers, self.content = status_code, headers, content

    def json(self) -> Any:
        return json.loads(self.content)

    @property
    def text(self) -> str:
        return self.content.decode()


class LeanHTTP:
    """One connection, one request at a time (as one httpx client limited to one connection)."""

    def __init__(self, base_url: str) -> None:
        parts = urlsplit(base_url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self._host_header = f"Host: {parts.netloc}\r\n".encode()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._lock = asyncio.Lock()

    async def __aenter__(self) -> LeanHTTP:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._reader = self._writer = None

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._writer is None or self._reader is None:
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        return self._reader, self._writer

    async def get(self, path: str, params: dict[str, str] | None = None,
                  headers: dict[str, str] | None = None) -> LeanResponse:
        return await self.request("GET", path + ("?" + urlencode(params) if params else ""), None, headers)

    async def post(self, path: str, json: Any = None, headers: dict[str, str] | None = None) -> LeanResponse:  # noqa: A002
        return await self.request("POST", path, _dumps(json), headers)

    async def request(self, method: str, path: str, body: bytes | None,
                      headers: dict[str, str] | None = None) -> LeanResponse:
        head = [f"{method} {path} HTTP/1.1\r\n".encode(), self._host_header]
        if body is not None:
            head.append(b"Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body))
        for name, value in (headers or {}).items():
            if name.lower() != "content-type" or body is None:
                head.append(f"{name}: {value}\r\n".encode())
        head.append(b"\r\n")
        async with self._lock:
            request = b"".join(head) + (body or b"")
            try:
                return await self._exchange(request)
            except (ConnectionError, asyncio.IncompleteReadError):
                await self.aclose()  # the server closed a kept-alive connection: once more on a new one
            try:
                return await self._exchange(request)
            except asyncio.IncompleteReadError as exc:
                await self.aclose()
                raise ConnectionError("the server closed the connection mid-response") from exc

    async def _exchange(self, request: bytes) -> LeanResponse:
        reader, writer = await self._connect()
        writer.write(request)
        status_line = await reader.readuntil(b"\r\n")
        status = int(status_line.split(b" ", 2)[1])
        headers: dict[str, str] = {}
        while (line := await reader.readuntil(b"\r\n")) != b"\r\n":
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        if "content-length" in headers:
            content = await reader.readexactly(int(headers["content-length"]))
        elif headers.get("transfer-encoding", "").lower() == "chunked":
            content = await _chunked(reader)
        else:
            content = await reader.read()  # the server closes the connection to end the body
            await self.aclose()
        if headers.get("connection", "").lower() == "close":
            await self.aclose()
        return LeanResponse(status, headers, content)


async def _chunked(reader: asyncio.StreamReader) -> bytes:
    parts = []
    while size := int((await reader.readuntil(b"\r\n")).split(b";", 1)[0], 16):
        parts.append(await reader.readexactly(size))
        await reader.readexactly(2)
    while await reader.readuntil(b"\r\n") != b"\r\n":  # trailers
        pass
    return b"".join(parts)


def _dumps(value: Any) -> bytes | None:
    return None if value is None else json.dumps(value, separators=(",", ":")).encode()
