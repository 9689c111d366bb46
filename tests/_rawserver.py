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

    def __init__(self, server: RawServer, conn: socket.socket, index: int, request: bytes = b"") -> None:
        self.server, self.conn, self.index = server, conn, index
        self.request = request  # its raw bytes, head and body
        self.hung_up = False
        self.finished = False

    @property
    def streamed(self) -> bool:
        """The request asks for a streamed reply (``"stream": true`` in its body)."""
        body = self.request.partition(b"\r\n\r\n")[2]
        try:
            return json.loads(body).get("stream") is True
        except ValueError:
            return False

    def stream_head(self, extra: str = "") -> None:
        """The head of a chunked ``text/event-stream`` reply."""
        self.conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.send(f"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n{extra}\r\n".encode())

    def chunk(self, data: bytes) -> None:
        """One chunk of a chunked body (the empty chunk ends it)."""
        self.send(b"%x\r\n%s\r\n" % (len(data), data))

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
                exchange = Exchange(self, conn, index, request)
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



# --- streamed replies ---------------------------------------------------------------------------


def sse(data: dict[str, Any] | str, event: str | None = None) -> bytes:
    """One server-sent event: ``data`` (JSON unless a str), with an ``event`` name if given."""
    text = data if isinstance(data, str) else json.dumps(data)
    named = f"event: {event}\n" if event else ""
    return f"{named}data: {text}\n\n".encode()


def openai_chunks(pieces: list[str], tool_calls: list[dict[str, Any]] | None = None, tokens: int = 7, finish: str = "stop") -> list[bytes]:
    """A chat completion as its streamed chunks: a role chunk, one chunk per text piece,
    tool calls each in two fragments (name, then arguments), the finish reason, usage,
    and ``[DONE]``."""
    def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
        return sse({"id": "chatcmpl-s", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]})

    out = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"content": piece}) for piece in pieces]
    for index, call in enumerate(tool_calls or []):
        function = call["function"]
        out.append(chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function", "function": {"name": function["name"], "arguments": ""}}]}))
        out.append(chunk({"tool_calls": [{"index": index, "function": {"arguments": function["arguments"]}}]}))
    out.append(chunk({}, finish))
    out.append(sse({"id": "chatcmpl-s", "choices": [], "usage": {"prompt_tokens": tokens, "completion_tokens": 0, "total_tokens": tokens}}))
    out.append(b"data: [DONE]\n\n")
    return out


def anthropic_events(pieces: list[str], tokens: int = 7) -> list[bytes]:
    """A text message as its streamed events, ``message_start`` to ``message_stop``."""
    start = {"type": "message_start", "message": {"id": "msg_s", "type": "message", "role": "assistant", "content": [], "model": "c", "stop_reason": None, "usage": {"input_tokens": tokens, "output_tokens": 1}}}
    out = [sse(start, "message_start"), sse({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}, "content_block_start")]
    out += [sse({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}}, "content_block_delta") for piece in pieces]
    out.append(sse({"type": "content_block_stop", "index": 0}, "content_block_stop"))
    out.append(sse({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None}, "usage": {"output_tokens": len(pieces)}}, "message_delta"))
    out.append(sse({"type": "message_stop"}, "message_stop"))
    return out


def stream(exchange: Exchange, events: list[bytes], every: float = 0.0) -> None:
    """Send ``events`` as a chunked event stream, one chunk each, ``every`` seconds apart;
    the request counts as active until the last chunk is about to go."""
    exchange.stream_head()
    for index, event in enumerate(events):
        if index and every and exchange.server.closing.wait(every):
            return
        exchange.chunk(event)
    exchange.finish(b"0\r\n\r\n")


def answer(exchange: Exchange, text: str = "hi", tokens: int = 7) -> None:
    """A whole reply of ``text``: streamed in two pieces when the request asks for a stream."""
    if exchange.streamed:
        half = len(text) // 2
        stream(exchange, openai_chunks([text[:half], text[half:]], tokens=tokens))
    else:
        exchange.reply(completion(text, tokens=tokens))
