"""A remote teammate's turn (``AgentDef(a2a=...)``, CONTRACT §22 "Calling"): one task of a
remote A2A agent (``_a2a.remote``) instead of the model loop.

The turn's input goes out as a message; the task's rest is the turn's result: ``done``
(usage 0 tokens, ``turns`` 0), ``pending`` on a ``Request`` of kind ``"a2a"`` (it bubbles
up as any suspension does: the teammate's own ``wait_for`` first, else its parent's, else
a person), or ``error`` naming the peer. The resumed turn sends the ``Answer`` on the same
remote task. The remote task is noted in the turn's journal as soon as it is known (and an
answer before it is sent), so a turn continued in another process after a crash follows
that task rather than starting another or answering twice; the runtime's log says so
(``{"event": "a2a_task", "handle", "task", "url"}``).
"""

from __future__ import annotations

import hashlib
import logging
from typing import TYPE_CHECKING, Any, Callable, Iterator

from .._a2a.peer import CANCEL_TIMEOUT_S, Cards, PeerError
from .._a2a import remote
from .._a2a.remote import RemoteTask
from .._model.cancel import CancelScope
from ..data import AgentResult, Request, Usage
from .budget import max_turns
from .handle import RUNNING, Handle, Turn

if TYPE_CHECKING:
    from .._stores.parts import TreeStore

log = logging.getLogger("toolnexus")

#: Journal note keys: the remote task of the turn, and each answer sent on it.
TASK_NOTE = "a2a-task"
ANSWER_NOTE = "a2a-answer-"


class RemoteTurns:
    """The remote teammates' turns of one runtime; each peer's card is read once."""

    def __init__(
        self, *, tree_store: TreeStore, lineage: Callable[[Handle], Iterator[Handle]], owner: str, nonce: str
    ) -> None:
        self._tree_store = tree_store
        self._lineage = lineage
        self._owner = owner
        self._nonce = nonce
        self._cards = Cards()

    def run(self, handle: Handle, turn: Turn, counted: Callable[[], None]) -> AgentResult:
        """``turn`` of the remote teammate ``handle``, to its outcome.

        Raises:
            Cancelled: the turn was interrupted (the remote task is canceled) or taken over.
        """
        definition = handle.definition
        peer = definition.a2a
        journal = turn.journal = self._tree_store.journal.open(handle, turn, self._lineage, self._owner, counted)
        task = journal.noted(TASK_NOTE)
        known = (str(task["taskId"]), str(task.get("contextId", ""))) if isinstance(task, dict) else None
        resume = None
        if turn.resume is not None:
            asked = turn.resume.request
            if journal.noted(ANSWER_NOTE + asked.id) is None:  # not sent before a crash: send it now
                journal.note(ANSWER_NOTE + asked.id, {"sent": True})
                resume = (asked, turn.resume.answer)
            data = asked.data or {}
            known = (str(data.get("taskId", "")), str(data.get("contextId", "")))
        outcome = remote.run(
            peer,
            self._cards,
            turn.scope,
            prompt=turn.input,
            message_id=self._message_id(handle, turn),
            resume=resume,
            known=known,
            note=lambda task_id, context_id: self._note(journal, handle, task_id, context_id),
            check=lambda: _check(handle, self._owner),
            wait_for=definition.wait_for,
            rounds=max_turns(handle.record.budget),
        )
        status = outcome.status
        return AgentResult(
            text=outcome.text, status=status, is_error=status == "error", pending=outcome.request, turns=0,
            usage=Usage(), handle_id=handle.id,
        )

    def cancelled(self, handle: Handle, request: Request) -> None:
        """``request`` of ``handle`` was cancelled (an interrupt, a close): when it is a
        remote teammate's question, its remote task is canceled (best effort, bounded)."""
        peer = handle.definition.a2a if handle.definition is not None else None
        task_id = (request.data or {}).get("taskId") if request.kind == "a2a" else None
        if peer is None or not isinstance(task_id, str) or not task_id:
            return
        try:
            card = self._cards.get(peer, None, timeout=CANCEL_TIMEOUT_S)
        except PeerError as exc:
            log.info("a2a: the remote task %s was not canceled: %s", task_id, exc)
            return
        RemoteTask(peer, card, CancelScope(), note=_ignore, check=_mine, task_id=task_id).cancel()

    def _note(self, journal: Any, handle: Handle, task_id: str, context_id: str) -> None:
        """The remote task, kept in the journal, then in the runtime's log (``a2a_task``) and
        the library's (debug)."""
        journal.note(TASK_NOTE, {"taskId": task_id, "contextId": context_id})
        where = handle.definition.a2a.where
        self._tree_store.events.add_log({"event": "a2a_task", "handle": handle.id, "task": task_id, "url": where})
        log.debug("a2a: %s follows the remote task %s of %s", handle.id, task_id, where)

    def _message_id(self, handle: Handle, turn: Turn) -> str:
        """One id per message a turn sends, the same when a continued turn sends it again
        (a peer that drops repeated message ids then sees one)."""
        asked = turn.resume.request.id if turn.resume is not None else ""
        digest = hashlib.sha256(f"{self._nonce}\x00{handle.id}\x00{turn.serial}\x00{asked}".encode()).hexdigest()
        return f"tn-{digest[:32]}"


def _ignore(task_id: str, context_id: str) -> None:
    return None


def _mine() -> None:
    return None


def _check(handle: Handle, owner: str) -> str | None:
    """Whether the turn is still ``owner``'s: ``None``; interrupted by another process, or
    taken over by one."""
    with handle.lock:
        handle.sync(exact=True)
        if handle.owned_by(owner):
            return None
        return remote.INTERRUPTED if handle.record.state != RUNNING else remote.TAKEN_OVER
