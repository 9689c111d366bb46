"""``Refused``: what the served layer raises when a request is turned away, so that each
surface answers it in its own shape (Flask JSON, a JSON-RPC error, an AG-UI error...)."""

from __future__ import annotations

from typing import Mapping

from ..errors import ToolnexusError


class Refused(ToolnexusError):
    """A request the served layer turns away before anything starts.

    ``status`` is the HTTP status to answer (``401`` who asks is refused, ``403`` refused by
    the app's own hook, ``404`` not found or another principal's, ``413`` body too large,
    ``415`` not JSON, ``400`` malformed, ``503`` too many open streams); ``reason`` is the
    text to show; ``headers`` go with the answer (``Retry-After`` on a ``503``,
    ``WWW-Authenticate`` on a bearer ``401``).
    """

    def __init__(self, status: int, reason: str, *, headers: Mapping[str, str] | None = None) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason
        self.headers: dict[str, str] = dict(headers or {})

    def __repr__(self) -> str:
        return f"Refused({self.status}, {self.reason!r})"


def not_found(what: str) -> Refused:
    """The one answer for an id that does not exist *and* for one that is another
    principal's: the two cannot be told apart."""
    return Refused(404, f"no {what}")
