"""Wire styles: pure functions that turn transcripts into request bodies and replies into
``ModelReply`` values. No HTTP here; every style module exposes the same functions:

``path``, ``headers(api_key)``, ``endpoint(base_url)``, ``system_messages(system)``,
``user_message(text)``, ``tools_payload(toolkit)``, ``build_body(...)``,
``parse_reply(data)``, ``tool_result_messages(results)``, ``tool_calls_of(message)``,
``tool_results_in(messages)`` and ``answer_every_call(messages, filler)``. Replies are
normalised as they are parsed, so what a transcript keeps is valid to send back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import ConfigError
from . import anthropic, openai

if TYPE_CHECKING:
    from ..engine import WireStyle

# Each module is checked against the ``WireStyle`` protocol here.
_STYLES: dict[str, WireStyle] = {"openai": openai, "anthropic": anthropic}


def get_style(name: str) -> WireStyle:
    """The style module for ``name``; an unknown name raises ``ConfigError``."""
    try:
        return _STYLES[name]
    except KeyError:
        raise ConfigError(f"unknown style {name!r}; known styles: {', '.join(_STYLES)}") from None
