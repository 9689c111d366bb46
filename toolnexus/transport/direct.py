"""The direct route: the library's own session with no proxy, below ``HTTPAdapter.send``.

A request goes out in one write on a pooled connection of the adapter (the request line
and headers were worked out once for the URL), and the reply is read whole by the small
reader in ``http1``, every read waiting only for the time left: neither slow headers nor
a body dripping one byte at a time can outlast ``timeout_ms``, and ``interrupt`` shuts
the connection down under any read. A kept-alive connection that the
server closed while it sat idle (the request fails before a single byte of reply) is
replaced by a new one, once, at once.
"""

from __future__ import annotations

import io
import queue
import time
from typing import Any, Callable

import urllib3.exceptions
import urllib3.response
import urllib3.util.connection

from .._cancel import CancelScope, current_scope
from .base import remaining
from .http1 import Reply, ReplyReader

# Shorter than the idle timeout of common servers (gunicorn 2 s; uvicorn, Node, Apache 5 s).
_PROBE_IDLE_S = 1.0


class PlainReply:
    """A plain reply, read whole off a pooled connection."""

    __slots__ = ("status", "headers", "_pool", "_conn", "_reader", "_reply")

    def __init__(self, pool: Any, conn: Any, reader: ReplyReader, reply: Reply) -> None:
        self.status = reply.status
        self.headers = reply.headers
        self._pool = pool
        self._conn: Any = conn
        self._reader = reader
        self._reply = reply

    def read_all(self) -> bytes:
        content = self._reader.body(self._reply)
        coding = self.headers.get("Content-Encoding")
        if coding is not None and coding.lower() != "identity":
            return _decoded(self.headers, self.status, content)
        return content

    def done(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._reply.will_close or self._reader.leftover:
            conn.close()
        conn.toolnexus_idle_since = time.monotonic()
        self._pool._put_conn(conn)

    def abort(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
            self._pool._put_conn(None)


class DirectRoute:
    """Requests straight to the adapter's connection pool for one URL."""

    name = "direct"

    def __init__(self, find_pool: Callable[[], Any], head: bytes) -> None:
        self._find_pool = find_pool  # the pool, found again once it was closed with its session
        self._head = head
        self._pool: Any = None

    def open(self, payload: bytes, deadline: float | None, scope: CancelScope, waiting: list[Callable[[], None]]) -> PlainReply:
        pool = self._pool
        if pool is None or pool.pool is None:  # first use, or closed with its session
            pool = self._pool = self._find_pool()
        conn = _checkout(pool, fresh=False)
        while True:
            reused = conn.sock is not None
            reader: ReplyReader | None = None
            try:
                conn.timeout = remaining(deadline)
                if conn.sock is None:
                    conn.connect()
                sock = conn.sock
                sock.settimeout(remaining(deadline))
                sock.sendall(b"%sContent-Length: %d\r\n\r\n%s" % (self._head, len(payload), payload))
                if waiting:
                    waiting.pop()()  # overlaps the model's work on the reply
                reader = ReplyReader(sock, deadline)
                return PlainReply(pool, conn, reader, reader.head())
            except (ConnectionResetError, BrokenPipeError):  # RemoteDisconnected is one
                conn.close()
                pool._put_conn(None)
                if reused and not (reader is not None and reader.received) and not scope.cancelled:
                    conn = _checkout(pool, fresh=True)  # it was closed while it sat idle
                    continue
                raise
            except BaseException:
                conn.close()
                pool._put_conn(None)
                raise


def _checkout(pool: Any, *, fresh: bool) -> Any:
    """A connection from ``pool`` for a direct exchange (a new one if ``fresh``), handed to
    the calling thread's scope. A kept-alive connection idle for ``_PROBE_IDLE_S`` or more
    is first checked for a close by the server, as ``HTTPConnectionPool._get_conn`` checks
    every one; one used moments ago is not, which spares a system call (and a hand-over of
    the interpreter lock) on every exchange of a busy client."""
    idle = pool.pool
    if idle is None:
        raise urllib3.exceptions.ClosedPoolError(pool, "Pool is closed.")
    conn = None
    if not fresh:
        try:
            conn = idle.get(block=False)
        except queue.Empty:
            pass
    if conn is not None and time.monotonic() - getattr(conn, "toolnexus_idle_since", 0.0) >= _PROBE_IDLE_S:
        if urllib3.util.connection.is_connection_dropped(conn):
            conn.close()
    if conn is None:
        conn = pool._new_conn()
    scope = current_scope()
    if scope is not None:
        scope.attach(conn)
    return conn


def _decoded(headers: Any, status: int, content: bytes) -> bytes:
    """The body of a reply with a ``Content-Encoding`` (gzip, deflate...), decoded."""
    encoded = urllib3.response.HTTPResponse(
        body=io.BytesIO(content),
        headers=urllib3.HTTPHeaderDict(headers.items()),
        status=status,
        preload_content=False,
        decode_content=True,
        enforce_content_length=False,  # the framing was checked as the body was read
    )
    return bytes(encoded.read(decode_content=True))
