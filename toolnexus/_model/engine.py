"""How to reach the model: one small interface, two implementations.

``ModelEngine`` is what the run loop calls: give it one ``ModelCall`` (the transcript, the
tool schemas, the run's cancellation scope and turn gate) and get a ``ModelReply`` back or
an ``LLMError``/``Cancelled``. ``HttpEngine`` speaks a wire style to an HTTP endpoint;
``InProcessEngine`` calls a ``generate`` function. ``ConnectionOptions`` is the one value
that carries every connection option from ``Client``/``Runtime`` to ``build_engine``.

A call that takes its text as it comes (``ModelCall.on_text``) is made in the provider's
streaming mode: the style's ``stream_body`` asks for it, its ``stream_accumulator`` reads
the events the transport decodes, and the reply is the one the same answer would have
been unstreamed. ``on_retry`` hears of every retry, so a consumer can drop the text of
the attempt that failed. A server whose streamed replies carry no usage (llama-cpp-python
ignores ``stream_options.include_usage``) is remembered: from then on a call whose usage
a cap depends on (``ModelCall.needs_usage``) is made plain, so that its usage is measured,
and its text is handed over in one piece. A plain reply without usage to such a call is
refused (``LLMError`` naming the server): the cap could not be kept.

A wire style is a module that satisfies ``WireStyle`` (defined in ``toolnexus.styles``,
and importable from here too); registering it there is all a new style needs, and mypy
checks it against that protocol.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol

import attrs

from .. import _seconds as seconds
from .cancel import CancelScope, TurnGate
from ..data import ModelReply
from ..errors import Cancelled, ConfigError, LLMError, WireError
from .styles import StreamAccumulator, get_style
from .styles import TranscriptStyle
from .styles import WireStyle as WireStyle  # also importable from here, as before
from ..wire import check_json

if TYPE_CHECKING:
    import requests

    from .sse_reader import SSEEvent
    from .transport import EventFeed, Transport

log = logging.getLogger("toolnexus")

REFUSED_PARAMS = ("messages", "tools", "stream")
_STREAMS_LACK_USAGE = (
    "the model server at %s streams replies without usage (it ignores stream_options.include_usage): they count "
    "0 tokens, and calls under a max_tokens or max_cost cap are made plain from now on"
)
_UNMEASURABLE = "the server reports no usage, so the max_tokens/max_cost cap on this run cannot be kept"
_CREDENTIAL_HEADER = re.compile(r"^(authorization|proxy-authorization|api-key)$|key|token|secret", re.IGNORECASE)


@attrs.frozen(kw_only=True)
class ModelCall:
    """One request to the model, with what bounds it: the run's scope and the turn gate."""

    model: str
    system: str | None
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    scope: CancelScope | None = None
    gate: TurnGate | None = None
    #: Called once while the call waits for the model's reply, by an engine that sends a
    #: request and then waits (the HTTP engine); others never call it.
    while_waiting: Callable[[], None] | None = None
    #: ``on_text(delta)``: a piece of the reply's text, as soon as it arrives. Given, the
    #: HTTP engine asks for the provider's streaming mode (without it, the request is
    #: exactly the plain one); the in-process engine calls it once with the whole text.
    #: It runs on the calling thread, while the turn's slot is held: keep it short.
    on_text: Callable[[str], None] | None = None
    #: ``on_retry(attempt, cause)``: the call failed and is being tried again (``attempt``
    #: 1 for the first retry); the text handed to ``on_text`` so far belongs to the failed
    #: attempt and is to be dropped.
    on_retry: Callable[[int, str], None] | None = None
    #: An agent's own ``request_params``, merged over the client's or runtime's (they win).
    request_params: Mapping[str, Any] | None = None
    #: A cap (``max_tokens``, ``max_cost``) depends on this call's usage: made plain, not
    #: streamed, on a server known to stream no usage; a plain reply without usage fails it.
    needs_usage: bool = False
    #: The run has called a tool already: a ``tool_choice`` that forces a call is sent as
    #: ``auto``, so that the model can answer (forced on every step, it never could)...
    after_tool: bool = False
    #: ...unless it lets the model call this tool, which ends the run (a typed run's
    #: ``final_result``).
    ends_run: str | None = None


