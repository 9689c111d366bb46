"""What the streamed replies of every style share: reading one event's JSON, and naming an
error the server sent inside a stream.

An accumulator (one per streamed reply, see ``StreamAccumulator`` in ``toolnexus.styles``)
is pure: it is fed decoded events, hands back the text each one adds, and at the end
builds the same ``ModelReply`` a plain reply would have made. An event that is not JSON or
not the shape its style expects raises ``WireError``; an error event raises
``StreamEventError``, retryable when its kind is one the retry rules retry as a status
(an overloaded server, an internal error, a rate limit, a server-side timeout).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ...errors import StreamEventError, WireError

if TYPE_CHECKING:
    from ..sse_reader import SSEEvent

_RETRYABLE_KINDS = frozenset(
    {"overloaded_error", "api_error", "rate_limit_error", "timeout_error", "server_error", "rate_limit_exceeded"}
)


def event_object(event: SSEEvent) -> dict[str, Any]:
    """The event's ``data`` as a JSON object."""
    try:
        data = json.loads(event.data)
    except (ValueError, RecursionError):
        raise WireError("stream event is not JSON") from None
    if not isinstance(data, dict):
        raise WireError("stream event is not a JSON object")
    return data


def error_event(error: Any) -> StreamEventError:
    """The failure an ``error`` event (or an ``{"error": ...}`` chunk) reports."""
    if isinstance(error, dict):
        kind = error.get("type") or error.get("code")
        message = error.get("message")
    else:
        kind, message = None, error
    kind = kind if isinstance(kind, str) else "error"
    text = f"{kind}: {message}" if isinstance(message, str) and message else kind
    return StreamEventError(text[:200], retryable=kind in _RETRYABLE_KINDS)


def text_of(value: Any, what: str) -> str:
    """``value`` as a piece of text (absent is ``""``); anything else is a malformed event."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise WireError(f"{what} is not a string")
    return value
