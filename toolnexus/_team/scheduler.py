"""A turn's life: admitted (a slot, or a place in the parent's wake queue), handed over to
run, run, settled, its slot handed on; and an orphaned turn taken over.

Each handle runs its turns on a ``concurrent.futures`` worker, or on a thread that waits
for it: a turn is a claimable job (``_jobs.Job``), and a thread about to block on a turn
nobody has started runs it itself, so blocked parents never starve their children of
workers. Where an admitted turn runs is the ``Execution``'s (``execution.py``): the
scheduler only begins turns through it and submits their jobs.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Any, Callable, ContextManager, Iterator

from . import jobs as _jobs
from . import budget as budgets
from .._run import tracing
from ..data import AgentResult, Answer, RunResult
from ..errors import Cancelled, HandleClosed, ToolnexusError, UnknownRequest
from .execution import Execution
from .handle import RUNNING, SUSPENDED, Handle, Turn
from .inbox import ancestry, render_input
from .tree import HandleTree, shown_id, valid_id
from .turns import TurnRunner
from ..wire import to_wire

log = logging.getLogger("toolnexus")

#: ``(handle, serial)``: what delegation does at the end of a turn of ``handle``.
TurnHook = Callable[[Handle, int], None]
#: ``(handle, serial, failed)``: what delegation does before a finished turn settles.
SettleHook = Callable[[Handle, int, bool], None]


def _nothing_to_save() -> None:
    pass


#: The transcript context of a turn that settles with none to save (it failed, or suspended).
_NO_TRANSCRIPT: ContextManager[Callable[[], None]] = contextlib.nullcontext(_nothing_to_save)


@contextlib.contextmanager
def _locked(handles: list[Handle]) -> Iterator[None]:
    """The handles' locks, taken in the given order (ancestors first)."""
    taken: list[Handle] = []
    try:
        for each in handles:
            each.lock.acquire()
            taken.append(each)
        yield
    finally:
        for each in reversed(taken):
            each.lock.release()