class ModelEngine(Protocol):
    """Reaches the model. ``complete`` raises ``LLMError`` (the model failed) or
    ``Cancelled`` (the scope was cancelled); ``close`` cancels calls in flight."""

    @property
    def style(self) -> WireStyle: ...

    def complete(self, call: ModelCall) -> ModelReply: ...

    def close(self) -> None: ...

    def keep_connections(self) -> tuple[Any, Callable[[], None]] | None:
        """A hold on pooled connections that outlives ``close``: ``(endpoint, release)``."""
        ...


def _retry_base(value: Any) -> float:
    return seconds.duration("retry_base", value, zero=True)


def _timeout(value: Any) -> float | None:
    return seconds.optional_duration("timeout", value)


def _max_retry_after(value: Any) -> float:
    return seconds.duration("max_retry_after", value, zero=True)


@attrs.frozen(kw_only=True)
class ConnectionOptions:
    """Every option that says how to reach the model, as given to ``Client``/``Runtime``."""

    base_url: str | None = None
    style: str = "openai"
    api_key: str | None = attrs.field(default=None, repr=False)
    headers: dict[str, str] | None = attrs.field(default=None, repr=False)
    session: requests.Session | None = None
    generate: Callable[[dict[str, Any]], Any] | None = None
    retries: int = 2
    #: Seconds before the first retry, doubled for each next one (plus jitter).
    retry_base: float = attrs.field(default=0.5, converter=_retry_base)
    #: Seconds one whole model exchange may take; ``None``: no bound.
    timeout: float | None = attrs.field(default=None, converter=_timeout)
    #: The longest ``Retry-After`` (seconds) a retry waits for; a longer one fails the call.
    max_retry_after: float = attrs.field(default=60.0, converter=_max_retry_after)
    on_error: Callable[[dict[str, Any]], str] | None = None
    request_params: dict[str, Any] | None = None

    @classmethod
    def among(cls, arguments: Mapping[str, Any]) -> ConnectionOptions:
        """The connection options among a constructor's arguments (its ``locals()``), so
        that ``Client`` and ``Runtime`` name each one once, in their signatures."""
        return cls(**{field.name: arguments[field.name] for field in attrs.fields(cls) if field.name in arguments})


class HttpEngine:
    """A wire style over an HTTP transport."""

    def __init__(self, style: WireStyle, transport: Transport, request_params: dict[str, Any] | None) -> None:
        self._style = style
        self.transport = transport
        self._params = request_params
        #: Set once a streamed reply came without usage: this server streams none.
        self._streams_lack_usage = threading.Event()

    def __repr__(self) -> str:
        return f"HttpEngine(url={self.transport.public_url!r})"

    @property
    def style(self) -> WireStyle:
        return self._style

    def complete(self, call: ModelCall) -> ModelReply:
        params = {**(self._params or {}), **call.request_params} if call.request_params else self._params
        body = self._style.build_body(call.model, call.messages, call.tools, call.system, params)
        if call.after_tool:
            body = self._style.unforced(body, keep=call.ends_run)
        if call.on_text is not None and not (call.needs_usage and self._streams_lack_usage.is_set()):
            reply = self._streamed(body, call, call.on_text)
            if reply.usage_missing and not self._streams_lack_usage.is_set():
                self._streams_lack_usage.set()
                log.warning(_STREAMS_LACK_USAGE, self.transport.public_url)
            return reply
        data = self.transport.post_json(
            body, scope=call.scope, gate=call.gate, while_waiting=call.while_waiting, on_retry=call.on_retry
        )
        reply = self._parsed(data)
        if reply.usage_missing and call.needs_usage:
            shown = self.transport.excerpt(json.dumps(data, ensure_ascii=False))
            raise unmeasurable(self.transport.public_url, shown, status=200)
        if call.on_text is not None and reply.text:
            call.on_text(reply.text)  # a watched call made plain: its text in one piece
        return reply

    def _parsed(self, data: Any) -> ModelReply:
        try:
            return self._style.parse_reply(data)
        except WireError as exc:
            raise self._unreadable(exc, json.dumps(data, ensure_ascii=False)) from exc

    def _unreadable(self, exc: WireError, shown: str) -> LLMError:
        transport = self.transport
        cause = f"unreadable reply: {transport.scrub(str(exc))}"
        return LLMError(
            f"model call to {transport.public_url} failed: {cause}",
            status=200,
            body_excerpt=transport.excerpt(shown),
            url=transport.public_url,
            cause=cause,
        )

    def _streamed(self, body: dict[str, Any], call: ModelCall, on_text: Callable[[str], None]) -> ModelReply:
        """The call in the provider's streaming mode: each attempt reads its events into a
        fresh accumulator, handing text to ``on_text`` as it comes."""
        latest: list[StreamAccumulator] = []

        def begin() -> EventFeed:
            accumulator = self._style.stream_accumulator()
            latest[:] = [accumulator]

            def feed(event: SSEEvent) -> bool:
                delta = accumulator.feed(event)
                if delta:
                    on_text(delta)
                return accumulator.finished

            return feed

        stream_body = self._style.stream_body(body)
        streamed, data = self.transport.post_stream(
            stream_body,
            begin=begin,
            scope=call.scope,
            gate=call.gate,
            while_waiting=call.while_waiting,
            on_retry=call.on_retry,
        )
        if not streamed:  # the server answered with a plain reply
            reply = self._parsed(data)
            if reply.text:
                on_text(reply.text)
            return reply
        try:
            return latest[0].reply()
        except WireError as exc:
            raise self._unreadable(exc, "") from exc

    def close(self) -> None:
        self.transport.close()

    def keep_connections(self) -> tuple[Any, Callable[[], None]] | None:
        return self.transport.keep_connections()


