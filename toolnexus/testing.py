"""Test helpers: scripted models, a scripted route, a scripted server, and cassettes.

- ``ScriptedModel``: an in-process model (``generate=``) scripted per model name.
- ``ScriptedRoute``: every HTTP model exchange of the process answered by the test, with
  no socket (the way httpx's ``MockTransport`` serves tests): requests, retries, errors
  and streamed replies go through the same exchange as users' do.
- ``ScriptedLLMServer``: a real local OpenAI-compatible (and anthropic-style) HTTP server
  answering with what a function returns, for the whole route down to the socket::

    with ScriptedLLMServer() as server:          # two_turn_responder() by default
        client = Client(base_url=server.base_url, model="m")
        ...

- ``cassette(path, mode)``: real exchanges recorded once to JSONL and replayed offline
  after; the pytest fixture ``tn_cassette`` gives each test its own.

The server answers every ``POST <anything>/chat/completions`` (and ``<anything>/messages``,
for a responder that speaks the anthropic style) with the JSON returned by the
``respond(body) -> dict`` callable given to the constructor. It speaks HTTP/1.1 with
keep-alive, always sends Content-Length and sets TCP_NODELAY on accepted sockets, so a
client's pooled connection is reused and no Nagle/delayed-ACK stalls distort timings.
A request with ``"stream": true`` gets the same reply as an event stream (chunked): the
text word by word, ``stream_gap_s`` apart, then the tool calls, the finish reason, the
usage (when ``stream_options.include_usage`` asks) and ``[DONE]``; on ``/messages``, the
anthropic style's events (``message_start`` ... ``message_stop``).
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterable

from ._testing.cassette import Cassette
from ._testing.route import ScriptedReply, ScriptedRequest, ScriptedRoute
from ._testing.streamed import anthropic_events, sse_frame, stream_chunks, streamed_form
from .errors import CassetteMismatch

Responder = Callable[[dict[str, Any]], dict[str, Any]]

USAGE = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
STALL_LIMIT_S = 30.0

__all__ = [
    "ScriptedLLMServer",
    "ScriptedModel",
    "two_turn_responder",
    "completion",
    "tool_messages",
    "last_user_text",
    "USAGE",
    "text_completion",
    "tool_call_completion",
    "responder_by_model",
    "stream_chunks",
    "anthropic_events",
    "ScriptedRoute",
    "ScriptedReply",
    "ScriptedRequest",
    "cassette",
    "Cassette",
    "CassetteMismatch",
]


def completion(
    body: dict[str, Any],
    message: dict[str, Any],
    finish_reason: str,
    *,
    response_id: str = "chatcmpl-scripted",
) -> dict[str, Any]:
    """Wrap an assistant ``message`` in a full OpenAI chat-completion response."""
    return {
        "id": response_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model") or "scripted",
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": dict(USAGE),
    }


def _tool_call(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    """One OpenAI-style tool call with JSON-string arguments."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def _text_of(content: Any) -> str:
    """A message's content as text (plain string or a list of content parts)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return "" if content is None else json.dumps(content)


def two_turn_responder() -> Responder:
    """The benchmark scenario: two ``lookup`` calls first, then ``"done: "`` + the tool outputs.

    With no ``role == "tool"`` message in the request the reply asks for
    ``lookup({"q": "a"})`` and ``lookup({"q": "b"})`` (ids ``call_1``/``call_2``);
    otherwise it is the final text ``"done: "`` + the tool messages' contents joined by ``", "``.
    """
    ids = itertools.count(1)

    def respond(body: dict[str, Any]) -> dict[str, Any]:
        response_id = f"chatcmpl-{next(ids)}"
        tool_texts = [_text_of(m.get("content")) for m in body.get("messages") or () if m.get("role") == "tool"]
        if not tool_texts:
            calls = [_tool_call("call_1", "lookup", {"q": "a"}), _tool_call("call_2", "lookup", {"q": "b"})]
            message = {"role": "assistant", "content": None, "tool_calls": calls}
            return completion(body, message, "tool_calls", response_id=response_id)
        message = {"role": "assistant", "content": "done: " + ", ".join(tool_texts)}
        return completion(body, message, "stop", response_id=response_id)

    return respond


class _Handler(BaseHTTPRequestHandler):
    """Answers chat-completion POSTs through the owning server's responder."""

    protocol_version = "HTTP/1.1"

    @property
    def owner(self) -> ScriptedLLMServer:
        """The server whose responder answers (the handler's ``server`` is only a ``BaseServer``
        to a type checker)."""
        server = self.server
        assert isinstance(server, _HTTPServer)
        return server.owner

    def setup(self) -> None:
        """Disable Nagle and track the connection so ``close()`` can drop it."""
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.owner._track(self.connection, add=True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.owner._track(self.connection, add=False)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - base signature
        """Stay quiet; benchmarks and tests do not want access logs."""

    def do_POST(self) -> None:
        raw = self._read_body()
        if not self.path.split("?", 1)[0].rstrip("/").endswith(("/chat/completions", "/messages")):
            self._send_json(404, _error(f"no route for POST {self.path}", "not_found"))
            return
        try:
            body = json.loads(raw)
            if not isinstance(body, dict):
                raise ValueError("request body must be a JSON object")
        except ValueError as exc:
            self._send_json(400, _error(f"invalid JSON body: {exc}", "invalid_request_error"))
            return
        status, reply = self.owner._answer(body)
        if status == 200 and body.get("stream") is True:
            anthropic = self.path.split("?", 1)[0].rstrip("/").endswith("/messages")
            chunks = streamed_form(reply, body, anthropic=anthropic, usage=self.owner.stream_usage)
            self._send_stream(chunks, named=anthropic)
            return
        self._send_json(status, reply)

    def do_GET(self) -> None:
        self._send_json(404, _error(f"no route for GET {self.path}", "not_found"))

    def _read_body(self) -> bytes:
        """The request body per Content-Length (missing header means empty)."""
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = 0
        return self.rfile.read(length) if length > 0 else b""

    def _send_stream(self, chunks: list[tuple[dict[str, Any] | bytes, str]], *, named: bool) -> None:
        """A reply's streamed form (``stream_chunks``, or ``anthropic_events``, whose frames
        are ``named`` by their type) as a chunked event stream, its text pieces
        ``stream_gap_s`` apart."""
        owner = self.owner
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        text_out = False
        for index, (chunk, piece) in enumerate(chunks):
            if text_out and owner.hold_rest_until is not None:
                owner.hold_rest_until.wait(STALL_LIMIT_S)  # a text piece is out: the rest waits
            if piece and index > 1 and owner.stream_gap_s > 0 and owner._closing.wait(owner.stream_gap_s):
                return  # closing: the stream is cut short
            data = sse_frame(chunk, named=named)
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()
            if piece:
                owner._wrote(piece)
                text_out = True
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _send_json(self, status: int, payload: dict[str, Any]) -> None:
        """Send ``payload`` as JSON with an explicit Content-Length (keeps the connection alive)."""
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _error(message: str, kind: str) -> dict[str, Any]:
    """An OpenAI-shaped error body."""
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


class _HTTPServer(ThreadingHTTPServer):
    """Threading server: daemon handler threads, no blocking on close, bigger backlog."""

    daemon_threads = True
    block_on_close = False
    request_queue_size = 64
    owner: ScriptedLLMServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Ignore connections dropped by a client or by ``close()``; report anything else."""
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)) or self.owner._closing.is_set():
            return
        super().handle_error(request, client_address)


class ScriptedLLMServer:
    """A local OpenAI-compatible endpoint on 127.0.0.1:<ephemeral port>, answering via ``respond``.

    ``delay_s`` sleeps before each answer; ``stall_until`` (an Event) blocks each answer until
    the event is set or 30 s pass. ``requests_seen`` counts chat-completion requests with a
    valid JSON body; ``last_body`` is the most recent one. A streamed reply writes its text
    pieces ``stream_gap_s`` apart; ``hold_rest_until`` (an Event) holds back what follows
    a streamed reply's first text piece until the event is set or 30 s pass, so a test can
    see that piece arrive while the reply is still open; ``written`` lists
    ``(time.monotonic(), piece)`` for every text piece written so far. With
    ``stream_usage=False`` a streamed reply carries no usage even when the request asks for
    it (as llama-cpp-python, which ignores ``stream_options.include_usage``); plain replies
    keep theirs.
    """

    def __init__(
        self,
        respond: Responder | None = None,
        *,
        delay_s: float = 0.0,
        stall_until: threading.Event | None = None,
        stream_gap_s: float = 0.0,
        stream_usage: bool = True,
        hold_rest_until: threading.Event | None = None,
    ) -> None:
        self._respond = respond if respond is not None else two_turn_responder()
        self.delay_s = delay_s
        self.stall_until = stall_until
        self.stream_gap_s = stream_gap_s
        self.stream_usage = stream_usage
        self.hold_rest_until = hold_rest_until
        self.requests_seen = 0
        self.last_body: dict[str, Any] | None = None
        self.written: list[tuple[float, str]] = []
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        self._closing = threading.Event()
        self._httpd = _HTTPServer(("127.0.0.1", 0), _Handler)
        self._httpd.owner = self
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, name="scripted-llm", daemon=True
        )
        self._thread.start()
        self._closed = False

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def base_url(self) -> str:
        """The OpenAI-style base URL, e.g. ``http://127.0.0.1:PORT/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    def _track(self, conn: socket.socket, *, add: bool) -> None:
        with self._lock:
            if add:
                self._connections.add(conn)
            else:
                self._connections.discard(conn)

    def _wrote(self, piece: str) -> None:
        with self._lock:
            self.written.append((time.monotonic(), piece))

    def _answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        """Count the request, apply delay/stall, and ask the responder (a raising responder → 500)."""
        with self._lock:
            self.requests_seen += 1
            self.last_body = body
        self._wait_for_stall()
        if self.delay_s > 0:
            self._closing.wait(self.delay_s)
        try:
            return 200, self._respond(body)
        except Exception as exc:  # surface responder bugs to the client instead of hanging it
            return 500, _error(f"responder failed: {type(exc).__name__}: {exc}", "server_error")

    def _wait_for_stall(self) -> None:
        """Block until ``stall_until`` is set (``close`` sets it) or 30 s pass."""
        if self.stall_until is not None:
            self.stall_until.wait(STALL_LIMIT_S)

    def close(self, timeout: float = 5.0) -> None:
        """Stop serving, drop open keep-alive connections and join the serving thread."""
        if self._closed:
            return
        self._closed = True
        self._closing.set()
        for held in (self.stall_until, self.hold_rest_until):
            if held is not None:
                held.set()  # release handlers held in a stall or mid-reply
        self._httpd.shutdown()
        self._httpd.server_close()
        with self._lock:
            conns, self._connections = list(self._connections), set()
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._thread.join(timeout)

    def __enter__(self) -> ScriptedLLMServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


Step = dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any]]


