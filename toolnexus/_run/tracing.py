"""OpenTelemetry spans for turns, model calls and tool calls, when ``opentelemetry-api`` is installed.

This is the only module that touches OpenTelemetry, and it imports it lazily: the first
``Tracer`` or ``capture`` looks for the package once. Without it every span is a shared
do-nothing object, so an uninstrumented run pays a few attribute lookups per call.

Names and attributes follow the GenAI semantic conventions: ``invoke_agent <agent>`` per
turn, ``chat <model>`` per model call, ``execute_tool <tool>`` per tool call. Text (prompts,
completions, tool arguments and results, error messages that may quote a reply) goes on a
span only with ``content=True``; no span ever holds an API key or request headers.

A queued turn carries its parent's trace context as a small dict of strings (the W3C
``traceparent``/``tracestate`` headers), captured where the turn is queued, so a turn run
on another thread, by a waiter, or in another process still nests where it was started.
"""

from __future__ import annotations

import importlib
import json
import os
from typing import TYPE_CHECKING, Any, ContextManager

from ..errors import Cancelled

if TYPE_CHECKING:
    from ..data import ModelReply, Request, ToolCall, ToolResult

#: A trace context that can travel with a queued turn: W3C trace-context headers.
Carrier = dict[str, str]

_INSTRUMENTATION = "toolnexus"


class _Otel:
    """The parts of ``opentelemetry-api`` in use, found once."""

    def __init__(self) -> None:
        trace = importlib.import_module("opentelemetry.trace")
        tracecontext = importlib.import_module("opentelemetry.trace.propagation.tracecontext")
        self.trace: Any = trace
        self.context: Any = importlib.import_module("opentelemetry.context")
        # Always W3C, whatever the global propagator: the carrier's format is ours to keep stable.
        self.propagator: Any = tracecontext.TraceContextTextMapPropagator()
        self.error: Any = trace.Status(trace.StatusCode.ERROR)
        # The API's proxy tracer follows a provider set later, so one serves every Tracer.
        self.tracer: Any = trace.get_tracer(_INSTRUMENTATION)
        # Bound once: ``silent`` is asked around every model call, tool call and turn.
        self._provider: Any = trace.get_tracer_provider
        self._proxy: Any = trace.ProxyTracerProvider
        self._current: Any = trace.get_current_span
        self._trace: Any = trace
        # While no provider is set, ``get_tracer_provider`` looks the environment up on every
        # call; unless the environment names a provider (read once, here), the set-once
        # global tells the same without that lookup.
        self._provider_in_env = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ

    def silent(self) -> bool:
        """No SDK records spans (no provider was set) and no span is current: every span
        would be a void one, so none needs to be made."""
        unset = getattr(self._trace, "_TRACER_PROVIDER", False) is None and not self._provider_in_env
        if not unset and not isinstance(self._provider(), self._proxy):
            return False
        return not self._current().get_span_context().is_valid


_found: tuple[_Otel | None] | None = None


def _otel() -> _Otel | None:
    """OpenTelemetry if installed (looked for once), else None."""
    global _found
    if _found is None:
        try:
            _found = (_Otel(),)
        except ImportError:
            _found = (None,)
    return _found[0]


def capture() -> Carrier | None:
    """The current trace context, to hand to a turn that runs later or elsewhere.

    None when tracing is off; an empty dict when no span is active (the turn starts a
    trace of its own).
    """
    otel = _otel()
    if otel is None:
        return None
    carrier: Carrier = {}
    otel.propagator.inject(carrier)
    return carrier


class _Inert:
    """Stands in for every span when tracing is off or nobody records."""

    def __enter__(self) -> _Inert:
        return self

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        pass

    def done(self, status: str, text: str | None = None, request: Request | None = None) -> None:
        pass

    def carrier(self) -> Carrier | None:
        return None

    def reply(self, reply: ModelReply) -> None:
        pass

    def current(self) -> _Inert:
        return self

    def running(self, args: Any) -> _Inert:
        return self

    def suspended(self, request: Request) -> None:
        pass

    def result(self, result: ToolResult) -> None:
        pass


