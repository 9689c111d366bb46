"""A runtime as the owner of the turns it runs in a durable tree.

Every runtime of a stored tree registers as an owner and proves itself alive with a
heartbeat every third of a lease. A running turn whose owner stopped beating for a whole
lease, or whose process on this host is gone, is an orphan: the heartbeat of a live owner
finds it and hands it to ``take_over`` (which claims it by compare-and-set on the owner).
Letting go stops the heartbeat and drops the registration, leaving this owner's turns
as orphans for another runtime.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
from typing import Callable, Protocol

from ..errors import ToolnexusError

log = logging.getLogger("toolnexus")

RECOVER_OPTIONS = ("resume", "interrupt", "leave")
_HOST = socket.gethostname()

#: ``take_over(handle_id, dead_owner, mode)``: claim one orphaned turn; whether it was claimed.
TakeOver = Callable[[str, "str | None", str], bool]


class OwnerRows(Protocol):
    """The rows of a stored tree that say who runs what (``_stores.sql.owners.SqlOwners`` has them)."""

    def register_owner(self, owner: str, host: str, pid: int) -> None: ...

    def heartbeat(self, owner: str) -> None: ...

    def drop_owner(self, owner: str) -> None: ...

    def orphans(self, lease_s: float, host: str, alive: Callable[[int], bool]) -> list[tuple[str, str | None]]: ...


class Ownership:
    """The owner registration, heartbeat thread and orphan recovery of one runtime.

    ``recover`` is what the heartbeat does with orphans ("resume", "interrupt", or
    "leave" them for an explicit ``recover``); ``on_beat`` runs on every beat after that.
    """

    def __init__(
        self,
        rows: OwnerRows,
        owner: str,
        *,
        lease_s: float,
        recover: str,
        take_over: TakeOver,
        on_beat: Callable[[], None] | None = None,
    ) -> None:
        self._rows = rows
        self._owner = owner
        self._lease_s = lease_s
        self._recover = recover
        self._take_over = take_over
        self._on_beat = on_beat
        self._letting_go = threading.Event()
        self._heartbeat: threading.Thread | None = None

    @property
    def letting_go(self) -> bool:
        return self._letting_go.is_set()

    def start(self) -> None:
        """Register, recover what is orphaned already, then start the heartbeat."""
        self._rows.register_owner(self._owner, _HOST, os.getpid())
        if self._recover != "leave":
            self.sweep()
        self._heartbeat = threading.Thread(target=self._beat, name="toolnexus-heartbeat", daemon=True)
        self._heartbeat.start()

    def _beat(self) -> None:
        """Prove this runtime alive every third of a lease; recover orphaned turns."""
        while not self._letting_go.wait(self._lease_s / 3):
            try:
                self._rows.heartbeat(self._owner)
                if self._recover != "leave":
                    self.sweep()
                if self._on_beat is not None:
                    self._on_beat()
            except Exception:  # the store failed: beat again later, never let the thread die
                log.warning("toolnexus: heartbeat failed; retrying", exc_info=True)

    def sweep(self) -> None:
        """Recover every orphaned turn of the tree, as ``recover`` says (deepest first)."""
        for handle_id, dead_owner in orphans(self._rows, self._lease_s):
            self._take_over(handle_id, dead_owner, self._recover)

    def recover(self, handle_id: str) -> bool:
        """Resume the orphaned turn of ``handle_id`` here; whether there was one to take over."""
        for orphan_id, dead_owner in orphans(self._rows, self._lease_s):
            if orphan_id == handle_id:
                return self._take_over(orphan_id, dead_owner, "resume")
        return False

    def let_go(self, join_timeout: float) -> bool:
        """Stop the heartbeat (waiting up to ``join_timeout``) and drop the registration.

        Returns false when this owner had let go already.
        """
        if self._letting_go.is_set():
            return False
        self._letting_go.set()
        if self._heartbeat is not None and self._heartbeat is not threading.current_thread():
            self._heartbeat.join(timeout=join_timeout)
        with contextlib.suppress(ToolnexusError):
            self._rows.drop_owner(self._owner)
        return True


def orphans(rows: OwnerRows, lease_s: float) -> list[tuple[str, str | None]]:
    """``(handle id, dead owner)`` of every running turn of the tree whose owner is gone, as
    a runtime of this host with a lease of ``lease_s`` judges it; deepest first."""
    return rows.orphans(lease_s, _HOST, _alive)


def _alive(pid: int) -> bool:
    """Whether a process of this host still exists (a dead owner's turns need no lease wait)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
