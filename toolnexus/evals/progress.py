"""The ``done/total`` line an evaluation redraws on stderr while it runs."""

from __future__ import annotations

import os
import sys
import threading
from typing import IO


def on_terminal(stream: IO[str]) -> bool:
    """Whether ``stream`` is a terminal that can redraw a line (not ``TERM=dumb``)."""
    try:
        return bool(stream.isatty()) and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class Progress:
    """Counts finished cases and redraws ``\\rdone/total``; silent when not ``enabled``.

    ``progress=None`` draws only while stderr is a terminal; ``True`` and ``False`` force it.
    """

    def __init__(self, total: int, progress: bool | None, stream: IO[str] | None = None) -> None:
        self._out = sys.stderr if stream is None else stream
        self._enabled = on_terminal(self._out) if progress is None else bool(progress)
        self._total = total
        self._lock = threading.Lock()  # guards: _done and writes to the stream
        self._done = 0

    def start(self) -> None:
        with self._lock:
            self._draw()

    def advance(self) -> None:
        """One more case finished (called from the worker threads)."""
        with self._lock:
            self._done += 1
            self._draw()

    def finish(self) -> None:
        """End the line, so what is printed next starts on a fresh one."""
        if self._enabled:
            with self._lock:
                self._write("\n")

    def _draw(self) -> None:  # caller holds self._lock
        if self._enabled:
            self._write(f"\r{self._done}/{self._total}")

    def _write(self, text: str) -> None:
        try:
            self._out.write(text)
            self._out.flush()
        except (OSError, ValueError):  # a closed or broken stderr must not stop the evaluation
            self._enabled = False
