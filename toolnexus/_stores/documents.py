"""What a handle asks of its tree store's parts (``parts.Journals``, ``parts.TreeLog``):
keep a turn's documents, and announce its changes. Apart from ``parts.py`` because the
handle (``_team.handle``), which ``parts.py`` names, is written against these."""

from __future__ import annotations

from typing import Any, Protocol

from .._team.record import Resume, Turn


class TurnDocuments(Protocol):
    """A turn's documents: the input it replays from, the answer it resumes with."""

    def keep_turn(self, handle_id: str, turn: Turn) -> None:
        """Keep the input a replay of ``turn`` starts from (lock held, in its unit)."""
        ...

    def keep_resume(self, handle_id: str, serial: int, resume: Resume) -> None:
        """Keep the answer a resumed turn continues with (lock held, in its unit)."""
        ...

    def turn_documents(self, handle_id: str, serial: int) -> tuple[str, Resume | None]:
        """The kept input and resume of a turn."""
        ...

    def keep_outcome(self, handle_id: str, serial: int, result: Any) -> None:
        """Keep how a turn settled beside its journal, which stays until its run is pruned
        (a replay reads it; lock held, in its unit)."""
        ...


class Announces(Protocol):
    """Where changes are announced as stream events."""

    def emit(self, handle: str | None, kind: str, data: dict[str, Any], result: Any = None, now: bool = False) -> None:
        """Record a stream event: inside a unit of work it commits with the unit; outside
        one it waits for the next unit that touches ``handle`` (``now``: its own unit)."""
        ...
