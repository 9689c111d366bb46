"""Every exception a host can catch from toolnexus derives from ``ToolnexusError``.

Outcomes the model should see (a failing tool, a budget limit, a failed child agent) are
values, never exceptions; these classes are for host-facing calls only.
"""

from __future__ import annotations


class ToolnexusError(Exception):
    """Base of every error a host can catch from toolnexus."""


class LLMError(ToolnexusError):
    """The model endpoint failed after the allowed retries.

    ``status`` is the HTTP status (``None`` for a connection failure or an unreadable
    reply); ``body_excerpt`` is an excerpt of what came back, long enough to keep the
    provider's reason; ``url`` is the endpoint without credentials or query, and ``cause``
    the short reason (``connection refused``, ``timed out``, ``HTTP 500``...) that the
    message also names. Credentials show as ``***`` in all of them.
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        body_excerpt: str = "",
        url: str | None = None,
        cause: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body_excerpt = body_excerpt
        self.url = url
        self.cause = cause if cause is not None else message


class LLMTimeout(LLMError, TimeoutError):
    """The model call ran past ``timeout``; never retried."""


class CassetteMismatch(LLMError):
    """A cassette replaying exchanges has no unused recording for a request: the message
    names the method, the path and the first field where the nearest recording differs.
    ``status`` is None; never retried."""


class ReplayError(ToolnexusError):
    """A run cannot be replayed or forked: it is still running or suspended, or has no
    journal (pruned, or recorded by a version that kept no requests), or a fork point is
    outside its record. The message names the handle."""


class Cancelled(ToolnexusError):
    """The run was interrupted while a model call was in flight; never retried."""


class WireError(ToolnexusError, ValueError):
    """JSON on the wire did not have the expected shape."""


class StreamEventError(WireError):
    """An event of a streamed reply that reports a failure: an error the server sent inside
    the stream. ``retryable`` when the retry rules retry its kind (an overloaded server,
    an internal error, a rate limit), as they retry the HTTP status it stands for."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable


class SpawnError(ToolnexusError):
    """``spawn`` was refused; the message names the cap (``maxChildren``, ``maxDepth``, ...)."""


class InboxFull(ToolnexusError):
    """``post`` found the handle's inbox at its cap."""


class HandleClosed(ToolnexusError):
    """A verb was used on a handle that is closed."""


class UnknownHandle(ToolnexusError, LookupError):
    """No handle has that id."""


class UnknownRequest(ToolnexusError, LookupError):
    """No pending request has the id the Answer echoes."""


class ConfigError(ToolnexusError, ValueError):
    """A constructor was given options that cannot work together."""


class StateError(ToolnexusError):
    """The durable state could not be reached, or a commit failed after its retries.

    Nothing of the change that raised it was written.
    """


class DispatchError(ToolnexusError):
    """A turn's message could not be sent (a broker that is down): the turn stays queued in
    the state and the runtime's sweep sends it again."""


class AGUIInputError(ToolnexusError):
    """An AG-UI run's input was refused before anything started (CONTRACT §21): ``status``
    is the HTTP status to answer (``400`` not a JSON object, ``422`` not an input this thread
    can take, ``409`` the thread is busy or another request answered first, ``404`` no such
    thread for this caller) and ``reason`` says why, naming the field or the open ids."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
