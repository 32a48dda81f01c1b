"""A progress bar (rich) for long operator commands, drawn on a terminal only.

Services know nothing of it: they take an optional ``progress(stage, done, total)`` callback
(``Progress`` below) and call it; the CLI and the management commands pass the
one :func:`terminal_progress` yields. The bar goes to stderr (stdout carries the JSON result)
and only when stderr is a terminal: piped, redirected or under a scheduler the commands stay
quiet. It starts at the first report, so a command that reports nothing draws nothing.
"""
from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any, TextIO

# A long operation's progress report: (stage, done, total or None when unknown). Services take
# one as an optional ``progress`` argument and call it; only an interface decides how to show
# it (the CLI draws a bar on a terminal), so services stay free of UI.
Progress = Callable[[str, int, int | None], None]


def _is_terminal(stream: Any) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


class _Bar:
    """One rich Progress, one task whose description follows the reported stage."""

    def __init__(self, label: str, stream: TextIO) -> None:
        self.label, self.stream = label, stream
        self.bar: Any = None
        self.task: Any = None

    def report(self, stage: str, done: int, total: int | None) -> None:
        if self.bar is None:
            self._start()
        description = f"{self.label}: {stage}" if stage and stage != self.label else self.label
        self.bar.update(self.task, description=description, completed=done, total=total)

    def _start(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        self.bar = Progress(*columns, console=Console(file=self.stream), transient=False)
        self.task = self.bar.add_task(self.label, total=None)
        self.bar.start()

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()


@contextlib.contextmanager
def terminal_progress(label: str, stream: TextIO | None = None) -> Iterator[Progress | None]:
    """A progress callback drawing a bar on ``stream`` (default stderr), or None when it is not a terminal."""
    target = stream if stream is not None else sys.stderr
    if not _is_terminal(target):
        yield None
        return
    bar = _Bar(label, target)
    try:
        yield bar.report
    finally:
        bar.stop()
