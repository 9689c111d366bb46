"""A stored tree: the rows of one ``runtime_id`` in a state, so a team outlives its process.

The state is the truth and a runtime's memory is a cache of it. ``StoredTree`` is the sum
of the SQL parts (one module each, by the tables they touch) and the unit of work they
commit in (``unit.py``). Claims (answering a request, taking over a turn) are single
conditional statements or compare-and-set under the row lock, never read-then-write.

A handle's row body is its record through ``wire``'s converter, small and rewritten on
each change; what is large and written once per turn (its input, its resume, the
checkpoint it suspended at) goes to the journal beside it, with each model reply and tool
result of the turn.
"""

from __future__ import annotations

from typing import Callable

from ..._team.handle import Handle
from ..._team.record import HandleRecord
from ...errors import ConfigError
from ..parts import Journals, Owners, ParkedRequests, Records, Runs, Transcripts, TreeLog
from .base import StateStore
from .events import SqlLog, StoredEvents
from .handlerows import ROOT
from .journal import SqlJournal
from .owners import SqlOwners
from .records import SqlRecords
from .requests import SqlRequests
from .runs import SqlRuns
from .transcripts import SqlTranscripts
from .unit import Unit

#: How long a wait on a turn owned by another process goes without re-reading the state.
REMOTE_POLL_S = 0.25


class StoredTree:
    """The rows of one ``runtime_id`` in a state (``parts.TreeStore``). ``sole_user``: the
    only tree on this state object in the process, which lets it skip re-reading rows
    nobody else committed to; ``owns_state``: letting go of the tree closes the state."""

    #: A stored tree outlives its runtime: another runtime may continue it.
    lasting = True

    def __init__(
        self, state: StateStore, runtime_id: str, *, sole_user: bool = False, owns_state: bool = False
    ) -> None:
        self.state: StateStore | None = state
        self._state = state
        self.runtime_id = runtime_id
        self._owns_state = owns_state
        self._let_go = False
        self._records = SqlRecords(state, runtime_id)
        self._stream = StoredEvents(state, runtime_id)
        unit = Unit(state, runtime_id, self._records, self._stream, sole_user=sole_user)
        self.change = unit.change
        self.sync = unit.sync
        self.records: Records = self._records
        self.requests: ParkedRequests = SqlRequests(state, runtime_id)
        self.journal: Journals = SqlJournal(state, runtime_id, unit.change)
        self.events: TreeLog = SqlLog(self._stream, unit)
        self.transcripts: Transcripts = SqlTranscripts(state, runtime_id)
        self.runs: Runs = SqlRuns(state, runtime_id)
        self.owners: Owners = SqlOwners(state, runtime_id)

    def open_root(self, fresh: HandleRecord, agents: set[str], make: Callable[[HandleRecord], Handle]) -> Handle:
        try:
            for handle_id, name in self._records.live():
                if handle_id != ROOT and name not in agents:
                    raise ConfigError(
                        f"the stored tree {self.runtime_id!r} has a live handle {handle_id} of agent {name!r},"
                        " which the registry lacks"
                    )
            stored = self._records.load(ROOT)
            root = make(stored or fresh)
            if stored is None:
                with self.change(root):
                    pass
            return root
        except BaseException:
            self.let_go(0)
            raise

    def wait(self, handle: Handle, timeout: float | None, *, here: bool) -> None:
        poll = REMOTE_POLL_S if timeout is None else min(timeout, REMOTE_POLL_S)
        if here:
            handle.changed.wait(poll)  # runs here and notifies; another process may interrupt it
            return
        # Another process has the turn (or will wake it): watch the state for commits.
        handle.lock.release()
        try:
            self._state.wait_change(poll)
        finally:
            handle.lock.acquire()

    def forget_handle(self, handle_id: str) -> None:
        self._stream.take(iter((handle_id,)))  # the state keeps the handle, readable by id; events held for it go

    def let_go(self, join_timeout: float) -> None:
        self._stream.stop(join_timeout)
        if self._owns_state and not self._let_go:
            self._let_go = True
            self._state.close()
