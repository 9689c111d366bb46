"""HTTP to the model endpoint: the only part of toolnexus that imports ``requests``.

``exchange`` owns one whole exchange, plain or streamed (deadline, cancellation, turn
gate, retries, error names, secret scrubbing) and ``Transport``; ``direct`` and
``via_requests`` are its two routes, chosen once per transport (``base`` is their shape,
``http1`` the direct route's reader of plain replies); ``overrides`` lets a test's route
(scripted replies, a cassette) stand in front of every transport for a while;
``sessions`` holds the shared sessions, tracked adapters and per-URL preparation;
``failures`` names what went wrong.
"""

from .exchange import EventFeed, Transport
from .failures import EXCERPT_CHARS, RETRYABLE_STATUSES, _retry_delay, describe_failure, public_url, retry_after_seconds
from .sessions import CancellableAdapter, cancellable_session, track_host_adapter

__all__ = [
    "EXCERPT_CHARS",
    "RETRYABLE_STATUSES",
    "CancellableAdapter",
    "EventFeed",
    "Transport",
    "_retry_delay",
    "cancellable_session",
    "describe_failure",
    "public_url",
    "retry_after_seconds",
    "track_host_adapter",
]