class ScriptedModel:
    """An in-process model (``generate=``) scripted per model name, for tests and demos.

    ``scripts`` maps a model name to a list of steps (the n-th call of that model gets
    the n-th step; the last step repeats) or to a single callable. A step is a reply dict
    (``{"content": ...}`` or ``{"tool_calls": [...]}``) or a callable taking the request.
    ``usage`` is added to every reply that has none. ``calls`` counts calls per model and
    ``peak_concurrency`` is the most calls seen in flight at once.
    """

    def __init__(self, scripts: dict[str, list[Step] | Step], *, usage: dict[str, int] | None = None) -> None:
        self._scripts = scripts
        self._usage = usage
        self._lock = threading.Lock()  # guards: calls, _active, peak_concurrency, requests
        self.calls: dict[str, int] = {}
        self.requests: list[dict[str, Any]] = []
        self._active = 0
        self.peak_concurrency = 0

    def __call__(self, request: dict[str, Any]) -> dict[str, Any]:
        model = request["model"]
        with self._lock:
            index = self.calls.get(model, 0)
            self.calls[model] = index + 1
            self.requests.append(request)
            self._active += 1
            self.peak_concurrency = max(self.peak_concurrency, self._active)
        try:
            reply = self._step(model, index)
            reply = reply(request) if callable(reply) else reply
        finally:
            with self._lock:
                self._active -= 1
        if self._usage is not None and "usage" not in reply:
            reply = {**reply, "usage": dict(self._usage)}
        return reply

    def _step(self, model: str, index: int) -> Step:
        script = self._scripts.get(model)
        if script is None:
            raise LookupError(f"no script for model {model!r}")
        if callable(script) or isinstance(script, dict):
            return script
        return script[min(index, len(script) - 1)]


