"""A compiled module loaded once a process on a daemon thread, so that nothing waits for it.

numba's import and a kernel's first compilation (or its load from numba's disk cache) take from
half a second to a few seconds. The modules that use compiled kernels (the full-text scorer,
search/bm25/compiled.py; the vector rows' gather, memories/indexes/file_rows.py) start loading
them in the background when an index is large enough to need them, and answer with their
numpy / Python path until the load is ready, or for good when it failed (numba not installed, no
build for the platform). A load's states: idle → loading → ready | unavailable.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from types import ModuleType

log = logging.getLogger(__name__)

Load = Callable[[], ModuleType]  # imports the module and compiles (or loads) its kernels; raises when it cannot


class BackgroundLoad:
    """One module's load: started at most once (``start`` or ``load_now``), read without waiting."""

    def __init__(self, what: str, thread_name: str) -> None:
        self.what = what  # for the log line when the load fails ("compiled BM25 kernels")
        self.thread_name = thread_name
        self._lock = threading.Lock()
        self._state = "idle"
        self._module: ModuleType | None = None
        self._settled = threading.Event()  # set once the load ended (ready or unavailable)

    @property
    def state(self) -> str:
        """"idle", "loading", "ready" or "unavailable"."""
        return self._state

    def start(self, load: Load) -> bool:
        """Run ``load`` on a daemon thread unless a load was started before; whether this call started it."""
        if not self._claim():
            return False
        threading.Thread(target=self._run, args=(load,), daemon=True, name=self.thread_name).start()
        return True

    def load_now(self, load: Load) -> ModuleType | None:
        """Run ``load`` in this thread unless a load was started before (then wait for that one);
        the module, or None when unavailable."""
        if self._claim():
            self._run(load)
        return self.wait(None)

    def ready(self) -> ModuleType | None:
        """The module once loaded, else None (never waits)."""
        return self._module if self._state == "ready" else None

    def wait(self, timeout: float | None = None) -> ModuleType | None:
        """Wait up to ``timeout`` seconds (None: until it ends) for a load under way; the module or None."""
        if self._state == "loading":
            self._settled.wait(timeout)
        return self.ready()

    def _claim(self) -> bool:
        with self._lock:
            if self._state != "idle":
                return False
            self._state = "loading"
            return True

    def _run(self, load: Load) -> None:
        try:
            module = load()
        except Exception:  # noqa: BLE001 - not installed, or no build for this platform: the caller's own path answers
            log.warning("%s unavailable; the uncompiled path answers", self.what, exc_info=True)
            with self._lock:
                self._state = "unavailable"
        else:
            with self._lock:
                self._module, self._state = module, "ready"
        self._settled.set()
