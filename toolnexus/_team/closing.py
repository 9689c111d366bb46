"""Closing a subtree: leaf-first, a running turn given until the deadline to finish (none
with ``force``), then interrupted; the final state stays readable, and the oldest closed
handles leave memory."""

from __future__ import annotations

from typing import Callable

from .agentdef import call_lifecycle
from .handle import CLOSED, IDLE, RUNNING, Handle
from .tree import HandleTree
from .waiting import runnable

#: How long closing waits at a time for a settling turn's outcome to land before looking again.
_SETTLE_POLL_S = 0.25


class Closer:
    """Closes the handles of one runtime's tree (``interrupt`` is the runtime's verb)."""

    def __init__(
        self, tree: HandleTree, interrupt: Callable[[Handle], None], clock: Callable[[], float], inline: bool
    ) -> None:
        self._tree = tree
        self._interrupt = interrupt
        self._clock = clock
        self._inline = inline

    def close_tree(self, handle: Handle, reason: str, deadline: float, force: bool) -> None:
        with handle.lock, self._tree.store.change(handle, dirty=False):
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
                self._interrupt(handle)
            with handle.lock, self._tree.store.change(handle, dirty=False):
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
