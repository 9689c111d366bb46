"""Turns that any process of a tree may run: the runtime's side of a dispatcher
(``toolnexus.dispatch`` is the public face: ``Dispatcher`` and ``run_turn``).

With a dispatcher (``toolnexus.celery.install``), admitting a turn commits it as queued
(the handle is running, its turn stored with no owner) and then sends one message naming
it. Whichever runtime of the tree claims the stored turn first runs it: a worker that got
the message, or a parent whose ``task`` call waits on it, so blocked parents never exhaust
the workers. The message is only a doorbell: a duplicated or late one finds the turn
claimed or finished and does nothing.

The runtime's heartbeat sends again the messages of queued turns that nobody claimed in
time (a broker that was down, a message lost); a turn whose owner died is queued again
instead of being taken over in the process that noticed.

``Dispatching`` is the dispatched ``Execution`` (``execution.py``): where a runtime built
with ``dispatcher=`` runs its turns.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable, Protocol, runtime_checkable

from . import jobs as _jobs
from ..errors import ToolnexusError, UnknownHandle

if TYPE_CHECKING:
    from .execution import RunTurn
    from .handle import Handle, Turn
    from .tree import HandleTree

log = logging.getLogger("toolnexus")


@runtime_checkable
class Dispatcher(Protocol):
    """Carries "run this turn" to some process of the tree (``toolnexus.celery`` is one)."""

    #: A queued turn nobody claimed for this long gets its message again.
    resend_after_s: float

    def send(self, runtime_id: str, handle_id: str, serial: int, segment: int) -> None:
        """Send one message naming the turn; raise a ``ToolnexusError`` when it cannot."""
        ...


class QueuedRows(Protocol):
    """What queueing needs of a stored tree (``_stores.sql.owners.SqlOwners``)."""

    runtime_id: str

    def running_turns(self, parent_id: str | None = None) -> list[tuple[str, str | None, float | None]]: ...

    def now(self) -> float: ...


class Dispatching:
    """One runtime's queued turns: queueing, claiming, sending again (the dispatched
    ``Execution``)."""

    #: A delegation waits on the turn's own (worker) thread, so the children it woke run
    #: on other workers meanwhile; the turn's other tool calls run on the pool.
    here_sources: frozenset[str] = frozenset({"agent"})
    shared = True

    def __init__(
        self, dispatcher: Dispatcher, stored: QueuedRows, tree: HandleTree, owner: str, clock: Callable[[], float]
    ) -> None:
        self.dispatcher = dispatcher
        #: The runtime's owner id: a claimed turn is this runtime's to run and settle.
        self.owner = owner
        self._stored = stored
        self._tree = tree
        self._clock = clock

    # --- queueing and claiming (the handle's lock held, inside its store transaction) -------

    def begin(self, handle: Handle, turn: Turn, run: RunTurn) -> _jobs.Job:
        """Commit ``turn`` as queued; the returned job sends its message (after the commit)."""
        handle.queue_turn(turn, self._stored.now())
        handle_id, serial, segment = handle.id, turn.serial, turn.segment
        return _jobs.Job(lambda: self.ring(handle_id, serial, segment))

    def take_over(self, handle: Handle, run: RunTurn) -> _jobs.Job:
        """Queue again a turn whose owner died; the job sends it: a worker takes it over
        from its journal."""
        handle.requeue_turn(self._stored.now())
        record = handle.record
        assert record.running is not None
        handle_id, serial, segment = handle.id, record.turn_serial, record.running.segment
        return _jobs.Job(lambda: self.ring(handle_id, serial, segment))

    def submit(self, *jobs: _jobs.Job) -> None:
        """Send the messages of turns committed as queued."""
        for job in jobs:
            job.run()

    def offer(self, job: _jobs.Job) -> None:
        """A ``task`` child's message goes at once: another worker may take the child before
        the waiting call does (several calls of one turn then run side by side)."""
        job.run()

    def ring(self, handle_id: str, serial: int, segment: int) -> None:
        """Send the turn's message; a failure leaves the committed turn to the sweep."""
        try:
            self.dispatcher.send(self._stored.runtime_id, handle_id, serial, segment)
        except ToolnexusError as exc:
            log.warning(
                "turn %s #%d is queued but its message was not sent (sent again later): %s", handle_id, serial, exc
            )

    def claim(
        self, handle: Handle, run: RunTurn, serial: int | None = None, segment: int | None = None
    ) -> _jobs.Job | None:
        """Take the handle's queued turn for this runtime (lock held): a job that runs it,
        or ``None`` when no such turn waits (claimed elsewhere, finished, interrupted)."""
        if not handle.queued_turn(serial, segment):
            return None
        with handle.store.change(handle, dirty=False):
            if not handle.queued_turn(serial, segment):  # another process claimed it first
                return None
            turn = handle.claim_turn(self.owner, self._clock())
        job = turn.job = _jobs.Job(lambda: run(handle, turn))
        return job

    def queued_sibling(self, handle: Handle, run: RunTurn) -> _jobs.Job | None:
        """While waiting on ``handle``'s turn in another process, take a queued sibling
        (another child of the same parent) to run here: the waiting thread keeps working."""
        parent_id = handle.record.parent
        if parent_id is None:
            return None
        for sibling_id, owner, queued_at in self._stored.running_turns(parent_id):
            if sibling_id == handle.id or owner is not None or queued_at is None:
                continue
            sibling = self._tree.get(sibling_id)
            with sibling.lock:
                sibling.sync()
                job = self.claim(sibling, run)
            if job is not None:
                return job
        return None

    def run_sent(self, runtime_id: str, handle_id: str, serial: int, segment: int, run: RunTurn) -> bool:
        """Run the queued turn a message names, here and now (a worker's side); false,
        doing nothing, when it is not queued any more (claimed by another runtime,
        finished, interrupted) or the message was for another tree."""
        if runtime_id != self._stored.runtime_id:
            mine = self._stored.runtime_id
            log.warning("a turn message for tree %r reached the runtime of tree %r; ignored", runtime_id, mine)
            return False
        try:
            handle = self._tree.get(handle_id)
        except UnknownHandle:
            return False
        with handle.lock:
            handle.sync()
            job = self.claim(handle, run, serial, segment)
        if job is None:
            return False
        job.run()
        return True

    # --- the heartbeat's sweep --------------------------------------------------------------

    def on_beat(self) -> None:
        """Send again every queued turn that no runtime claimed within ``resend_after_s``."""
        now = self._stored.now()
        for handle_id, owner, queued_at in self._stored.running_turns():
            if owner is None and queued_at is not None and now - queued_at >= self.dispatcher.resend_after_s:
                self._resend(handle_id, now)

    def _resend(self, handle_id: str, now: float) -> None:
        handle = self._tree.get(handle_id)
        with handle.lock, handle.store.change(handle, dirty=False):
            record = handle.record
            queued_at = record.running.queued_at if record.running is not None else None
            if not handle.queued_turn() or queued_at is None or now - queued_at < self.dispatcher.resend_after_s:
                return  # claimed or sent again meanwhile
            handle.requeue_turn(now)
            assert record.running is not None
            serial, segment = record.turn_serial, record.running.segment
        self.ring(handle_id, serial, segment)
