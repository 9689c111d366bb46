"""The stdio transport: the server is a child process speaking newline-delimited JSON.

The process runs in a session of its own, so that closing it reaches whatever it started
(``npx`` starts ``node``). Three threads per process, each ending when it does: one reads
stdout and hands each message to the JSON-RPC session, one writes to stdin from a bounded
queue (``_pipes.PipeWriter``: a server that stops reading holds no caller), one drains
stderr into a ring of its last lines, which name the cause when the process exits. A line
of stdout longer than ``max_message_bytes`` ends the session: the calls in flight fail
naming the limit, the process is stopped, and the next call starts it again. Closing:
stdin closed, up to 2 s to exit, then SIGTERM, up to 2 s more, then SIGKILL; the process
is always reaped.
"""

from __future__ import annotations

import collections
import json
import logging
import os
import signal
import subprocess
import threading
from typing import IO, Any, Callable, Sequence

from ._pipes import LineTooLong, PipeWriter, WriterClosed, bounded_lines
from ._rpc import Cancel, Gone, Pending, Session, StreamEnd, decode

log = logging.getLogger("toolnexus")

STDERR_LINES = 20
#: The longest stderr line kept (the rest of a longer one is dropped).
STDERR_LINE_BYTES = 4096
EXIT_GRACE_S = 2.0
#: How long closing waits for the messages queued to a server to be written.
FLUSH_S = 0.5
#: How long the reader waits for an exiting process to be reaped, and its stderr drained.
_EXIT_WAIT_S = 2.0
#: Variables a server inherits from this process; ``env`` adds to them. Credentials in the
#: rest of the environment (a model API key) are not handed to a third-party server.
INHERITED = (
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TZ", "SYSTEMROOT"
)
_ENCODE = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def child_env(env: dict[str, str] | None) -> dict[str, str]:
    base = {name: os.environ[name] for name in INHERITED if name in os.environ}
    return {**base, **(env or {})}


