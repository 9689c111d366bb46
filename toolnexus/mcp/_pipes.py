"""The pipes of a stdio server, bounded both ways.

Reading: ``bounded_lines`` yields the lines of a stream, never holding more than its limit
of one line, however long the line the server writes. Writing: a ``PipeWriter`` owns the
server's stdin and writes on a thread of its own from a queue bounded in bytes, so that a
server which stops reading blocks that thread only: a caller waits for room in the queue
until its deadline or an interrupt, and a message that must never wait (an answer to the
server's own request, a notification) is dropped when the queue is half full.
"""

from __future__ import annotations

import collections
import logging
import os
import threading
import time
from typing import IO, Iterator

from ._rpc import Cancel, time_left, woken_by

log = logging.getLogger("toolnexus")

#: How long ``close`` waits for a writer that is not blocked on the pipe to end.
_JOIN_S = 2.0
#: A line up to this long is read in one go; a longer one is gathered piece by piece.
_PIECE = 65536


class LineTooLong(Exception):
    """A line went past the reader's limit (nothing more of it was read)."""


def bounded_lines(stream: IO[bytes], limit: int, *, cut: bool = False) -> Iterator[bytes | bytearray]:
    """The lines of ``stream`` (newline kept; a last line without one as it is), each at
    most ``limit`` bytes before its newline. A longer line raises ``LineTooLong`` once
    ``limit + 1`` bytes of it are in, or with ``cut`` is yielded cut to ``limit`` bytes
    and the rest of it read and dropped. A line longer than 64 KiB is gathered in one
    ``bytearray`` (yielded as it is), so that no more than about ``limit`` is held."""
    piece = min(limit, _PIECE) + 1
    while True:
        line: bytes | bytearray = stream.readline(piece)
        if not line:
            return
        if len(line) > piece - 1 and not line.endswith(b"\n"):  # more than one piece, or too long
            line = _gather(stream, bytearray(line), limit)
        if line.endswith(b"\n") or len(line) <= limit:
            yield line
            continue
        if not cut:
            raise LineTooLong(f"a line longer than {limit} bytes")
        yield bytes(line[:limit])
        while line and not line.endswith(b"\n"):
            line = stream.readline(piece)


def _gather(stream: IO[bytes], held: bytearray, limit: int) -> bytearray:
    """``held`` and the rest of its line, until the line ends or is ``limit + 1`` bytes."""
    while not held.endswith(b"\n") and len(held) <= limit:
        more = stream.readline(min(_PIECE, limit + 1 - len(held)))
        if not more:
            break
        held += more
    return held


class WriterClosed(Exception):
    """The writer was closed, or the pipe broke: nothing more can be written."""


class PipeWriter:
    """Writes whole messages to ``pipe`` in order, on a thread of its own (see the module docs).

    ``capacity`` bounds the bytes queued, the message being written included; a message
    larger than that still goes when the queue is empty. The thread ends, closing the pipe,
    once ``close`` was called (and its write in progress ended) or the pipe broke.
    """

    def __init__(self, pipe: IO[bytes], capacity: int, server: str, thread_name: str) -> None:
        self._pipe = pipe
        self._fd = pipe.fileno()
        self._capacity = capacity
        self._name = server
        # guards: _queue, _queued, _ended, _dropping; notified when any of them changes
        self._changed = threading.Condition(threading.Lock())
        self._queue: collections.deque[bytes] = collections.deque()
        self._queued = 0  # bytes in the queue and in the write under way
        self._ended = False  # closed, or the pipe broke
        self._dropping = False  # messages are being dropped (logged once per spell)
        self._thread = threading.Thread(target=self._run, name=thread_name, daemon=True)
        self._thread.start()

    def put(self, data: bytes, deadline: float, cancelled: Cancel) -> bool:
        """Queue ``data``, waiting for room until ``deadline`` or ``cancelled``; False when
        it was given up.

        Raises:
            WriterClosed: the writer is closed or its pipe broke.
        """
        with woken_by(cancelled, self._wake), self._changed:
            while not self._room_for(len(data), self._capacity):
                remaining = time_left(deadline, cancelled)
                if remaining <= 0:
                    return False
                self._changed.wait(remaining)
            self._append(data)
            return True

    def offer(self, data: bytes) -> bool:
        """Queue ``data`` if the queue is less than half full, else drop it (logged once
        until messages go through again); never waits.

        Raises:
            WriterClosed: the writer is closed or its pipe broke.
        """
        with self._changed:
            if not self._room_for(len(data), self._capacity // 2):
                if not self._dropping:
                    log.warning("mcp server %s is not reading its input: messages to it are dropped", self._name)
                self._dropping = True
                return False
            self._dropping = False
            self._append(data)
            return True

    def _room_for(self, size: int, capacity: int) -> bool:
        if self._ended:
            raise WriterClosed()
        return self._queued == 0 or self._queued + size <= capacity

    def _append(self, data: bytes) -> None:
        self._queue.append(data)
        self._queued += len(data)
        self._changed.notify_all()

    def _wake(self) -> None:
        with self._changed:
            self._changed.notify_all()

    def flush(self, timeout: float) -> bool:
        """Wait until everything queued is written, ``timeout`` at most; False when it was not."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self._queued and not self._ended:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(remaining)
            return not self._queued

    def close(self) -> None:
        """Drop what is queued and end: the pipe is closed as soon as a write under way
        ends (at once when there is none; when the reader is gone for a blocked one)."""
        with self._changed:
            self._end()

    def join(self, timeout: float = _JOIN_S) -> None:
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def _end(self) -> None:
        self._ended = True
        self._queued -= sum(len(each) for each in self._queue)
        self._queue.clear()
        self._changed.notify_all()

    # --- the thread ---------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while True:
                with self._changed:
                    while not self._queue and not self._ended:
                        self._changed.wait()
                    if self._ended:
                        return
                    data = self._queue.popleft()
                self._write(data)
                with self._changed:
                    self._queued -= len(data)
                    self._changed.notify_all()
        except OSError as exc:  # a broken pipe: the server exited or closed its input
            log.debug("mcp server %s: writing to its input failed: %s", self._name, exc)
        finally:
            with self._changed:
                self._end()
            try:
                self._pipe.close()
            except (OSError, ValueError):
                pass

    def _write(self, data: bytes) -> None:
        """The whole of ``data`` (a pipe may take it in parts); blocks while the pipe is full."""
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]