def tool_messages(request: dict[str, Any]) -> list[str]:
    """The contents of the tool messages in an in-process model request, in order."""
    return [str(m.get("content") or "") for m in request["messages"] if m.get("role") == "tool"]


def last_user_text(request: dict[str, Any]) -> str:
    """The text of the last user message in an in-process model request."""
    users = [m for m in request["messages"] if m.get("role") == "user"]
    return _text_of(users[-1].get("content")) if users else ""


# --- reply builders and a per-model responder for ScriptedLLMServer ------------------------------
#
# ``tool_messages(body)`` above also reads an HTTP request body: it lists the contents of the
# body's ``role == "tool"`` messages, so ``tool_messages(body)[-1]`` is the latest tool result.

CallSpec = tuple[str, str, dict[str, Any]] | dict[str, Any]


def _with_usage(reply: dict[str, Any], usage: dict[str, int] | None) -> dict[str, Any]:
    """``reply`` with its ``usage`` replaced by a copy of ``usage`` (unchanged when None)."""
    return reply if usage is None else {**reply, "usage": dict(usage)}


def text_completion(body: dict[str, Any], content: str, usage: dict[str, int] | None = None) -> dict[str, Any]:
    """A final-text chat completion (``finish_reason="stop"``) answering the request ``body``.

    ``usage`` replaces the default :data:`USAGE` (10 + 5 = 15 tokens) when given.
    """
    return _with_usage(completion(body, {"role": "assistant", "content": content}, "stop"), usage)