#: The span of a run nobody traces: also its own do-nothing context manager.
INERT = _Inert()


class Tracer:
    """Spans for one ``Client`` or ``Runtime``: whether text is recorded, and for which provider."""

    def __init__(self, *, content: bool = False, provider: str | None = None, enabled: bool = True) -> None:
        self.content = content
        self.provider = provider or "_OTHER"
        otel = _otel() if enabled else None
        self._otel = otel
        self._tracer: Any = otel.tracer if otel is not None else None

    def agent(
        self,
        name: str | None,
        *,
        model: str,
        handle_id: str | None = None,
        parent: Carrier | None = None,
        follows: Carrier | None = None,
        text: str | None = None,
    ) -> ContextManager[Any]:
        """One ``invoke_agent`` span, current inside the block.

        ``parent`` is a carrier from ``capture``: the span nests under it whatever thread
        runs the block; None nests it under the current span. ``follows`` (the carrier of
        a turn that suspended) becomes a link: a resumed turn points back to it.
        """
        otel = self._otel
        if otel is None or (not parent and not follows and otel.silent()):
            return INERT
        context = otel.propagator.extract(parent) if parent is not None else None
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": self.provider,
            "gen_ai.request.model": model,
        }
        if name is not None:
            attributes["gen_ai.agent.name"] = name
        if handle_id is not None:
            attributes["toolnexus.handle.id"] = handle_id
        links = None
        if follows:
            attributes["toolnexus.turn.resumed"] = True
            links = [otel.trace.Link(otel.trace.get_current_span(otel.propagator.extract(follows)).get_span_context())]
        kind = otel.trace.SpanKind.INTERNAL
        title = f"invoke_agent {name}" if name else "invoke_agent"
        span = self._tracer.start_span(title, context=context, kind=kind, attributes=attributes, links=links)
        if _void(span):
            return INERT
        traced = _AgentSpan(otel, span, self.content)
        if text is not None:
            traced.set_text("gen_ai.input.messages", [{"role": "user", "content": text}])
        return _Scope(traced, end=True, status_key="toolnexus.turn.status")

    def chat(self, model: str, messages: list[dict[str, Any]], system: str | None = None) -> ContextManager[Any]:
        """One ``chat`` span around a model call; an exception marks it failed."""
        otel = self._otel
        if otel is None or otel.silent():
            return INERT
        attributes = {
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": self.provider, "gen_ai.request.model": model
        }
        span = self._tracer.start_span(f"chat {model}", kind=otel.trace.SpanKind.CLIENT, attributes=attributes)
        if _void(span):
            return INERT
        traced = _ChatSpan(otel, span, self.content)
        if traced.recording and self.content:
            if system:
                traced.set_text("gen_ai.system_instructions", [{"type": "text", "content": system}])
            traced.set_text("gen_ai.input.messages", messages)
        return _Scope(traced, end=True)

    def tool(self, call: ToolCall) -> Any:
        """An ``execute_tool`` span, started now and ended by ``running``.

        Started before the call's in-order prepare step and ended after it ran, possibly
        on another thread: whatever the tool starts (a delegated child turn) nests in it.
        """
        otel = self._otel
        if otel is None or otel.silent():
            return INERT
        attributes = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.name,
            "gen_ai.tool.call.id": call.id,
            "gen_ai.tool.type": "function",
        }
        kind = otel.trace.SpanKind.INTERNAL
        span = self._tracer.start_span(f"execute_tool {call.name}", kind=kind, attributes=attributes)
        if _void(span):
            return INERT
        return _ToolSpan(otel, span, self.content)


def _void(span: Any) -> bool:
    """A span nobody records and nothing can nest under (no SDK installed): skip the rest."""
    return not span.is_recording() and not span.get_span_context().is_valid


