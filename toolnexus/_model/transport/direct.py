"""The direct route: the library's own session with no proxy, below ``HTTPAdapter.send``.

A request goes out in one write on a pooled connection of the adapter (the request line
and headers were worked out once for the URL). A plain reply is read whole by the small
reader in ``http1``; a streamed reply is parsed by the standard library's
``http.client.HTTPResponse`` and read piece by piece as it arrives, the socket reaching it
through a raw stream whose every read waits only for the time left. Either way neither
slow headers nor a body dripping one byte at a time can outlast ``timeout``, and
``interrupt`` shuts the connection down under any read. A kept-alive connection that the
server closed while it sat idle (the request fails before a single byte of reply) is
replaced by a new one, once, at once.
"""

from __future__ import annotations

import http.client
import io
import queue
import socket
import time
from typing import Any, Callable

import urllib3.exceptions
import urllib3.response
import urllib3.util.connection

from ..cancel import CancelScope, current_scope
from .base import READ_SIZE, Waiting, remaining
from .failures import check_framing
from .http1 import Reply, ReplyReader

# Shorter than the idle timeout of common servers (gunicorn 2 s; uvicorn, Node, Apache 5 s).
_PROBE_IDLE_S = 1.0


class _Wire(io.RawIOBase):
    """The socket as a raw stream for ``http.client``: each read waits until ``deadline``
    at most; once ``ended``, a read finds nothing (so the buffer's leftover can be seen)."""

    def __init__(self, sock: socket.socket, deadline: float | None) -> None:
        super().__init__()
        self.sock = sock
        self.deadline = deadline
        self.received = False  # any byte of the reply has arrived
        self.ended = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        if self.ended:
            return None
        deadline = self.deadline
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("the reply did not complete before the deadline")
            self.sock.settimeout(left)
        count = self.sock.recv_into(buffer)
        if count:
            self.received = True
        return count


class _Reader(io.BufferedReader):
    """The buffered reply stream ``http.client`` reads (it asks its "socket" for a file,
    and this is both). When the parser closes it at the end of the reply, ``leftover``
    says whether bytes past that end were buffered: a server never sends unasked, so such
    a connection carries a broken reply and is not reused."""

    leftover = False

    def makefile(self, mode: str) -> _Reader:
        return self

    def close(self) -> None:
        if not self.closed:
            wire: _Wire = self.raw  # type: ignore[assignment]
            wire.ended = True
            self.leftover = bool(self.peek(1))
        super().close()


class _PooledReply:
    """What both kinds of reply share: the pooled connection they came on, given back to
    its pool once the body is read (or closed, when it cannot carry another request)."""

    __slots__ = ("status", "headers", "_pool", "_conn")

    def __init__(self, pool: Any, conn: Any, status: int, headers: Any) -> None:
        self.status = status
        self.headers = headers
        self._pool = pool
        self._conn: Any = conn

    def _decoded(self, content: bytes) -> bytes:
        coding = self.headers.get("Content-Encoding")
        if coding is not None and coding.lower() != "identity":
            return _decoded(self.headers, self.status, content)
        return content

    def _give_back(self, reusable: bool) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if not reusable:
            conn.close()
        conn.toolnexus_idle_since = time.monotonic()
        self._pool._put_conn(conn)

    def abort(self, whole: bool = False) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
            self._pool._put_conn(None)


class PlainReply(_PooledReply):
    """A plain reply, read whole off a pooled connection."""

    __slots__ = ("_reader", "_reply")

    def __init__(self, pool: Any, conn: Any, reader: ReplyReader, reply: Reply) -> None:
        super().__init__(pool, conn, reply.status, reply.headers)
        self._reader = reader
        self._reply = reply

    def read_all(self) -> bytes:
        return self._decoded(self._reader.body(self._reply))

    def read_some(self, until: float | None) -> bytes:
        return self.read_all()  # not asked of a plain reply: its body comes whole, once

    def done(self) -> None:
        self._give_back(not (self._reply.will_close or self._reader.leftover))


