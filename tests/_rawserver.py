"""A raw-socket HTTP endpoint on 127.0.0.1 for fault tests: each request is answered by a
script that writes whatever bytes it likes (a stalled body, a dripping body, a short
``Content-Length``, broken chunking...). ``close()`` releases every stalled script,
closes every connection and joins every thread it started."""

from __future__ import annotations

import json
import socket
import threading
from typing import Any, Callable

Script = Callable[["Exchange"], None]


def completion(content: str | None = "hi", tool_calls: list[dict[str, Any]] | None = None, tokens: int = 7) -> bytes:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = tool_calls
    usage = {"prompt_tokens": tokens, "completion_tokens": 0, "total_tokens": tokens}
    return json.dumps({"choices": [{"message": message, "finish_reason": "stop"}], "usage": usage}).encode()


def tool_call(cid: str, name: str, arguments: str = "{}") -> dict[str, Any]:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": arguments}}


class Exchange:
    """One request on one connection, as the script sees it."""

    def __init__(self, server: RawServer, conn: socket.socket, index: int) -> None:
        self.server, self.conn, self.index = server, conn, index
        self.hung_up = False
        self.finished = False

    def send(self, data: bytes) -> None:
        self.conn.sendall(data)

    def headers(self, status: int = 200, length: int | None = None, extra: str = "") -> None:
        reason = {200: "OK", 429: "Too Many Requests", 500: "Internal Server Error"}.get(status, "X")
        size = f"Content-Length: {length}\r\n" if length is not None else ""
        self.send(f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n{size}{extra}\r\n".encode())

    def reply(self, body: bytes, status: int = 200, extra: str = "") -> None:
        self.headers(status, len(body), extra)
        self.send(body)

    def hang_up(self) -> None:
        """Close the connection after what was sent (a reply cut short)."""
        self.hung_up = True
        self.conn.shutdown(socket.SHUT_RDWR)

    def finish(self, last: bytes) -> None:
        """Count this request as no longer active, then send its ``last`` bytes: the client
        cannot have the whole reply before the server stops counting it."""
        self.server.done(self)
        self.send(last)

    def stall(self, timeout: float = 30.0) -> bool:
        """Block until the test releases the server (or closes it); True when released."""
        return self.server.release.wait(timeout) and not self.server.closing.is_set()

    def pause(self, seconds: float) -> None:
        self.server.closing.wait(seconds)


class RawServer:
    def __init__(self, script: Script) -> None:
        self.script = script
        self.release = threading.Event()
        self.closing = threading.Event()
        self.received = threading.Event()  # set when any request has been read whole
        self.last_request = b""  # the raw bytes of the latest request
        self.requests = 0
        self.accepted = 0  # connections
        self.ended = 0  # connections the client closed
        self.an_end = threading.Event()  # set when the client closes a connection
        self.active = 0
        self.peak_active = 0
        self._lock = threading.Lock()  # guards: requests, active, peak_active, _conns, _threads
        self._conns: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.port = self._listener.getsockname()[1]
        self._acceptor = threading.Thread(target=self._accept, name="raw-server", daemon=True)
        self._acceptor.start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _accept(self) -> None:
        while not self.closing.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            thread = threading.Thread(target=self._serve, args=(conn,), name="raw-server-conn", daemon=True)
            with self._lock:
                self.accepted += 1
                self._conns.append(conn)
                self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        buffered = b""
        try:
            while not self.closing.is_set():
                request, buffered = _read_request(conn, buffered)
                if request is None:
                    with self._lock:
                        self.ended += 1
                    self.an_end.set()
                    return
                with self._lock:
                    self.last_request = request
                    self.requests += 1
                    index = self.requests
                    self.active += 1
                    self.peak_active = max(self.peak_active, self.active)
                self.received.set()
                exchange = Exchange(self, conn, index)
                try:
                    self.script(exchange)
                finally:
                    self.done(exchange)
                if exchange.hung_up:
                    return
        except OSError:
            return
        finally:
            conn.close()

    def done(self, exchange: Exchange) -> None:
        with self._lock:
            if not exchange.finished:
                exchange.finished = True
                self.active -= 1

    def close(self) -> None:
        self.closing.set()
        self.release.set()
        try:
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        except OSError:
            pass
        self._listener.close()
        with self._lock:
            conns, threads = list(self._conns), list(self._threads)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._acceptor.join(5)
        for thread in threads:
            thread.join(5)

    def __enter__(self) -> RawServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _read_request(conn: socket.socket, buffered: bytes) -> tuple[bytes | None, bytes]:
    while b"\r\n\r\n" not in buffered:
        chunk = conn.recv(65536)
        if not chunk:
            return None, b""
        buffered += chunk
    head, _, rest = buffered.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(rest) < length:
        chunk = conn.recv(65536)
        if not chunk:
            return None, b""
        rest += chunk
    return head + b"\r\n\r\n" + rest[:length], rest[length:]


def drip(exchange: Exchange, body: bytes, every: float) -> None:
    """Send ``body`` one byte at a time, ``every`` seconds apart."""
    exchange.headers(200, len(body))
    for byte in body:
        if exchange.server.closing.wait(every):
            return
        exchange.send(bytes([byte]))

