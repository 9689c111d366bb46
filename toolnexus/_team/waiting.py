"""Waiting for a handle's next result: the one blocking loop behind ``wait``,
``run_agent`` and the ``task`` tool.

A waiting thread never just blocks on a turn nobody has started: it runs that turn
itself (caller-runs), so blocked parents cannot starve their children of workers. How it
learns of a change is the tree store's (``TreeStore.wait``): a turn of this process
notifies the handle's condition; a turn owned by another process is watched through the
state's change notifications.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Callable, Iterator

from . import jobs as _jobs
from ..data import AgentResult
from .execution import Execution
from .handle import CLOSED, Handle, Turn, closed_result
from .._tools.output import typed_result
from .tree import HandleTree
from .turns import TurnRunner

#: How often a waiter that helps with queued turns looks for a queued sibling to run.
_LOOK_AGAIN_S = 0.25


class Waiter:
    """Waits on the handles of one runtime's tree, running unstarted turns on the waiting thread."""

    def __init__(
        self,
        *,
        tree: HandleTree,
        turns: TurnRunner,
        execution: Execution,
        run_turn: Callable[[Handle, Turn], None],
        interrupt: Callable[[Handle], None],
        inline: bool,
    ) -> None:
        self._tree = tree
        self._turns = turns
        self._execution = execution
        self._run_turn = run_turn
        self._interrupt = interrupt
        self._inline = inline

    def next_result(
        self, handle: Handle, timeout: float | None, *, run_here: bool, stop_at_deadline: bool = False
    ) -> AgentResult:
        """Wait for the handle's next settled result, running its unstarted turn here when
        ``run_here``. Inline, a wake queued behind ``max_concurrent`` runs the unstarted
        sibling turn that holds the slot first. ``stop_at_deadline``: a turn this thread
        runs is interrupted (by a timer, at its next step) when time is up and the result
        is ``timeout``; otherwise such a turn runs to its end. A typed agent's value read
        back from a state is rebuilt as its definition's type (outside the handle's lock)."""
        result = self._next_result(handle, timeout, run_here=run_here, stop_at_deadline=stop_at_deadline)
        return typed_result(handle.definition, result)

    def _next_result(
        self, handle: Handle, timeout: float | None, *, run_here: bool, stop_at_deadline: bool
    ) -> AgentResult:
        deadline = None if timeout is None else time.monotonic() + timeout
        record = handle.record
        with handle.lock:
            _sync(handle, exact=True)  # whether it is settled now: a view that may lag would not do
            if record.result is not None and not handle.busy:
                return record.result
            since, lost = record.settled, handle.lost_count
        looked = -_LOOK_AGAIN_S  # when this thread last found no queued sibling to run
        helping = run_here and self._execution.shared  # this thread takes turns queued for any process
        while True:
            with handle.lock:
                _sync(handle)
                if record.settled > since and record.result is not None:
                    return record.result
                if handle.lost_count > lost and handle.lost is not None:
                    return handle.lost  # its outcome could not be committed
                if record.state == CLOSED:
                    return closed_result(record)
                job = handle.turn.job if run_here and runnable(handle) else None  # type: ignore[union-attr]
                if job is None and run_here:
                    job = self._execution.claim(handle, self._run_turn)  # queued, nobody started it: run it here
                behind = job is None and run_here and self._inline and record.queued
            owner = handle
            if behind:
                owner, job = self._slot_holder(handle)
            if job is None and helping and time.monotonic() - looked >= _LOOK_AGAIN_S:
                job = self._execution.queued_sibling(handle, self._run_turn)  # meanwhile, run a queued sibling
                looked = time.monotonic() if job is None else -_LOOK_AGAIN_S  # none queued: look again later
            if job is None:
                with handle.lock:
                    changed = record.settled > since or handle.lost_count > lost or record.state == CLOSED
                    if changed or (run_here and runnable(handle)):
                        continue  # changed while the siblings were looked at
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        turns = self._turns.turn_calls(handle.turn) if handle.turn is not None else 0
                        break
                    # A helper with queued turns looks around again soon: not "here".
                    self._tree.store.wait(handle, remaining, here=not helping and handle.turn is not None)
                continue
            if deadline is None or not stop_at_deadline:
                job.run()
                continue
            with self._interrupt_at(owner, deadline) as fired:
                job.run()
            with owner.lock:
                result = owner.record.result
            if fired.is_set() and result is not None and result.status == "interrupted":
                turns = result.turns if owner is handle else 0  # a sibling's turn is not this handle's
                break
        return AgentResult(text="", status="timeout", turns=turns, usage=record.spent, handle_id=record.id)

    def _slot_holder(self, handle: Handle) -> tuple[Handle, _jobs.Job | None]:
        """Inline: a sibling holding one of the parent's slots whose turn nobody started."""
        parent = self._tree.parent(handle)
        if parent is None:
            return handle, None
        with parent.lock:
            siblings = [self._tree.get(child_id) for child_id in parent.record.children]
        for sibling in siblings:
            with sibling.lock:
                if sibling is not handle and runnable(sibling):
                    return sibling, sibling.turn.job  # type: ignore[union-attr]
        return handle, None

    @contextlib.contextmanager
    def _interrupt_at(self, handle: Handle, deadline: float) -> Iterator[threading.Event]:
        """Interrupt ``handle`` at ``deadline`` from a short-lived timer thread, so that a
        turn running on the waiting thread itself still stops when time is up."""
        fired = threading.Event()

        def fire() -> None:
            fired.set()
            self._interrupt(handle)

        timer = threading.Timer(max(0.0, deadline - time.monotonic()), fire)
        timer.name, timer.daemon = f"toolnexus-deadline {handle.id}", True
        timer.start()
        try:
            yield fired
        finally:
            timer.cancel()
            timer.join()


def _sync(handle: Handle, *, exact: bool = False) -> None:
    """Re-read a handle whose turn does not run here (lock held): a turn of this process
    notifies every change itself (and sees another process's interrupt at its next step)."""
    if handle.turn is None:
        handle.sync(exact=exact)


def runnable(handle: Handle) -> bool:
    """Whether the handle's admitted turn waits for a thread to run it (lock held)."""
    turn = handle.turn
    return turn is not None and turn.job is not None and not turn.job.claimed