class _Span:
    __slots__ = ("otel", "span", "content", "recording")

    def __init__(self, otel: _Otel, span: Any, content: bool) -> None:
        self.otel = otel
        self.span = span
        self.content = content
        self.recording: bool = span.is_recording()

    def set_text(self, key: str, value: Any) -> None:
        """Text-bearing attributes: only with ``content``; structured values as JSON."""
        if self.content and self.recording:
            self.span.set_attribute(key, value if isinstance(value, str) else json.dumps(value, default=str))

    def failed(self, exc: BaseException, status_key: str | None) -> None:
        if not self.recording:
            return
        interrupted = isinstance(exc, Cancelled)
        if status_key is not None:
            self.span.set_attribute(status_key, "interrupted" if interrupted else "error")
            if interrupted:
                return  # an interrupted turn is an outcome, not a failure
        status = getattr(exc, "status", None)
        if isinstance(status, int):
            self.span.set_attribute("http.response.status_code", status)
        self.span.set_attribute("error.type", type(exc).__name__)
        # The message may quote the model's reply: it is text, recorded only with content.
        description = f"{type(exc).__name__}: {exc}" if self.content else type(exc).__name__
        self.span.set_status(self.otel.trace.Status(self.otel.trace.StatusCode.ERROR, description))


class _Scope:
    """Makes a span current for a block (on whatever thread runs it) and, with ``end``,
    ends it there; an exception leaving the block marks the span failed."""

    __slots__ = ("traced", "end", "status_key", "token")

    def __init__(self, traced: _Span, *, end: bool, status_key: str | None = None) -> None:
        self.traced = traced
        self.end = end
        self.status_key = status_key
        self.token: Any = None

    def __enter__(self) -> Any:
        otel = self.traced.otel
        self.token = otel.context.attach(otel.trace.set_span_in_context(self.traced.span))
        return self.traced

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        try:
            if exc is not None and self.end:
                self.traced.failed(exc, self.status_key)
        finally:
            self.traced.otel.context.detach(self.token)
            if self.end:
                self.traced.span.end()


class _AgentSpan(_Span):
    __slots__ = ()

    def carrier(self) -> Carrier:
        """This span as trace-context headers, for a later turn to link to."""
        carrier: Carrier = {}
        self.otel.propagator.inject(carrier, context=self.otel.trace.set_span_in_context(self.span))
        return carrier

    def done(self, status: str, text: str | None = None, request: Request | None = None) -> None:
        """The turn's outcome: its status, the request it suspends on, its final text."""
        if not self.recording:
            return
        self.span.set_attribute("toolnexus.turn.status", status)
        if request is not None:
            self.span.set_attribute("toolnexus.request.id", request.id)
        if text is not None:
            self.set_text("gen_ai.output.messages", [{"role": "assistant", "content": text}])


class _ChatSpan(_Span):
    __slots__ = ()

    def reply(self, reply: ModelReply) -> None:
        if not self.recording:
            return
        span = self.span
        span.set_attribute("gen_ai.usage.input_tokens", reply.usage.prompt_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", reply.usage.completion_tokens)
        if reply.finish_reason is not None:
            span.set_attribute("gen_ai.response.finish_reasons", [reply.finish_reason])
        self.set_text("gen_ai.output.messages", [reply.message])


class _ToolSpan(_Span):
    __slots__ = ()

    def current(self) -> _Scope:
        """The span as the current one, without ending it (the prepare step)."""
        return _Scope(self, end=False)

    def running(self, args: Any) -> _Scope:
        """Current for the block, ended at its end, on whichever thread runs it."""
        if args is not None:
            self.set_text("gen_ai.tool.call.arguments", args)
        return _Scope(self, end=True)

    def suspended(self, request: Request) -> None:
        if self.recording:
            details = {"toolnexus.request.id": request.id, "toolnexus.request.kind": request.kind}
            self.span.add_event("suspended", details)

    def result(self, result: ToolResult) -> None:
        if not self.recording:
            return
        if result.is_error and result.pending is None:
            self.span.set_attribute("error.type", "tool_error")
            self.span.set_status(self.otel.error)
        self.set_text("gen_ai.tool.call.result", result.output)


#: The tracer of a run nobody traces (the default of ``RunSpec``).
OFF = Tracer(enabled=False)