class StdioWire:
    """One running server process (see the module docs)."""

    def __init__(
        self,
        session: Session,
        command: Sequence[str],
        env: dict[str, str] | None,
        cwd: str | None,
        max_message_bytes: int,
    ) -> None:
        self._session = session
        self._name = session.server
        self._limit = max_message_bytes
        try:
            self._process = subprocess.Popen(
                list(command),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=child_env(env),
                cwd=cwd,
                start_new_session=True,
            )
        except OSError as exc:
            raise Gone(f"mcp server {self._name}: cannot start {command[0]!r}: {exc.strerror or exc}") from None
        assert self._process.stdin is not None
        self._stderr: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)
        self._stderr_done = threading.Event()
        self._closing = threading.Event()
        self._oversized = threading.Event()  # a line went past max_message_bytes
        pid = self._process.pid
        self._writer = PipeWriter(self._process.stdin, max_message_bytes, self._name, f"toolnexus-mcp-{pid}-stdin")
        self._reader = threading.Thread(target=self._read, name=f"toolnexus-mcp-{pid}", daemon=True)
        self._drainer = threading.Thread(target=self._drain, name=f"toolnexus-mcp-{pid}-stderr", daemon=True)
        self._reader.start()
        self._drainer.start()

    @property
    def pid(self) -> int:
        return self._process.pid

    def send(self, message: dict[str, Any], pending: Pending | None, deadline: float, cancelled: Cancel) -> bool:
        """Queue one message for the writer: a request waits for room until its deadline or
        an interrupt; anything else never waits (dropped while the server is not reading)."""
        data = (_ENCODE(message) + "\n").encode("utf-8")  # JSON text escapes every newline
        try:
            if pending is None:
                return self._writer.offer(data)
            return self._writer.put(data, deadline, cancelled)
        except WriterClosed:  # closed, or a broken pipe: the reader reports how it ended
            raise Gone(self._ended_message()) from None

    def listen(self, message: dict[str, Any], on_end: StreamEnd) -> Callable[[], None]:
        """Send a request that stays open (``subscriptions/listen``); its notifications come
        on stdout like any other, its end (if the server sends one) to ``on_end`` through
        the session. Returns what stops it: ``notifications/cancelled`` naming it."""
        if not self.send(message, None, 0.0, None):
            on_end(None)  # not sent (the server is not reading): the list is listed each time
        cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": message["id"]}}
        return lambda: self._quietly(cancel)

    def _quietly(self, message: dict[str, Any]) -> None:
        try:
            self.send(message, None, 0.0, None)
        except Gone:
            pass

    # --- the threads ------------------------------------------------------------------------

    def _read(self) -> None:
        stdout = self._process.stdout
        assert stdout is not None
        try:
            for line in bounded_lines(stdout, self._limit):
                if line.isspace():
                    continue
                try:
                    message = decode(line)
                except ValueError:
                    log.warning(
                        "mcp server %s wrote a line to stdout that is not JSON; ignored: %.200r",
                        self._name,
                        line,
                    )
                    continue
                self._session.deliver(message)
        except LineTooLong:
            self._oversized.set()
            message = self._ended_message()
            log.warning("%s", message)
            self._session.fail_all(Gone(message))  # at once: the process is stopped below
            _signal(self._process, signal.SIGTERM)
        except (OSError, ValueError):
            pass  # stdout closed under the reader
        finally:
            self._ended()

    def _drain(self) -> None:
        stderr = self._process.stderr
        assert stderr is not None
        try:
            for raw in bounded_lines(stderr, STDERR_LINE_BYTES, cut=True):
                line = raw.decode("utf-8", "replace").rstrip("\r\n")
                self._stderr.append(line)
                log.debug("mcp server %s stderr: %s", self._name, line)
        except (OSError, ValueError):
            pass
        finally:
            self._stderr_done.set()

    def _ended(self) -> None:
        """stdout closed: the process has exited (or is about to; it is stopped if not)."""
        try:
            self._process.wait(_EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            if not self._closing.is_set():  # a server that closed its stdout is no use
                _signal(self._process, signal.SIGKILL)
        self._writer.close()
        self._stderr_done.wait(_EXIT_WAIT_S)
        message = self._ended_message()
        if not self._closing.is_set() and not self._oversized.is_set():
            log.warning("%s", message)
        self._session.fail_all(Gone(message))

    def _ended_message(self) -> str:
        code = self._process.poll()
        if self._oversized.is_set():
            return (
                f"mcp server {self._name} wrote a message longer than max_message_bytes ({self._limit} bytes); "
                "it was stopped without reading the rest (the next call starts it again)"
            )
        if self._closing.is_set():
            return f"mcp server {self._name} is closed"
        if code is None:
            return f"mcp server {self._name} closed its output"
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        tail = [line for line in self._stderr if line.strip()]
        last = f"; last stderr lines: {' | '.join(tail[-5:])}" if tail else "; it wrote nothing to stderr"
        return f"mcp server {self._name} {how}{last}"

    # --- closing --------------------------------------------------------------------------

    def close(self) -> None:
        """Stop the process (see the module docs); returns once it is reaped."""
        self._closing.set()
        process = self._process
        # What is queued (a listen's cancellation) goes first, unless the server does not read;
        # then stdin closes, or once the process has gone when a write is stuck on a full pipe.
        self._writer.flush(FLUSH_S)
        self._writer.close()
        for escalate in (signal.SIGTERM, signal.SIGKILL):
            try:
                process.wait(EXIT_GRACE_S)
                break
            except subprocess.TimeoutExpired:
                _signal(process, escalate)
        process.wait()
        _signal_group_left(process)
        for thread in (self._reader, self._drainer):
            if thread is not threading.current_thread():
                thread.join(_EXIT_WAIT_S)
        self._writer.join(_EXIT_WAIT_S)
        _close_quietly(process.stdout)
        _close_quietly(process.stderr)


def _signal(process: subprocess.Popen[bytes], signum: int) -> None:
    """Signal the server's process group (it leads one), or the process alone."""
    try:
        if hasattr(os, "killpg"):
            os.killpg(process.pid, signum)
        else:
            process.send_signal(signum)
    except (ProcessLookupError, PermissionError):
        pass


def _signal_group_left(process: subprocess.Popen[bytes]) -> None:
    """What the server started and left behind in its group (reaped by init) is killed."""
    if hasattr(os, "killpg"):
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _close_quietly(stream: IO[bytes] | None) -> None:
    if stream is None:
        return
    try:
        stream.close()
    except (OSError, ValueError):
        pass

