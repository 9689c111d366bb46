"""Handles: one agent instance each, and the one owner of its state machine.

The record (``record.HandleRecord``) is plain data that a tree store keeps; ``Handle``
adds the lock and the condition that guard it, and every method that changes the record
(the way ``concurrent.futures.Future`` owns its ``set_result`` and ``cancel``). Each such
method changes the state, records the transition, keeps the ledger and notifies waiters
in one step under ``lock``, inside the tree store's unit of work (``store.change``): in
memory that is nothing more; in a stored tree it is one committed transaction, joined by
an enclosing one so that a whole verb step commits at once. A handle's side as a parent
(its children's slots, their wake queue, its reattachment index) is ``parenting.py``.

Lock order, the one rule for the whole runtime:

1. ``Handle.task_lock`` (the reattachment index) before any ``Handle.lock``;
2. an ancestor's ``lock`` before a descendant's, never the other way (a parent takes
   its child's lock to admit it; a child never takes its parent's while holding its own);
3. leaf locks last: the handle tree's table lock and a tree store's own locks are taken
   under handle locks and never call back into the runtime.

No lock is held across user code, a model call or a tool.

Who publishes a turn's result: whoever detaches the turn from its handle (sets
``handle.turn`` back to ``None``) under ``lock``. That is the turn itself once it has
marked itself ``settling``, or ``interrupt`` before that; after ``mark_settling`` an
interrupt waits for the turn's own outcome instead of publishing one.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, ContextManager, Protocol

import attrs

from ..data import AgentResult, Answer, HandleView, Usage
from .record import CLOSED, IDLE, NOTHING_TO_INTERRUPT, RUNNING, SUSPENDED, FailedTurn, HandleRecord, InboxItem
from .record import Interruption, QueuedWake, Resume, RunningTurn, Suspension, Turn, closed_result
from .record import interrupted, stamp_path, view_of
from .parenting import Parenting
from ..wire import to_wire
from .._stores.documents import Announces, TurnDocuments

__all__ = [
    "CLOSED", "IDLE", "RUNNING", "SUSPENDED", "Handle", "HandleRecord", "IllegalTransition", "Interruption", "Turn",
    "closed_result", "interrupted",
]

ARROW = "\u2192"

_ALLOWED = frozenset(
    {(IDLE, RUNNING), (RUNNING, IDLE), (RUNNING, SUSPENDED), (SUSPENDED, RUNNING), (SUSPENDED, IDLE), (IDLE, CLOSED)}
)


class IllegalTransition(RuntimeError):
    """A state change outside the handle state machine: a bug in the runtime, never user input."""


class RecordStore(Protocol):
    """What a handle needs from its tree store (``_stores.parts.TreeStore`` is the whole seam)."""

    @property
    def journal(self) -> TurnDocuments: ...

    @property
    def events(self) -> Announces: ...

    def change(self, *handles: Handle, dirty: bool = True) -> ContextManager[Any]: ...

    def sync(self, handle: Handle, *, exact: bool = False) -> None: ...


class Handle(Parenting):
    """A live agent handle. Hosts use ``.id``; every verb also takes the id string."""

    def __init__(self, record: HandleRecord, definition: Any, store: RecordStore) -> None:
        self.record = record
        self.definition = definition
        #: The tree store this handle's changes commit to.
        self.store = store
        # guards: record (state, inbox, ledger, result...), turn. See the lock order above.
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        # guards: record.task_keys (the reattachment index); taken before self.lock.
        self.task_lock = threading.Lock()
        self.turn: Turn | None = None
        #: The outcome of a turn that could not be committed, and how many there were: a
        #: waiter that saw ``lost_count == n`` knows a newer one has come.
        self.lost: AgentResult | None = None
        self.lost_count = 0
        #: Counted among the closed handles that may leave memory (see ``HandleTree.retire``).
        self.retired = False
        #: The store's count of other connections' commits when the record was last read
        #: (a stored tree may then skip re-reading it).
        self.verified: int | None = None

    @property
    def id(self) -> str:
        return self.record.id

    def __repr__(self) -> str:
        return f"Handle({self.record.id!r})"

    def __str__(self) -> str:
        return self.record.id

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Handle):
            return other.record.id == self.record.id
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.record.id)

    @property
    def busy(self) -> bool:
        return self.record.state == RUNNING or self.record.wake is not None

    @property
    def accepting(self) -> bool:
        """Neither closed nor closing: posts, wakes and new children are welcome."""
        return not self.record.closing and self.record.state != CLOSED

    def view(self) -> HandleView:
        return view_of(self.record)

    # --- the state machine: every method below is called with self.lock held -----------

    def sync(self, *, exact: bool = False) -> None:
        """Re-read the record when another process changed it (lock held). ``exact``: for
        a check that must see every commit made before it (a budget, an interrupt), not
        one that may lag by a notification's way (a wait, a view)."""
        self.store.sync(self, exact=exact)

    def move(self, new: str) -> None:
        """One legal transition, recorded and announced."""
        with self.store.change(self):
            self._move(new)

    def publish(self, result: AgentResult) -> None:
        """Hand ``result`` to every waiter: ``settled`` counts results, so a waiter that
        saw ``settled == n`` knows a result newer than the one it had has landed."""
        with self.store.change(self):
            self._publish(result)

    # The two steps every change ends with, for methods already inside their unit of work.

    def _move(self, new: str) -> None:
        old = self.record.state
        if (old, new) not in _ALLOWED:
            raise IllegalTransition(f"{self.record.id}: {old}{ARROW}{new}")
        self.record.transitions.append(f"{old}{ARROW}{new}")
        self.record.state = new
        self.store.events.emit(self.record.id, "state", {"from": old, "to": new})
        self.changed.notify_all()

    def _publish(self, result: AgentResult) -> None:
        self.record.result = result
        self.record.settled += 1
        data = {"status": result.status, "text": result.text, "total_tokens": result.total_tokens}
        self.store.events.emit(self.record.id, "result", data, result)
        self.changed.notify_all()

    def accept_post(self, item: InboxItem) -> None:
        with self.store.change(self):
            self.record.inbox.append(item)

    def enqueue(self, prompt: str | None, trace: dict[str, str] | None = None) -> None:
        """Wait for a slot under the parent's ``max_concurrent``, prompt (and the trace
        context of the wake) kept for later."""
        with self.store.change(self):
            self.record.wake = QueuedWake(prompt=prompt, trace=trace)
            self.changed.notify_all()

    def dequeue(self) -> QueuedWake:
        """Leave the wake queue: the wake that waited."""
        with self.store.change(self):
            wake, self.record.wake = self.record.wake, None
            assert wake is not None
            return wake

    def start(self, prompt: str | None, input: str, trace: dict[str, str] | None = None) -> Turn:
        """A fresh turn on ``input`` that takes the whole inbox (returned on interrupt);
        a failed turn it supersedes will not be tried again."""
        with self.store.change(self):
            record = self.record
            self._forget_failed()
            record.taken, record.inbox = record.inbox, []
            record.turn_serial += 1
            return Turn(serial=record.turn_serial, input=input, before=record.spent, trace=trace)

    def begin(self, turn: Turn, now: float, owner: str) -> None:
        """``turn`` (with its job) becomes the running turn, owned by ``owner``."""
        with self.store.change(self):
            turn.started = now
            self.turn = turn
            self._own(turn, owner)
            self._move(RUNNING)

    def take_over(self, turn: Turn, now: float, owner: str) -> None:
        """Run the stored turn of a handle whose owner died: it stays ``running``."""
        with self.store.change(self):
            turn.started = now
            self.turn = turn
            self._own(turn, owner)
            self.changed.notify_all()

    def stored_turn(self) -> Turn:
        """The running turn as the tree store holds it, for a runtime that takes it over."""
        record = self.record
        running = record.running
        assert running is not None
        input, resume = self.store.journal.turn_documents(record.id, record.turn_serial)
        serial, before, segment = record.turn_serial, running.before, running.segment
        return Turn(serial=serial, input=input, before=before, resume=resume, segment=segment, kept=True)

    def _own(self, turn: Turn, owner: str | None, *, queued_at: float | None = None) -> None:
        """``turn`` is the record's running turn; its input is kept beside the record once
        (a turn read back from the store, or replayed, is ``kept`` already)."""
        self.record.running = RunningTurn(
            segment=turn.segment,
            owner=owner,
            before=turn.before,
            queued_at=queued_at,
            resumed=turn.resume is not None,
        )
        if not turn.kept:
            self.store.journal.keep_turn(self.record.id, turn)

    def _disown(self) -> None:
        self.turn = None
        self.record.running = None

    # --- turns a dispatcher runs: queued in the store, claimed by whichever runtime first ---

    def queue_turn(self, turn: Turn, now: float) -> None:
        """``turn`` becomes the running turn as the store holds it, owned by nobody yet:
        the handle is busy, and any runtime of the tree may claim it."""
        with self.store.change(self):
            self._own(turn, None, queued_at=now)
            self._move(RUNNING)

    def queued_turn(self, serial: int | None = None, segment: int | None = None) -> bool:
        """Whether a turn (``serial``/``segment`` when given) waits for a runtime to claim it."""
        record = self.record
        running = record.running
        return (
            record.state == RUNNING
            and running is not None
            and running.queued_at is not None
            and running.owner is None
            and serial in (None, record.turn_serial)
            and segment in (None, running.segment)
        )

    def claim_turn(self, owner: str, now: float) -> Turn:
        """The queued turn becomes ``owner``'s to run (``queued_turn()`` checked, lock held)."""
        with self.store.change(self):
            turn = self.stored_turn()
            turn.started = now
            assert self.record.running is not None
            self.record.running = attrs.evolve(self.record.running, owner=owner, queued_at=None)
            self.turn = turn
            self.changed.notify_all()
            return turn

    def requeue_turn(self, now: float) -> None:
        """Give a turn whose owner died (or a message that was lost) back to the queue."""
        with self.store.change(self):
            assert self.record.running is not None
            self.record.running = attrs.evolve(self.record.running, owner=None, queued_at=now)
            self.turn = None

    def owned_by(self, owner: str) -> bool:
        """Whether the record's running turn is ``owner``'s (another process may have
        interrupted it or taken it over)."""
        running = self.record.running
        return self.record.state == RUNNING and running is not None and running.owner == owner

    def give_up(self, owner: str) -> None:
        """Leave the running turn ``owner`` could not settle to whoever recovers it: with no
        owner (and not queued), it is an orphan for every runtime of the tree."""
        if self.owned_by(owner) and self.turn is None:
            with self.store.change(self):
                assert self.record.running is not None
                self.record.running = attrs.evolve(self.record.running, owner=None)
                self.changed.notify_all()

    def mark_settling(self, turn: Turn, owner: str) -> bool:
        """Claim the right to publish ``turn``'s outcome; false when an interrupt took it.
        (Another process's interrupt or takeover is seen inside the unit that commits the
        outcome, which reads the row and checks the owner again.)"""
        if self.turn is not turn:
            return False
        if not self.owned_by(owner):
            self.turn = None  # another process interrupted it, or took it over
            return False
        turn.settling = True
        return True

    def lose(self, turn: Turn) -> None:
        """``turn`` stopped because another process interrupted or took it over: forget it
        here and let waiters read what the store says (nothing is written)."""
        if self.turn is turn:
            self.sync()
            self.turn = None
            self.changed.notify_all()

    def suspend(self, turn: Turn, result: AgentResult, halted: tuple[int, str]) -> AgentResult:
        """``running→suspended`` on the turn's pending request (path stamped), which the
        call ``halted`` (model step, call id) made; its result."""
        with self.store.change(self):
            assert result.pending is not None
            request = stamp_path(result.pending, self.record.id)
            result = attrs.evolve(result, pending=request, text=request.prompt)
            self._disown()
            self.record.suspension = Suspension(
                request=request,
                step=halted[0],
                call=halted[1],
                segment=turn.segment,
                before=turn.before,
                turns=result.turns,
                trace=turn.suspended_trace,
            )
            self.store.events.emit(self.record.id, "pending", {"request": to_wire(request)})
            self._move(SUSPENDED)
            self._publish(result)
            return result

    def finish(self, turn: Turn, result: AgentResult, *, retryable: bool = False) -> None:
        """``running→idle`` with the turn's outcome; the inbox items it took are consumed.
        A ``retryable`` failure keeps the turn's journal for ``retry``; otherwise nothing
        will replay the turn."""
        with self.store.change(self):
            self._disown()
            self.record.suspension = None
            self.record.taken = []
            if retryable:
                self.record.failed = FailedTurn(serial=turn.serial, segment=turn.segment, before=turn.before)
            self.store.journal.keep_outcome(self.record.id, turn.serial, result)  # kept until the run is pruned
            self._move(IDLE)
            self._publish(result)

    def abandon(self, result: AgentResult) -> None:
        """The turn's outcome could not be committed (the store failed): tell every waiter
        ``result`` and let the turn go here. The record is left to say what the store says
        (running, under this runtime, which gives the turn up once the store works again:
        ``Scheduler.release_abandoned``), so the result travels beside it (``lost``)."""
        self.turn = None
        self.record.version = -1  # memory may have run ahead of the store: read it again
        self.lost = result
        self.lost_count += 1
        self.changed.notify_all()

    def retry_turn(self) -> Turn:
        """The failed turn again, to be replayed from its journal (``failed`` checked)."""
        failed = self.record.failed
        assert failed is not None
        with self.store.change(self):
            self.record.failed = None
            inbox, back = self.record.inbox, min(failed.returned, len(self.record.inbox))  # given back: taken again
            self.record.taken, self.record.inbox = self.record.taken + inbox[:back], inbox[back:]
            input, resume = self.store.journal.turn_documents(self.record.id, failed.serial)
            serial, segment, before = failed.serial, failed.segment + 1, failed.before
            return Turn(serial=serial, input=input, resume=resume, segment=segment, before=before, kept=True)

    def seed_turn(self, serial: int) -> None:
        """A fork's turn ``serial``, its journal seeded: continued as a failed turn is
        (``retry_turn``), from what the journal serves."""
        with self.store.change(self):
            self.record.turn_serial = serial
            self.record.failed = FailedTurn(serial=serial, segment=0, before=self.record.spent)

    def _forget_failed(self) -> None:
        self.record.failed = None  # its journal stays, with its outcome, for a replay

    def abort(self, turns: int = 0, *, retryable: bool = False) -> Turn | None:
        """Interrupt the running turn (which made ``turns`` model calls): ``running→idle``,
        its inbox items back in front. A ``retryable`` one keeps its journal for ``retry``."""
        with self.store.change(self):
            turn = self.turn
            record = self.record
            if retryable and (running := record.running) is not None:
                record.failed = FailedTurn(record.turn_serial, running.segment, running.before, len(record.taken))
            self._disown()
            record.inbox, record.taken = record.taken + record.inbox, []
            self._move(IDLE)
            result = interrupted(record, turns)
            self.store.journal.keep_outcome(record.id, record.turn_serial, result)
            self._publish(result)
            return turn

    def interrupt(
        self, parent: Handle | None, turn_calls: Callable[[Turn], int], *, retryable: bool = False
    ) -> Interruption:
        """Decide what interrupting this handle means now (this lock and ``parent``'s held,
        in one unit of work): abort the running turn, drop a queued wake, or name the
        pending request to cancel. ``turn_calls`` counts a running turn's model calls.
        ``retryable`` aborts a running turn only, keeping its journal for ``retry``."""
        record = self.record
        if record.state == RUNNING:
            if self.turn is not None and self.turn.settling:
                return Interruption(settling=self.turn)  # finished already: its outcome stands
            serial = record.turn_serial
            # None when the turn is queued, or runs in another process:
            turn = self.abort(turn_calls(self.turn) if self.turn is not None else 0, retryable=retryable)
            return Interruption(cancel=turn, ended=serial)
        if record.wake is not None and parent is not None and not retryable:  # retryable: a queued wake stays
            parent.drop_wake(record.id)
            with self.store.change(self):
                record.wake = None
                self._publish(interrupted(record, 0))
            return NOTHING_TO_INTERRUPT
        if record.state == SUSPENDED and record.pending is not None and not retryable:  # and a pending request
            return Interruption(request=record.pending.id)
        return NOTHING_TO_INTERRUPT

    def cancel(self, request_id: str) -> bool:
        """``suspended→idle`` when suspended on ``request_id``: the request is dead, the
        inbox items the turn took go back, waiters get ``interrupted``."""
        with self.store.change(self):
            record = self.record
            if not self.suspended_on(request_id):
                return False
            turns = record.suspension.turns if record.suspension is not None else 0
            record.suspension = None
            record.inbox, record.taken = record.taken + record.inbox, []
            self._move(IDLE)
            result = interrupted(record, turns)
            self.store.journal.keep_outcome(record.id, record.turn_serial, result)
            self._publish(result)
            return True

    def suspended_on(self, request_id: str) -> bool:
        pending = self.record.pending
        return self.record.state == SUSPENDED and pending is not None and pending.id == request_id

    def resume(self, answer: Answer, *, origin: bool, via_idle: bool, trace: dict[str, str] | None = None) -> Turn:
        """The turn that continues a suspension answered by ``answer``: replayed from its
        journal, so no model step it took is asked again and no finished call runs again.

        The ``origin`` (the handle whose own tool asked) gives the halted call the answer;
        a relaying parent dispatches its halted ``task`` call again, which reattaches to
        the child. A host's resume (``via_idle``: possibly in another process) goes through
        ``idle``; an inline Answer (an ancestor's ``wait_for``) goes straight on.
        The returned turn still needs its job and ``begin``.
        """
        with self.store.change(self):
            record = self.record
            suspension = record.suspension
            assert suspension is not None and record.state == SUSPENDED
            input, _ = self.store.journal.turn_documents(record.id, record.turn_serial)
            turn = Turn(
                serial=record.turn_serial,
                input=input,
                before=suspension.before,
                segment=suspension.segment + 1,
                trace=trace,
                suspended_trace=suspension.trace,
                kept=True,  # its input and journal are in the store since the turn began
            )
            if origin:
                turn.resume = Resume(suspension.call, suspension.step, suspension.request, answer)
                self.store.journal.keep_resume(record.id, record.turn_serial, turn.resume)
            record.suspension = None
            if via_idle:
                self._move(IDLE)
            return turn

    def begin_closing(self) -> list[str] | None:
        """Refuse posts, wakes and children from now on; the children to close first, or
        ``None`` when the handle is closed already."""
        with self.store.change(self):
            if self.record.state == CLOSED:
                return None
            self.record.closing = True
            return list(self.record.children)

    def close(self) -> None:
        """``idle→closed``: final; the record stays readable."""
        with self.store.change(self):
            self._forget_failed()
            self._move(CLOSED)

    # --- the ledger -------------------------------------------------------------------------

    def charge_model_call(self) -> None:
        with self.store.change(self):
            self.record.turns += 1

    def charge_usage(self, usage: Usage) -> None:
        """One model call's usage, own or a descendant's (rolled up): its tokens and, when
        its model has a price, its cost."""
        with self.store.change(self):
            self.record.charge(usage)

    def charge_tool_calls(self, count: int, *, own: bool) -> None:
        with self.store.change(self):
            if own:
                self.record.tool_calls += count
            self.record.pool_tool_calls += count
