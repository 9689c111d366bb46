"""Wire styles: pure functions that turn transcripts into request bodies and replies into
``ModelReply`` values. No HTTP here; every style module exposes the same functions:

``path``, ``headers(api_key)``, ``endpoint(base_url)``, ``system_messages(system)``,
``user_message(text)``, ``tools_payload(toolkit)``, ``build_body(...)``,
``parse_reply(data)``, ``stream_body(body)``, ``stream_accumulator()``,
``tool_result_messages(results)``, ``tool_calls_of(message)``,
``tool_results_in(messages)`` and ``answer_every_call(messages, filler)``: the
``WireStyle`` protocol below (``TranscriptStyle`` and ``ExchangeStyle``, the parts the loop
and the engine use), which mypy checks each registered module against. Replies
are normalised as they are parsed, so what a transcript keeps is valid to send back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Mapping, Protocol

from ...data import ModelReply, ToolCall, ToolResult
from ...errors import ConfigError
from . import anthropic
from . import openai

if TYPE_CHECKING:
    from ..sse_reader import SSEEvent
    from ..._tools.toolkit import Toolkit
    from ..._tools.tools import Tool


class StreamAccumulator(Protocol):
    """Reads one streamed reply (pure: no HTTP). Feed it the stream's decoded events in
    order; each ``feed`` returns the text that event adds (``""`` for none) and raises
    ``WireError`` for an event that is not JSON or not the expected shape
    (``StreamEventError`` for an error the server sent in the stream). Once ``finished``
    (the end marker came), ``reply()`` is the ``ModelReply`` the same reply would have
    been unstreamed."""

    @property
    def finished(self) -> bool: ...
    def feed(self, event: SSEEvent) -> str: ...
    def reply(self) -> ModelReply: ...


class TranscriptStyle(Protocol):
    """How a transcript is spelled in the style: the messages a run's loop reads and writes
    (``_run/loop.py`` needs only these)."""

    def system_messages(self, system: str | None) -> list[dict[str, Any]]: ...
    def user_message(self, text: str) -> dict[str, Any]: ...
    def tools_payload(self, toolkit: Toolkit) -> list[dict[str, Any]]: ...
    def tool_calls_of(self, message: dict[str, Any]) -> list[ToolCall]: ...
    def tool_result_messages(self, results: Iterable[tuple[str, ToolResult]]) -> list[dict[str, Any]]: ...
    def tool_results_in(self, messages: list[dict[str, Any]]) -> list[tuple[str, ToolResult]]: ...
    def answer_every_call(self, messages: list[dict[str, Any]], filler: ToolResult) -> list[dict[str, Any]]: ...


class ExchangeStyle(Protocol):
    """How one model call is spelled on the wire: where it goes, the request body, and the
    reply read back, whole or streamed (what the HTTP engine needs)."""

    path: str

    def endpoint(self, base_url: str) -> str: ...
    def headers(self, api_key: str | None) -> dict[str, str]: ...
    def api_key(self, environ: Mapping[str, str], base_url: str | None) -> str | None: ...
    def tool_schema(self, tool: Tool) -> dict[str, Any]: ...
    def build_body(
        self,
        model: str,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        system: str | None,
        request_params: dict[str, Any] | None,
    ) -> dict[str, Any]: ...
    def unforced(self, body: dict[str, Any], keep: str | None = None) -> dict[str, Any]: ...
    def parse_reply(self, data: Any) -> ModelReply: ...
    def stream_body(self, body: dict[str, Any]) -> dict[str, Any]: ...
    def stream_accumulator(self) -> StreamAccumulator: ...


class WireStyle(TranscriptStyle, ExchangeStyle, Protocol):
    """The functions every wire-style module provides (pure: no HTTP): its transcripts'
    spelling and its exchanges'."""


# Each module is checked against the ``WireStyle`` protocol here.
_STYLES: dict[str, WireStyle] = {"openai": openai, "anthropic": anthropic}

#: Every style's name: the one list a command line or a team file checks ``style`` against.
NAMES: tuple[str, ...] = tuple(_STYLES)


def get_style(name: str) -> WireStyle:
    """The style module for ``name``; an unknown name raises ``ConfigError``."""
    try:
        return _STYLES[name]
    except KeyError:
        raise ConfigError(f"unknown style {name!r}; known styles: {', '.join(_STYLES)}") from None
