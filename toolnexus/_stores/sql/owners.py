"""Who runs what (``tn_owners``, and the running turns of ``tn_handles``): every runtime of
a stored tree registers as an owner and beats; a running turn whose owner stopped beating
is an orphan (``_team.ownership``), and a queued turn waits for any runtime to claim it
(``_team.dispatching``). Times are the state's clock (``StateStore.now``), one for every
host."""

from __future__ import annotations

from typing import Any, Callable

from ..._team.ownership import Ownership
from ..._team.dispatching import Dispatcher, Dispatching
from .base import StateStore
from .handlerows import json_value

_COLUMNS = ("runtime_id", "owner", "host", "pid", "started_at", "heartbeat_at")


class SqlOwners:
    """The owners of one tree's turns (``parts.Owners``; ``ownership.OwnerRows`` and
    ``dispatching.QueuedRows`` for the parts that run them)."""

    def __init__(self, state: StateStore, runtime_id: str) -> None:
        self._state = state
        self.runtime_id = runtime_id
        self._register = state.dialect.upsert("tn_owners", _COLUMNS, _COLUMNS[:2], ("heartbeat_at",))

    def ownership(
        self, owner: str, *, lease_s: float, recover: str, take_over: Any, on_beat: Callable[[], None] | None
    ) -> Ownership:
        return Ownership(self, owner, lease_s=lease_s, recover=recover, take_over=take_over, on_beat=on_beat)

    def dispatching(self, dispatcher: Dispatcher, tree: Any, owner: str, clock: Callable[[], float]) -> Dispatching:
        return Dispatching(dispatcher, self, tree, owner, clock)

    def now(self) -> float:
        """The state's clock: leases, heartbeats and queue times are compared on it."""
        return self._state.now()

    def register_owner(self, owner: str, host: str, pid: int) -> None:
        now = self.now()
        with self._state.transaction():
            self._state.execute(self._register, (self.runtime_id, owner, host, pid, now, now))

    def heartbeat(self, owner: str) -> None:
        with self._state.transaction():
            self._state.execute(
                "UPDATE tn_owners SET heartbeat_at = ? WHERE runtime_id = ? AND owner = ?",
                (self.now(), self.runtime_id, owner),
            )

    def drop_owner(self, owner: str) -> None:
        with self._state.transaction():
            self._state.execute("DELETE FROM tn_owners WHERE runtime_id = ? AND owner = ?", (self.runtime_id, owner))

    def running_turns(self, parent_id: str | None = None) -> list[tuple[str, str | None, float | None]]:
        """``(handle id, owner, queued at)`` of every running turn (of ``parent_id``'s
        children only, when given), deepest first."""
        # The first term lets the index of live handles serve the query.
        sql = "SELECT id, body FROM tn_handles WHERE runtime_id = ? AND state <> 'closed' AND state = 'running'"
        params: tuple[str, ...] = (self.runtime_id,)
        if parent_id is not None:
            sql, params = sql + " AND parent_id = ?", (self.runtime_id, parent_id)
        found = []
        for handle_id, body in self._state.execute(sql, params):
            running = json_value(body).get("running") or {}
            found.append((handle_id, running.get("owner"), running.get("queued_at")))
        found.sort(key=lambda item: -item[0].count("/"))
        return found

    def orphans(self, lease_s: float, host: str, alive: Callable[[int], bool]) -> list[tuple[str, str | None]]:
        """``(handle id, dead owner)`` of every running turn whose owner is gone: no heartbeat
        for ``lease_s``, or a process of this host that no longer exists. Deepest first."""
        owners = {
            row[0]: (row[1], int(row[2]), float(row[3]))
            for row in self._state.execute(
                "SELECT owner, host, pid, heartbeat_at FROM tn_owners WHERE runtime_id = ?", (self.runtime_id,)
            )
        }
        now = self.now()
        found = []
        for handle_id, owner, queued_at in self.running_turns():
            if owner is None and queued_at is not None:
                continue  # queued for a dispatcher: nobody owns it yet, nobody died
            known = owners.get(owner) if owner is not None else None
            if known is None or now - known[2] > lease_s or (known[0] == host and not alive(known[1])):
                found.append((handle_id, owner))
        return found
