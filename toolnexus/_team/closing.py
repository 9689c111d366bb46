"""Stopping handles: ``interrupt`` (a running turn aborts, a queued wake is dropped, a
pending request is cancelled) and ``close`` (a subtree, leaf-first, a running turn given
until the deadline to finish, none with ``force``, then interrupted; the final state stays
readable, and the oldest closed handles leave memory)."""

from __future__ import annotations

import contextlib
from typing import Any, Callable, ContextManager

from ..data import Request
from .agentdef import call_lifecycle
from .handle import CLOSED, IDLE, RUNNING, SUSPENDED, Handle, Turn
from .tree import HandleTree
from .waiting import runnable

#: How long closing waits at a time for a settling turn's outcome to land before looking again.
_SETTLE_POLL_S = 0.25


class Closer:
    """Interrupts and closes the handles of one runtime's tree.

    ``turn_calls`` counts a running turn's model calls, ``release_slot`` hands a stopped
    turn's slot on, ``task_children`` names the ``task`` children a turn made (they
    stop with it), and ``request_cancelled`` is told each handle whose pending request was
    cancelled, with that request, once the handle is idle again (a remote teammate's task
    that asked is canceled there).
    """

    def __init__(
        self,
        tree: HandleTree,
        clock: Callable[[], float],
        *,
        inline: bool,
        settle_wait_s: float,
        turn_calls: Callable[[Turn], int],
        release_slot: Callable[[Handle], None],
        task_children: Callable[[Handle, int], list[Handle]],
        request_cancelled: Callable[[Handle, Request], None],
    ) -> None:
        self._tree = tree
        self._clock = clock
        self._inline = inline
        self._settle_wait_s = settle_wait_s
        self._turn_calls = turn_calls
        self._release_slot = release_slot
        self._task_children = task_children
        self._request_cancelled = request_cancelled

    # --- interrupt ----------------------------------------------------------------------------

    def interrupt(self, handle: Handle, *, retryable: bool = False) -> None:
        """``Runtime.interrupt``: the handle decides what interrupting means now; this does
        the rest (waits for a turn that was settling, cancels the running call, hands the
        slot on, stops the turn's ``task`` children, cancels the pending request)."""
        parent = self._tree.parent(handle)
        locked = (parent, handle) if parent is not None else (handle,)
        with parent.lock if parent is not None else _NOTHING, handle.lock, self._unit(*locked):
            outcome = handle.interrupt(parent, self._turn_calls, retryable=retryable)
        cancelled_request = outcome.request
        if outcome.settling is not None:
            settling, record = outcome.settling, handle.record
            with handle.lock:
                handle.changed.wait_for(lambda: handle.turn is not settling, timeout=self._settle_wait_s)
                if record.state == SUSPENDED and record.pending is not None and not retryable:
                    cancelled_request = record.pending.id  # it settled pending: cancelled, as any suspended handle
        if outcome.cancel is not None:
            outcome.cancel.scope.cancel()
        if outcome.ended is not None:
            self._release_slot(handle)  # the turn's runner, wherever it is, publishes nothing now
            for child in self._task_children(handle, outcome.ended):
                self.interrupt(child, retryable=retryable)
        if cancelled_request is not None:
            self._cancel_request(cancelled_request)

    def _cancel_request(self, request_id: str) -> None:
        """Every handle suspended on ``request_id`` goes back to idle; the id is dead. Who
        asked hears of it outside the locks (it may call a peer)."""
        self._tree.store.requests.unpark(request_id, "cancelled")
        for handle in self._tree.suspended_on(request_id):
            with handle.lock, self._unit(handle):
                asked = handle.record.pending
                handle.cancel(request_id)
            if asked is not None and asked.id == request_id:
                self._request_cancelled(handle, asked)

    def _unit(self, *handles: Handle) -> ContextManager[Any]:
        return self._tree.store.change(*handles, dirty=False)

    # --- close ----------------------------------------------------------------------------------

    def close_tree(self, handle: Handle, reason: str, deadline: float, force: bool) -> None:
        with handle.lock, self._unit(handle):
            children_ids = handle.begin_closing()
            leaf = children_ids == [] and handle.record.state == IDLE and not handle.record.queued
            if leaf:  # an idle leaf closes in the same step
                self._closed(handle, reason)
        if children_ids is None:
            return
        children = [self._tree.get(child_id) for child_id in children_ids]
        if not leaf and not self._close_busy(handle, children, reason, deadline, force):
            return  # another closer got there first
        if handle.definition is not None:
            call_lifecycle(handle.definition.on_close, handle, reason)
        self._retire(handle)

    def _closed(self, handle: Handle, reason: str) -> None:
        handle.close()
        self._tree.event("close", handle.id, reason=reason)

    def _close_busy(self, handle: Handle, children: list[Handle], reason: str, deadline: float, force: bool) -> bool:
        """Close the children first, give a running turn until ``deadline``, then interrupt;
        whether this call closed ``handle``."""
        for child in children:
            self.close_tree(child, "parent closed", deadline, force)
        if not force:
            with handle.lock:
                left = max(0.0, deadline - self._clock())
                handle.changed.wait_for(lambda: not handle.busy or self._unstarted(handle), timeout=left)
        while True:
            with handle.lock:  # an idle handle has nothing to interrupt
                handle.sync()
                idle = handle.record.state == IDLE and not handle.record.queued
            if not idle:
                self.interrupt(handle)
            with handle.lock, self._unit(handle):
                state = handle.record.state
                if state == CLOSED:
                    return False
                if state == IDLE:
                    self._closed(handle, reason)
                    return True
            if state == RUNNING:
                # A turn that was already settling (saving its transcript) outlasted the
                # interrupt's wait: let its outcome land, then go round again.
                with handle.lock:
                    handle.changed.wait_for(lambda: handle.record.state != RUNNING, timeout=_SETTLE_POLL_S)
            # SUSPENDED: the settling turn ended pending; the next interrupt cancels it.

    def _retire(self, handle: Handle) -> None:
        """Let the oldest closed handles leave memory (a state still has them). A task
        child closed while its parent's turn runs waits for that turn: a repeated call may
        still reattach to it."""
        parent = self._tree.parent(handle)
        if parent is None:
            return
        with parent.lock:
            busy = parent is not self._tree.root and parent.record.state == RUNNING
        if busy:
            return
        self._tree.detach(self._tree.retire(handle))

    def _unstarted(self, handle: Handle) -> bool:
        """Inline, a turn no thread has picked up has nothing to finish (lock held)."""
        return self._inline and (runnable(handle) or handle.record.queued)


#: A context that does nothing: no parent lock at the root (reentrant, so one serves every use).
_NOTHING: ContextManager[Any] = contextlib.nullcontext()
