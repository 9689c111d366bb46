"""Turns that any process of a tree may run: how a task engine plugs in.

With a dispatcher (``toolnexus.celery.install`` makes one for Celery), admitting a turn
commits it as queued in the state (the handle is running, its turn stored with no owner)
and then sends one message naming it. Whichever runtime of the tree claims the stored
turn first runs it: a worker that got the message, or a parent whose ``task`` call waits
on it, so blocked parents never exhaust the workers. The message is only a doorbell: a
duplicated or late one finds the turn claimed or finished and does nothing. The runtime's
heartbeat sends again the messages of queued turns that nobody claimed in time (a broker
that was down, a message lost); a turn whose owner died is queued again instead of being
taken over in the process that noticed.

Another task engine plugs in the same way: a ``Dispatcher`` (``send`` and
``resend_after_s``) for ``Runtime(..., state=..., dispatcher=...)``, and a worker that
calls ``run_turn`` with each message on its process's runtime.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._team.dispatching import Dispatcher
from ._team.port import port_of

if TYPE_CHECKING:
    from ._team.runtime import Runtime


def run_turn(rt: Runtime, runtime_id: str, handle_id: str, serial: int, segment: int) -> bool:
    """Run the queued turn a dispatcher's message names on ``rt``, here and now: what a
    worker does with each message (``toolnexus.celery`` does it for Celery).

    Args:
        rt: this worker process's runtime of the tree, built with ``state=`` and
            ``dispatcher=``.
        runtime_id: the message's tree, as ``Dispatcher.send`` got it.
        handle_id: the handle whose turn it names.
        serial: the turn's serial.
        segment: the turn's segment (a resumed turn continues in a new one).

    Returns:
        Whether it ran the turn: false, doing nothing, when the turn is not queued any more
        (claimed by another runtime, finished, interrupted) or the message was for
        another tree.

    Raises:
        ConfigError: ``rt`` has no dispatcher.
    """
    return port_of(rt).run_dispatched(runtime_id, handle_id, serial, segment)


__all__ = ["Dispatcher", "run_turn"]