class Scheduler:
    """Admits, runs and settles the turns of one runtime's tree.

    ``after_run`` is called once a turn's run is over (whatever the outcome), and
    ``before_settle`` before a finished (not pending) turn publishes its outcome: the
    delegation mechanics hang their work on a turn's task children there.
    """

    def __init__(
        self,
        *,
        tree: HandleTree,
        turns: TurnRunner,
        execution: Execution,
        owner: str,
        clock: Callable[[], float],
        after_run: TurnHook,
        before_settle: SettleHook,
    ) -> None:
        self._tree = tree
        self._root = tree.root
        self._turns = turns
        self.execution = execution
        self.owner = owner
        self._clock = clock
        self._after_run = after_run
        self._before_settle = before_settle
        self._lock = threading.Lock()  # guards: _abandoned
        #: Handles whose turn's outcome this runtime could not commit (the store failed).
        self._abandoned: set[str] = set()

    def _unit(self, *handles: Handle) -> ContextManager[Any]:
        return self._tree.store.change(*handles, dirty=False)

    # --- admission ------------------------------------------------------------------------------

    def wake(self, handle: Handle, prompt: str | None) -> _jobs.Job | None:
        """Admit a turn of ``handle`` without handing it over: for a caller about to wait
        on it, which then runs it on its own thread (no hand-off)."""
        parent = self._tree.parent(handle)
        if parent is None:
            raise ToolnexusError("the root handle runs no agent; spawn a child and wake that")
        trace = tracing.capture()  # the turn nests here, whichever thread runs it
        with parent.lock, handle.lock, self._unit(parent, handle):
            return self.admit(parent, handle, prompt, trace)

    def admit(
        self, parent: Handle, handle: Handle, prompt: str | None, trace: tracing.Carrier | None
    ) -> _jobs.Job | None:
        """Check, take a slot and flip to running as one step (both locks held, in one unit)."""
        if not handle.accepting:
            raise HandleClosed(f"closed: {handle.id} cannot be woken")
        if handle.busy or handle.record.state == SUSPENDED:
            return None
        if not budgets.slot_free(parent.record.budget, parent.take_slot, root=parent is self._root):
            handle.enqueue(prompt, trace)
            parent.queue_wake(handle.id)
            self._tree.event("wake_queued", handle.id, parent=parent.id)
            return None
        return self._start(handle, prompt, trace)

    def _slot_cap(self, parent: Handle) -> int | None:
        return budgets.max_concurrent(parent.record.budget)

    def _start(self, handle: Handle, prompt: str | None, trace: tracing.Carrier | None) -> _jobs.Job:
        text = render_input(prompt, handle.record.inbox, ancestry(handle.id))
        return self.begin(handle, handle.start(prompt, text, trace))

    def begin(self, handle: Handle, turn: Turn) -> _jobs.Job:
        """``turn`` becomes the handle's running turn (lock held, in its unit): a job that
        runs it, or with a dispatcher one that sends its message."""
        return self.execution.begin(handle, turn, self.run)

    # --- run and settle -------------------------------------------------------------------------

    def run(self, handle: Handle, turn: Turn) -> None:
        try:
            self._run(handle, turn)
        finally:
            turn.journal = None  # it refers back to the turn: let both go with the run

    def _run(self, handle: Handle, turn: Turn) -> None:
        started = time.perf_counter()
        error: str | None = None
        try:
            result, run = self._execute(handle, turn)
        except Cancelled:
            with handle.lock:  # interrupted (here, or from another process): it published
                handle.lose(turn)
            return
        except Exception as exc:  # a failed turn is a result, never an exception upward
            log.debug("turn of %s failed", handle.id, exc_info=True)
            result, run, error = self._turns.failed(handle, turn, exc), None, type(exc).__name__
        except BaseException as exc:  # SystemExit in a tool: settle so no waiter hangs, then go on up
            self._settle(handle, turn, self._turns.failed(handle, turn, exc), None)
            raise
        self._settle(handle, turn, result, run)
        self._turns.run_metric(handle, result, run, started, error)

    def abandoned(self, handle: Handle) -> bool:
        """Whether this runtime could not commit the outcome of ``handle``'s last turn."""
        with self._lock:
            return handle.id in self._abandoned

    def _execute(self, handle: Handle, turn: Turn) -> tuple[AgentResult, RunResult | None]:
        try:
            return self._turns.execute(handle, turn)
        finally:
            self._after_run(handle, turn.serial)

    def _settle(self, handle: Handle, turn: Turn, result: AgentResult, run: RunResult | None) -> None:
        """Publish a finished turn: save the transcript, flip the state, free the slot.

        A failed turn keeps its journal (``retry``). When the outcome cannot be committed
        (the store fails, or the host's conversation store raises), the turn ends ``error``
        with that cause; when even that cannot be committed, every waiter is told the
        error from memory and this runtime gives the turn up: no waiter ever hangs.
        """
        try:
            with handle.lock:
                if not handle.mark_settling(turn, self.owner):
                    return  # interrupted meanwhile; the interrupt published already
            if not self._commit(handle, turn, result, run):
                return
        except Exception as exc:
            log.warning("the outcome of the turn of %s could not be committed: %s", handle.id, exc)
            failed = self._turns.failed(handle, turn, exc)
            try:
                if not self._commit(handle, turn, failed, None):
                    return
            except Exception:
                with handle.lock:
                    handle.abandon(failed)
                with self._lock:
                    self._abandoned.add(handle.id)
                return
        self.release_slot(handle)

    def _commit(self, handle: Handle, turn: Turn, result: AgentResult, run: RunResult | None) -> bool:
        """Commit the outcome; false when the turn is no longer this runtime's to settle."""
        pending = result.status == "pending" and result.pending is not None
        failed = result.status == "error"
        if not pending:
            self._before_settle(handle, turn.serial, failed)
        saving = _NO_TRANSCRIPT
        if run is not None and not pending:
            saving = self._tree.store.transcripts.saving(handle.id, run.messages)
        # A final reply still to commit charges the chain: its locks too, root first.
        journal = turn.journal
        chain = journal.deferred_chain() if journal is not None else None
        held = list(reversed(chain)) if chain else [handle]
        with saving as save, _locked(held), self._unit(*held):
            if not handle.owned_by(self.owner):  # interrupted or taken over by another process meanwhile
                handle.lose(turn)
                return False
            if chain and journal is not None:
                journal.write_deferred(chain)
            save()  # the transcript lands with the outcome (see Transcripts.saving)
            if pending:
                suspended = handle.suspend(turn, result, self._turns.halted_call(run))
                self._tree.store.requests.park(suspended.pending, handle.id)  # type: ignore[arg-type]
            else:
                handle.finish(turn, result, retryable=failed)
        return True

    def on_beat(self) -> None:
        """What the owner's heartbeat does for the scheduler, after each beat."""
        self.release_abandoned()
        self.execution.on_beat()

    def release_abandoned(self) -> None:
        """Give up, in the store, the turns whose outcome could not be committed: each is
        then an orphan that any runtime of the tree recovers (this one included)."""
        with self._lock:
            ids = list(self._abandoned)
        for handle_id in ids:
            handle = self._tree.get(handle_id)
            with handle.lock, self._unit(handle):
                handle.give_up(self.owner)
            with self._lock:
                self._abandoned.discard(handle_id)

    def retry(self, handle: Handle) -> _jobs.Job:
        """Admit the failed last turn of ``handle`` again, replayed from its journal."""
        parent = self._tree.parent(handle)
        if parent is None:
            raise ToolnexusError("the root handle runs no agent; retry one of its children")
        trace = tracing.capture()
        with parent.lock, handle.lock, self._unit(parent, handle):
            handle.sync()
            if not handle.accepting:
                raise HandleClosed(f"closed: {handle.id} cannot be retried")
            if handle.busy or handle.record.failed is None:
                raise ToolnexusError(f"{handle.id}: its last turn did not fail, so there is nothing to retry")
            if parent is not self._root:
                parent.take_slot(None)
            turn = handle.retry_turn()
            turn.trace = trace
            return self.begin(handle, turn)

    def release_slot(self, handle: Handle) -> None:
        """Give the finished turn's slot to the next queued sibling, if any."""
        parent = self._tree.parent(handle)
        if parent is None or parent is self._root:
            return  # the root caps nothing: its children's turns take no slot
        jobs = []
        with parent.lock:
            record = parent.record
            with self._unit(parent):
                parent.free_slot()
            cap = self._slot_cap(parent)
            while record.wake_queue and (cap is None or record.running_children < cap):
                sibling = self._tree.get(record.wake_queue[0])
                with sibling.lock, self._unit(parent, sibling):
                    parent.drop_wake(sibling.id)
                    if not sibling.record.queued:
                        continue
                    parent.take_slot(cap)
                    wake = sibling.dequeue()
                    jobs.append(self._start(sibling, wake.prompt, wake.trace))
                    self._tree.event("wake_dequeued", sibling.id, parent=parent.id)
        self.execution.submit(*jobs)

    # --- resuming a suspended path ---------------------------------------------------------

    def resume(self, answer: Answer, top: Handle | None) -> list[_jobs.Job]:
        """Resume every handle suspended on ``answer.id`` from the asking one up to ``top``
        (an ancestor answering inline) or to the root's child (the host's durable resume),
        claim, flips and slots in one unit of work; the jobs that run the resumed turns."""
        if not isinstance(answer, Answer) or not valid_id(answer.id):
            raise UnknownRequest(f"no handle is waiting on request {shown_id(getattr(answer, 'id', answer))}")
        origin_id = self._tree.store.requests.parked(answer.id)
        if origin_id is None:
            raise UnknownRequest(f"no handle is waiting on request {answer.id!r}")
        chain = self._suspended_chain(self._tree.get(origin_id), answer.id, top)
        above = self._tree.parent(chain[-1])
        assert above is not None
        path = [above, *reversed(chain)]  # lock order: ancestor before descendant
        trace = tracing.capture()  # the resumed turns nest where the answer came in
        jobs = []
        with contextlib.ExitStack() as held:
            for each in path:
                held.enter_context(each.lock)
            held.enter_context(self._unit(*path))
            # The claim, every flip and every slot commit together or not at all.
            if self._tree.store.requests.unpark(answer.id, "answered", to_wire(answer)) is None:
                raise UnknownRequest(f"no handle is waiting on request {answer.id!r} (answered or cancelled already)")
            for position, handle in enumerate(chain):
                if not handle.suspended_on(answer.id):
                    continue
                turn = handle.resume(answer, origin=position == 0, via_idle=top is None, trace=trace)
                above_it = path[len(chain) - 1 - position]
                if above_it is not self._root:
                    above_it.take_slot(None)
                jobs.append(self.begin(handle, turn))
        return jobs

    def _suspended_chain(self, origin: Handle, request_id: str, top: Handle | None) -> list[Handle]:
        chain = [origin]
        current = origin
        while current is not top:
            parent = self._tree.parent(current)
            if parent is None or parent is self._root:
                break
            with parent.lock:
                parent.sync()
                waiting = parent.suspended_on(request_id)
            if not waiting:
                break
            chain.append(parent)
            current = parent
        return chain

    # --- taking over orphaned turns (see ownership.py) ------------------------------------------

    def take_over(self, handle_id: str, dead_owner: str | None, mode: str) -> bool:
        """Claim the turn of ``handle_id`` from its dead owner (compare-and-set on the owner)."""
        handle = self._tree.get(handle_id)
        parent = self._tree.parent(handle)
        assert parent is not None
        job = None
        with parent.lock, handle.lock, self._unit(parent, handle):
            record = handle.record
            owner = record.running.owner if record.running is not None else None
            if record.state != RUNNING or owner != dead_owner or handle.turn is not None:
                return False  # finished, interrupted or claimed by someone else meanwhile
            if mode == "interrupt":
                handle.abort()
            else:
                job = self.execution.take_over(handle, self.run)
            self._tree.event("recovered", handle.id, mode=mode, owner=dead_owner)
        if job is None:
            self.release_slot(handle)
        else:
            self.execution.submit(job)
        return True
