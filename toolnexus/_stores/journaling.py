"""What both journal parts share: a turn's documents and its journal, written once over
the rows each part keeps (``get``/``put``), by the rules of ``_run.journal``."""

from __future__ import annotations

from typing import Any, Callable, ContextManager, Iterator

from .._run import journal
from .._team.handle import Handle, Turn
from .._team.record import Resume


class JournalRows:
    """The half of a journal part (``parts.Journals``) that does not depend on where the
    rows are: subclasses keep the rows (``get``, ``put``, ``rows``) and join the
    tree store's unit of work (``change``)."""

    def change(self, *handles: Handle, dirty: bool = True) -> ContextManager[Any]:
        raise NotImplementedError

    def get(
        self, handle_id: str, serial: int, segment: int, kind: str, step: int, call_id: str
    ) -> tuple[str, Any] | None:
        raise NotImplementedError

    def put(
        self, handle_id: str, serial: int, segment: int, kind: str, step: int, call_id: str, status: str, payload: Any
    ) -> None:
        raise NotImplementedError

    def rows(self, handle_id: str) -> list[tuple[int, int, str, int, str, str, Any]]:
        raise NotImplementedError

    def keep_turn(self, handle_id: str, turn: Turn) -> None:
        journal.keep_turn(self, handle_id, turn)

    def keep_resume(self, handle_id: str, serial: int, resume: Resume) -> None:
        journal.keep_resume(self, handle_id, serial, resume)

    def turn_documents(self, handle_id: str, serial: int) -> tuple[str, Resume | None]:
        return journal.turn_documents(self, handle_id, serial)

    def keep_outcome(self, handle_id: str, serial: int, result: Any) -> None:
        journal.keep_outcome(self, handle_id, serial, result)

    def open(
        self,
        handle: Handle,
        turn: Turn,
        lineage: Callable[[Handle], Iterator[Handle]],
        owner: str,
        counted: Callable[[], None],
        *,
        defer_final: bool = False,
    ) -> journal.TurnJournal:
        return journal.TurnJournal(handle, turn, self, lineage, owner, counted, defer_final=defer_final)