def tool_call_completion(
    body: dict[str, Any], calls: list[CallSpec] | tuple[CallSpec, ...], usage: dict[str, int] | None = None
) -> dict[str, Any]:
    """A chat completion whose assistant message asks for ``calls`` (``finish_reason="tool_calls"``).

    Each call is an ``(id, name, args)`` tuple or a dict ``{"id": ..., "name": ..., "args": {...}}``
    (missing ``args`` means ``{}``); ``args`` is sent JSON-encoded, as OpenAI does. ``usage``
    replaces the default :data:`USAGE` when given.
    """
    wire = []
    for spec in calls:
        if isinstance(spec, dict):
            call_id, name, args = spec["id"], spec["name"], spec.get("args") or {}
        else:
            call_id, name, args = spec
        wire.append(_tool_call(call_id, name, args))
    message = {"role": "assistant", "content": None, "tool_calls": wire}
    return _with_usage(completion(body, message, "tool_calls"), usage)


HTTPStep = dict[str, Any] | Callable[[dict[str, Any]], dict[str, Any]]


class _ByModelResponder:
    """The responder built by :func:`responder_by_model` (see there)."""

    def __init__(self, script: dict[str, list[HTTPStep]], default: HTTPStep) -> None:
        self._script = script
        self._default = default
        self._lock = threading.Lock()  # guards: calls
        self.calls: dict[str, int] = {}

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        model = body.get("model") or ""
        with self._lock:
            index = self.calls.get(model, 0)
            self.calls[model] = index + 1
        steps = self._script.get(model) or ()
        step = steps[index] if index < len(steps) else self._default
        if callable(step):
            return step(body)
        usage = step.get("usage")
        if step.get("calls"):
            return tool_call_completion(body, step["calls"], usage)
        return text_completion(body, step["text"], usage)


def responder_by_model(script: dict[str, list[HTTPStep]], *, default: HTTPStep | None = None) -> _ByModelResponder:
    """A :class:`ScriptedLLMServer` responder that answers each model from its own list of steps.

    The n-th request naming ``body["model"]`` gets the n-th step of ``script[model]``. A step
    is ``{"text": ...}`` (a final text), ``{"calls": [...]}`` (tool calls, each an
    ``(id, name, args)`` tuple or ``{"id", "name", "args"}`` dict, see
    :func:`tool_call_completion`), either with an optional ``"usage"``, or a callable
    ``step(body) -> reply`` returning a whole chat completion. A model past the end of its
    steps, or with no script at all, gets ``default`` (the text ``"done"`` when not given).

    Thread-safe: steps are counted per model under a lock, so concurrent requests (parallel
    tool calls, teammates) each take a different step. The returned responder's ``calls``
    dict counts the requests seen per model.
    """
    return _ByModelResponder(script, {"text": "done"} if default is None else default)


def cassette(path: str | os.PathLike[str], mode: str = "once", *, ignore: Iterable[str] = ()) -> Cassette:
    """Record real model exchanges once, replay them offline after (a context manager).

    While the block runs, every HTTP model exchange of any ``Client`` or ``Runtime`` of the
    process (built before or inside the block, on any thread, both wire styles, plain and
    streamed) goes through the cassette. ``"once"``: with no file (or an empty one) the
    exchanges go to the network and are recorded, the file written when the block ends;
    with a file, they are replayed only. ``"none"``: replay only. ``"all"``: always to the
    network, the file rewritten with what the block exchanged.

    The file is JSONL, one exchange a line in the order they happened: ``method``,
    ``path``, ``body`` (the request JSON), ``status``, ``content_type`` and ``response``
    (the body as text; a stream's events as received). No request header is written, and
    the API key and credential headers are shown as ``***`` anywhere else.

    A request is answered by the first unused recording with its method, URL path (host
    and port are not compared) and body (the dotted paths in ``ignore``, ``*`` matching
    any key or index, e.g. ``"messages.*.name"``, left out); a streamed one is served
    event by event. A request with none raises ``CassetteMismatch``, which names the
    first field where the nearest recording differs.

    Args:
        path: the JSONL file.
        mode: ``"once"``, ``"none"`` or ``"all"``.
        ignore: dotted paths of request fields that matching leaves out.

    Returns:
        The ``Cassette``: ``path``, ``mode``, ``recorded`` and ``replayed``.

    Raises:
        ConfigError: an unknown mode or ignored path (at once); with ``"none"``, a
            missing file (when the block starts).
    """
    return Cassette(path, mode, ignore=ignore)