class InProcessEngine:
    """The in-process model: ``generate(request) -> dict``, OpenAI-shaped; never retried."""

    def __init__(self, generate: Callable[[dict[str, Any]], Any]) -> None:
        from .styles import openai

        self._generate = generate
        self._openai = openai

    def __repr__(self) -> str:
        return "InProcessEngine()"

    @property
    def style(self) -> WireStyle:
        return self._openai

    def complete(self, call: ModelCall) -> ModelReply:
        # A snapshot of the transcript: the model may keep the request after the run goes on.
        request = self._openai.generate_request(call.model, list(call.messages), call.tools)
        if call.scope is not None and call.scope.cancelled:
            raise Cancelled("interrupted before the model call")
        try:
            if call.gate is not None:
                with call.gate.held(call.scope):
                    raw = self._generate(request)
            else:
                raw = self._generate(request)
        except Cancelled:
            raise
        except Exception as exc:  # final: the in-process model is never retried
            cause = f"{type(exc).__name__}: {exc}"
            raise LLMError(
                f"generate() failed: {cause}", status=None, body_excerpt=str(exc)[:1000], url="generate()", cause=cause
            ) from exc
        if call.scope is not None and call.scope.cancelled:
            raise Cancelled("interrupted during the model call")
        try:
            reply = self._openai.parse_generated(raw)
        except WireError as exc:
            cause = f"unreadable reply: {exc}"
            raise LLMError(
                f"generate() failed: {cause}", status=None, body_excerpt=repr(raw)[:1000], url="generate()", cause=cause
            ) from exc
        if reply.usage_missing and call.needs_usage:
            raise unmeasurable("generate()", repr(raw)[:1000])
        if call.on_text is not None and reply.text:
            call.on_text(reply.text)  # the whole text at once: the model gave it so
        return reply

    def close(self) -> None:
        pass

    def keep_connections(self) -> tuple[Any, Callable[[], None]] | None:
        return None


class NoModel:
    """The engine of a runtime given neither ``base_url`` nor ``generate``: it can open a
    state, inspect and replay what is recorded there, and asks no model (a turn that would
    ends ``error`` saying so)."""

    def __repr__(self) -> str:
        return "NoModel()"

    @property
    def style(self) -> WireStyle:
        return get_style("openai")

    def complete(self, call: ModelCall) -> ModelReply:
        cause = "this runtime was built without base_url or generate: it reaches no model"
        raise LLMError(cause, status=None, body_excerpt="", url="", cause=cause)

    def close(self) -> None:
        pass

    def keep_connections(self) -> tuple[Any, Callable[[], None]] | None:
        return None


