"""Streams (CONTRACT §20): at most ``max_streams`` open event streams per process.

A stream holds a server thread for as long as it is open. ``StreamSlots(limit)`` counts
them: ``take()`` returns a ``Slot`` or raises ``Refused(503)`` with ``Retry-After`` at once
(never a wait); ``Held(frames, slot)`` is the response body, which gives the slot back when
the stream ends, when the server closes it because the client went, or when it is closed
without ever being read (a response that failed before it was sent). The count belongs to
the process: a forked worker starts from zero.
"""

from __future__ import annotations

import os
import threading
from typing import Iterable, Iterator

from ..errors import ConfigError
from .refused import Refused

#: Open streams per process unless the app says otherwise.
MAX_STREAMS = 2
#: What ``Retry-After`` says on a ``503``: seconds until a client tries again.
RETRY_AFTER_S = 2


class Slot:
    """One open stream's place; ``release`` is idempotent and safe from any thread."""

    def __init__(self, slots: StreamSlots) -> None:
        self._slots: StreamSlots | None = slots
        self._lock = threading.Lock()  # guards: _slots

    def release(self) -> None:
        with self._lock:
            slots, self._slots = self._slots, None
        if slots is not None:
            slots._give_back()


class StreamSlots:
    """The open streams of this process, at most ``limit``."""

    def __init__(self, limit: int = MAX_STREAMS, *, retry_after_s: int = RETRY_AFTER_S) -> None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ConfigError(f"max_streams must be a whole number, 1 or more, not {limit!r}")
        self.limit = limit
        self.retry_after_s = retry_after_s
        self._lock = threading.Lock()  # guards: _open, _pid (a leaf)
        self._open = 0
        self._pid = os.getpid()

    def take(self) -> Slot:
        """A slot for one more stream.

        Raises:
            Refused: ``503`` with ``Retry-After``, when ``limit`` streams are open.
        """
        with self._lock:
            if self._pid != os.getpid():  # a forked worker: the parent's streams are not here
                self._pid, self._open = os.getpid(), 0
            if self._open >= self.limit:
                raise Refused(
                    503,
                    f"{self.limit} event streams are open in this process; try again shortly",
                    headers={"Retry-After": str(self.retry_after_s)},
                )
            self._open += 1
        return Slot(self)

    @property
    def open(self) -> int:
        with self._lock:
            return self._open if self._pid == os.getpid() else 0

    def _give_back(self) -> None:
        with self._lock:
            if self._pid == os.getpid() and self._open > 0:
                self._open -= 1


class Held:
    """``frames`` as a response body that holds ``slot`` until the stream is over: its
    end, an error, or ``close()`` (which the WSGI server calls when the client goes, and
    which closes ``frames`` too)."""

    def __init__(self, frames: Iterable[bytes], slot: Slot) -> None:
        self._frames: Iterator[bytes] = iter(frames)
        self._source = frames
        self._slot = slot

    def __iter__(self) -> Held:
        return self

    def __next__(self) -> bytes:
        try:
            return next(self._frames)
        except BaseException:
            self.close()  # the end, or an error: either way the stream is over
            raise

    def close(self) -> None:
        try:
            for each in (self._frames, self._source):
                close = getattr(each, "close", None)
                if close is not None:
                    close()
        finally:
            self._slot.release()
