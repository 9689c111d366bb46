"""Turns that any process of a tree may run: the runtime's side of a dispatcher.

With a dispatcher (``toolnexus.celery.install``), admitting a turn commits it as queued
(the handle is running, its turn stored with no owner) and then sends one message naming
it. Whichever runtime of the tree claims the stored turn first runs it: a worker that got
the message, or a parent whose ``task`` call waits on it, so blocked parents never exhaust
the workers. The message is only a doorbell: a duplicated or late one finds the turn
claimed or finished and does nothing.

A sweep thread keeps this runtime's heartbeat in the state, sends again the messages no
runtime acted on (a broker that was down, a message lost), and queues again the turns
whose owner died (no heartbeat for the lease, or a process of this host that is gone).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from typing import TYPE_CHECKING, Callable, Protocol, runtime_checkable

from . import _jobs
from .errors import ToolnexusError

if TYPE_CHECKING:
    from .handle import Handle, Turn
    from .state import DurableTree
    from .tree import HandleTree

log = logging.getLogger("toolnexus")


@runtime_checkable
class Dispatcher(Protocol):
    """Carries "run this turn" to some process of the tree (``toolnexus.celery`` is one)."""

    #: A queued turn nobody claimed for this long gets its message again.
    resend_after_s: float

    def send(self, runtime_id: str, handle_id: str, serial: int, segment: int) -> None:
        """Send one message naming the turn; raise a ``ToolnexusError`` when it cannot."""


class Dispatching:
    """One runtime's queued turns: queueing, claiming, and the sweep that keeps them moving."""

    def __init__(self, dispatcher: Dispatcher, durable: DurableTree, tree: HandleTree, lease_s: float) -> None:
        self.dispatcher = dispatcher
        self.owner = uuid.uuid4().hex
        self._durable = durable
        self._tree = tree
        self._lease_s = lease_s
        self._host = socket.gethostname()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- queueing and claiming (the handle's lock held, inside its store transaction) -------

    def queue(self, handle: Handle, turn: Turn) -> _jobs.Job:
        """Commit ``turn`` as queued; the returned job sends its message (after the commit)."""
        handle.queue_turn(turn, time.time())
        handle_id, serial, segment = handle.id, turn.serial, turn.segment
        return _jobs.Job(lambda: self.ring(handle_id, serial, segment))

    def ring(self, handle_id: str, serial: int, segment: int) -> None:
        """Send the turn's message; a failure leaves the committed turn to the sweep."""
        try:
            self.dispatcher.send(self._durable.runtime_id, handle_id, serial, segment)
        except ToolnexusError as exc:
            log.warning("turn %s #%d is queued but its message was not sent (sent again later): %s", handle_id, serial, exc)

    def claim(
        self, handle: Handle, now: float, run: Callable[[Handle, Turn], None], serial: int | None = None, segment: int | None = None
    ) -> _jobs.Job | None:
        """Take the handle's queued turn for this runtime (lock held): a job that runs it,
        or ``None`` when no such turn waits (claimed elsewhere, finished, interrupted)."""
        if not handle.queued_turn(serial, segment):
            return None
        with self._durable.change(handle):
            if not handle.queued_turn(serial, segment):  # another process claimed it first
                return None
            turn = handle.claim_turn(self.owner, now)
        job = turn.job = _jobs.Job(lambda: run(handle, turn))
        return job

    def sibling_job(self, handle: Handle, now: float, run: Callable[[Handle, Turn], None]) -> _jobs.Job | None:
        """While waiting on ``handle``'s turn in another process, take a queued sibling
        (another child of the same parent) to run here: the waiting thread keeps working."""
        parent_id = handle.record.parent
        if parent_id is None:
            return None
        for sibling_id, owner, queued_at in self._durable.running_turns(parent_id):
            if sibling_id == handle.id or owner is not None or queued_at is None:
                continue
            sibling = self._tree.get(sibling_id)
            with sibling.lock:
                sibling.sync()
                job = self.claim(sibling, now, run)
            if job is not None:
                return job
        return None

    # --- the sweep ------------------------------------------------------------------------

    def start(self) -> None:
        self._durable.register_owner(self.owner, self._host, os.getpid())
        interval = max(0.05, min(self._lease_s / 3, self.dispatcher.resend_after_s / 2))
        self._thread = threading.Thread(target=self._loop, args=(interval,), name="toolnexus-sweep", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """End the sweep and withdraw this owner: turns it still runs become orphaned."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        try:
            self._durable.drop_owner(self.owner)
        except ToolnexusError as exc:
            log.warning("could not withdraw runtime owner %s from the state: %s", self.owner, exc)

    def _loop(self, interval: float) -> None:
        while not self._stop.wait(interval):  # a periodic heartbeat, not a wait for state
            try:
                self.sweep()
            except Exception:
                log.warning("the turn sweep failed; trying again in %.1f s", interval, exc_info=True)

    def sweep(self) -> None:
        """Heartbeat; send again stale queued turns; queue again the turns of dead owners."""
        self._durable.heartbeat(self.owner)
        owners = self._durable.owners()
        now = time.time()
        for handle_id, owner, queued_at in self._durable.running_turns():
            if owner is None and queued_at is not None and now - queued_at >= self.dispatcher.resend_after_s:
                self._requeue(handle_id, None, now)
            elif owner is not None and owner != self.owner and self._dead(owners.get(owner), now):
                self._requeue(handle_id, owner, now)

    def _dead(self, known: tuple[str, int, float] | None, now: float) -> bool:
        if known is None:
            return True
        host, pid, heartbeat_at = known
        return now - heartbeat_at > self._lease_s or (host == self._host and not _alive(pid))

    def _requeue(self, handle_id: str, owner: str | None, now: float) -> None:
        handle = self._tree.get(handle_id)
        with handle.lock, self._durable.change(handle):
            record = handle.record
            if record.state != "running" or record.turn_owner != owner:
                return  # moved on since the scan
            if owner is None and (record.turn_queued_at is None or now - record.turn_queued_at < self.dispatcher.resend_after_s):
                return
            handle.requeue_turn(now)
            serial, segment = record.turn_serial, record.turn_segment
        if owner is not None:
            log.warning("turn %s #%d: its runtime %s stopped; queued again", handle_id, serial, owner)
        self.ring(handle_id, serial, segment)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
