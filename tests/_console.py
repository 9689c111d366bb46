"""Outputs for the command line's display in process: each tells a waiting test about every
write (``wait_for``), as a pipe (``Piped``) or as a terminal (``FakeTTY``)."""

from __future__ import annotations

import io
import threading


class Piped(io.StringIO):
    """An output that is not a terminal."""

    def __init__(self, initial: str = "") -> None:
        super().__init__(initial)
        self._written = threading.Condition()

    def write(self, text: str) -> int:
        with self._written:
            count = super().write(text)
            self._written.notify_all()
        return count

    def wait_for(self, text: str, timeout: float) -> bool:
        with self._written:
            return self._written.wait_for(lambda: text in self.getvalue(), timeout=timeout)


class FakeTTY(Piped):
    """A terminal."""

    def isatty(self) -> bool:
        return True
