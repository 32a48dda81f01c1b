"""WhiteNoise (the admin's and Swagger UI's static files) as middleware that runs on the event loop.

WhiteNoise's own middleware is synchronous only. Under ASGI, Django then runs it, and with it
every request (tool calls, REST, /health), through its one thread-sensitive executor, and
hops back to the loop for the rest of the middleware: two thread hops per request, and every
concurrent request queued behind that single thread. Here a request that is not for a static
file goes straight on, without leaving the loop; a static file is served from a worker thread.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction, sync_to_async
from django.http import HttpRequest, HttpResponseBase
from whitenoise.middleware import WhiteNoiseMiddleware


class StaticFilesMiddleware(WhiteNoiseMiddleware):
    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable[[HttpRequest], Any]) -> None:
        super().__init__(get_response)
        self._is_async = iscoroutinefunction(get_response)
        if self._is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest) -> Any:
        if self._is_async:
            return self._acall(request)
        return super().__call__(request)

    async def _acall(self, request: HttpRequest) -> HttpResponseBase:
        path = request.path_info
        static_file = None
        if path.startswith(self.static_prefix):
            static_file = self.find_file(path) if self.autorefresh else self.files.get(path)
        if static_file is None:
            return await self.get_response(request)
        return await sync_to_async(self.serve, thread_sensitive=False)(static_file, request)