def request_of(style: TranscriptStyle, call: ModelCall) -> dict[str, Any]:
    """The request a model step sends, as plain data in the shape ``generate`` receives
    (``model``, ``messages``, ``tools``; a style that carries the system prompt beside the
    messages adds ``system``): what a journal records and a replay compares."""
    request: dict[str, Any] = {"model": call.model, "messages": list(call.messages), "tools": call.tools}
    if call.system and not style.system_messages(call.system):
        request["system"] = call.system
    return request


def unmeasurable(url: str, excerpt: str, status: int | None = None) -> LLMError:
    """The refusal of a reply without usage to a call a cap depends on: final, never retried."""
    message = f"model call to {url} failed: {_UNMEASURABLE}"
    return LLMError(message, status=status, body_excerpt=excerpt, url=url, cause=_UNMEASURABLE)


def check_credential(what: str, value: str) -> None:
    """A header-borne credential must be sendable as it is; the message never shows it."""
    for char in value:
        if char.isspace() or not char.isprintable() or ord(char) > 255:
            kind = (
                "whitespace"
                if char.isspace()
                else "a control character"
                if not char.isprintable()
                else "a character outside latin-1"
            )
            raise ConfigError(f"{what} contains {kind} (a trailing newline from a file?); its value is not shown")


def credential_values(api_key: str | None, headers: dict[str, str]) -> tuple[str, ...]:
    """The values no message may show: the key and every credential-like header value,
    also without its scheme word (``Bearer x`` and ``x``)."""
    values = [api_key] if api_key else []
    for name, value in headers.items():
        if _CREDENTIAL_HEADER.search(name) and value:
            values.append(value)
            token = value.split()[-1] if value.split() else ""
            if len(token) >= 4:
                values.append(token)
    return tuple(values)


def _check_headers(headers: dict[str, str]) -> None:
    for name, value in headers.items():
        if not isinstance(value, str):
            raise ConfigError(f"header {name!r} must be a str")
        if "\r" in value or "\n" in value or value[:1].isspace() or any(ord(c) > 255 for c in value):
            raise ConfigError(
                f"header {name!r} has a value with a line break, leading whitespace or a character outside "
                "latin-1; its value is not shown"
            )


def build_engine(options: ConnectionOptions, *, pool_size: int = 10, required: bool = True) -> ModelEngine:
    """Check the connection options once and build what reaches the model (``NoModel``
    when neither ``base_url`` nor ``generate`` is given and a model is not ``required``).

    Raises:
        ConfigError: neither ``base_url`` nor ``generate`` (when ``required``), reserved
            ``request_params``, an unknown style, or a key or header that could not be sent.
    """
    if options.generate is None and not options.base_url:
        if not required:
            return NoModel()
        raise ConfigError("give either base_url (an HTTP endpoint) or generate (an in-process model)")
    params = dict(options.request_params or {})
    refused = [key for key in REFUSED_PARAMS if key in params]
    if refused:
        raise ConfigError(f"request_params may not set {', '.join(refused)}")
    if params:
        try:
            check_json(params, "request_params")
        except WireError as exc:
            raise ConfigError(str(exc)) from None
    if options.generate is not None:
        return InProcessEngine(options.generate)
    wire = get_style(options.style)
    from .transport import Transport  # the HTTP stack loads only when it is used

    assert options.base_url is not None
    api_key = options.api_key if options.api_key is not None else wire.api_key(os.environ, options.base_url)
    if api_key:
        check_credential("api_key", api_key)
    extra = dict(options.headers or {})
    _check_headers(extra)
    headers = {**wire.headers(api_key), **extra}
    transport = Transport(
        url=wire.endpoint(options.base_url),
        headers=headers,
        secrets=credential_values(api_key, headers),
        session=options.session,
        retries=options.retries,
        retry_base=options.retry_base,
        timeout=options.timeout,
        max_retry_after=options.max_retry_after,
        on_error=options.on_error,
        pool_size=pool_size,
    )
    return HttpEngine(wire, transport, params or None)
