"""Model calls in flight against money caps, so a capped team passes its cap by at most
one call however many of its handles spend at once.

A call's cost is known only when its reply is in. Before each model call of a handle
under a ``max_cost`` (its own or an ancestor's), ``Spending.flight`` reads the ledger of
every capped handle on the chain, then either refuses the call (a cap is reached:
``maxCost``), or counts it in flight against each of those caps, or waits for a call in
flight to land when more could take a cap too far (``budget.may_fly``). The count is this
runtime's: calls that other processes have in flight reach it only once charged. Waiting
calls are not queued in order: near a cap, whichever is first to find room goes, and a
child whose first call was still waiting when the cap was reached makes none.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Callable, Iterator

import attrs

from .._team import budget as budgets
from .._model.cancel import CancelScope
from ..errors import Cancelled

#: How long a waiting call goes without reading the ledgers again (another process may
#: have charged them); a landing here, or a cancel, wakes it at once.
REREAD_S = 1.0


@attrs.frozen
class Cap:
    """One capped ledger on a call's chain, as read just now."""

    handle_id: str
    cap: float
    spent: float
    #: The most one call charged to this ledger has cost (``None`` before the first).
    largest: float | None


class Spending:
    """The model calls in flight under each capped handle of one runtime."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # guards: _flying, _landings; notified when a call lands. A leaf lock: taken with
        # no handle lock held, and nothing is acquired under it.
        self._landed = threading.Condition(self._lock)
        self._flying: dict[str, int] = {}
        self._landings = 0

    @contextlib.contextmanager
    def flight(self, read: Callable[[], list[Cap]], scope: CancelScope | None) -> Iterator[str | None]:
        """Around one model call: yields ``"maxCost"`` when a cap on the chain is reached
        (the call must not be made), else None with the call counted in flight until the
        block ends. ``read`` gives the chain's capped ledgers (taking their locks).

        Raises:
            Cancelled: ``scope`` was cancelled while the call waited.
        """
        caps = self._take(read, scope)
        if caps is None:
            yield "maxCost"
            return
        try:
            yield None
        finally:
            self._land(caps)

    def flying(self, handle_id: str) -> int:
        """Calls in flight under ``handle_id``'s cap now."""
        with self._lock:
            return self._flying.get(handle_id, 0)

    def _take(self, read: Callable[[], list[Cap]], scope: CancelScope | None) -> list[Cap] | None:
        while True:
            with self._lock:
                seen = self._landings
            caps = read()  # the handle locks, outside this leaf lock
            with self._landed:
                if any(c.spent >= c.cap for c in caps):
                    return None
                if all(budgets.may_fly(c.cap, c.spent, c.largest, self._flying.get(c.handle_id, 0)) for c in caps):
                    for c in caps:
                        self._flying[c.handle_id] = self._flying.get(c.handle_id, 0) + 1
                    return caps
                if self._landings == seen:  # nothing landed since the read: wait for a landing
                    with scope.waking(self._wake) if scope is not None else contextlib.nullcontext():
                        self._landed.wait_for(lambda: self._landings != seen or _cancelled(scope), REREAD_S)
            if scope is not None and scope.cancelled:
                raise Cancelled("interrupted while waiting for calls in flight under a money cap")

    def _land(self, caps: list[Cap]) -> None:
        with self._landed:
            for c in caps:
                left = self._flying[c.handle_id] - 1
                if left:
                    self._flying[c.handle_id] = left
                else:
                    del self._flying[c.handle_id]
            self._landings += 1
            self._landed.notify_all()

    def _wake(self) -> None:
        with self._landed:
            self._landed.notify_all()


def _cancelled(scope: CancelScope | None) -> bool:
    return scope is not None and scope.cancelled