class StreamedReply(_PooledReply):
    """A streamed reply, parsed by ``http.client`` and read as it arrives."""

    __slots__ = ("_response", "_reader", "_coded")

    def __init__(self, pool: Any, conn: Any, response: http.client.HTTPResponse, reader: _Reader) -> None:
        super().__init__(pool, conn, response.status, response.msg)
        self._response = response
        self._reader = reader
        self._coded: Any = None  # a decoding view of a streamed body with a content coding

    def read_all(self) -> bytes:
        return self._decoded(self._response.read())

    def read_some(self, until: float | None) -> bytes:
        wire: _Wire = self._reader.raw  # type: ignore[assignment]
        wire.deadline = until
        if self._coded is None:
            coding = self.headers.get("Content-Encoding")
            if coding is None or coding.lower() == "identity":
                return self._response.read1(READ_SIZE)
            self._coded = _decoding(self.headers, self.status, self._response)
        return bytes(self._coded.read1(READ_SIZE, decode_content=True))

    def done(self) -> None:
        response = self._response
        self._give_back(not (response.will_close or not response.isclosed() or self._reader.leftover))


class DirectRoute:
    """Requests straight to the adapter's connection pool for one URL."""

    name = "direct"

    def __init__(self, find_pool: Callable[[], Any], head: bytes) -> None:
        self._find_pool = find_pool  # the pool, found again once it was closed with its session
        self._head = head
        self._pool: Any = None

    def open(
        self, payload: bytes, deadline: float | None, scope: CancelScope, waiting: Waiting, stream: bool
    ) -> PlainReply | StreamedReply:
        pool = self._pool
        if pool is None or pool.pool is None:  # first use, or closed with its session
            pool = self._pool = self._find_pool()
        conn = _checkout(pool, fresh=False)
        while True:
            reused = conn.sock is not None
            got: list[ReplyReader | _Wire] = []  # what reads the reply, once it is made
            try:
                conn.timeout = remaining(deadline)
                if conn.sock is None:
                    conn.connect()
                sock = conn.sock
                assert sock is not None  # connect() made it or raised
                sock.settimeout(remaining(deadline))
                sock.sendall(b"%sContent-Length: %d\r\n\r\n%s" % (self._head, len(payload), payload))
                if waiting:
                    waiting.pop()()  # overlaps the model's work on the reply
                if stream:
                    wire = _Wire(sock, deadline)
                    got.append(wire)
                    buffered = _Reader(wire, READ_SIZE)
                    return StreamedReply(pool, conn, _head_of(buffered), buffered)
                reader = ReplyReader(sock, deadline)
                got.append(reader)
                return PlainReply(pool, conn, reader, reader.head())
            except (ConnectionResetError, BrokenPipeError):  # RemoteDisconnected is one
                conn.close()
                pool._put_conn(None)
                if reused and not (got and got[0].received) and not scope.cancelled:
                    conn = _checkout(pool, fresh=True)  # it was closed while it sat idle
                    continue
                raise
            except BaseException:
                conn.close()
                pool._put_conn(None)
                raise


def _head_of(reader: _Reader) -> http.client.HTTPResponse:
    """The final reply's status line and headers; interim 1xx replies are skipped (the
    parser itself skips only ``100 Continue``)."""
    while True:
        response = http.client.HTTPResponse(reader, method="POST")  # type: ignore[arg-type]
        response.begin()
        if not 100 <= response.status < 200 or response.status == 101:
            if response.length is None and not response.chunked:  # no length, or not a number
                check_framing(response.msg)
            return response


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


def _decoding(headers: Any, status: int, body: Any) -> urllib3.response.HTTPResponse:
    """A view of ``body`` (a file-like reply body) that removes its content coding."""
    return urllib3.response.HTTPResponse(
        body=body,
        headers=urllib3.HTTPHeaderDict(headers.items()),
        status=status,
        preload_content=False,
        decode_content=True,
        enforce_content_length=False,  # the framing is the parser's to check
    )


def _decoded(headers: Any, status: int, content: bytes) -> bytes:
    """The body of a reply with a ``Content-Encoding`` (gzip, deflate...), decoded."""
    return bytes(_decoding(headers, status, io.BytesIO(content)).read(decode_content=True))
