"""The tree store, cut along the tables it touches: each part a small protocol with a
memory implementation (``memory.py``) and a SQL one (``sql/``), the tree store their sum.

| part | holds | memory | SQL |
|---|---|---|---|
| ``records`` | the handles' records | the handles themselves | ``tn_handles`` |
| ``requests`` | requests waiting for an answer | a dict | ``tn_requests`` |
| ``journal`` | a turn's input, its resume, its recorded steps | a dict | ``tn_journal`` |
| ``events`` | stream events and the runtime's own log | ``_events.log`` | ``tn_stream`` |
| ``transcripts`` | the handles' transcripts | the conversation store | ``tn_messages`` |
| ``runs`` | what ``handles()`` lists and ``prune`` deletes | the table of handles | whole runs |
| ``owners`` | who runs which turn, leases, dispatched turns | this runtime alone | ``tn_owners`` |

``TreeStore`` adds the unit of work every change runs in (``change``): in memory it is
nothing; in a state it is one transaction, in which every part's writes commit together.
The runtime picks a memory or a stored tree once, when it is built, and never asks which.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Iterator, Protocol

from .._events.log import TreeEvents
from .._team.handle import Handle, Turn
from .._team.record import HandleRecord
from ..data import HandleView, Request
from ..errors import ConfigError
from .conversations import ConversationStore
from .documents import Announces, TurnDocuments

if TYPE_CHECKING:
    from .sql.base import StateStore

#: ``change(*handles, dirty=True)``: one unit of work around a change to ``handles``.
Change = Callable[..., ContextManager[Any]]


class HandleTable(Protocol):
    """What a part asks of the runtime's table of handles (``_team.tree.HandleTree``)."""

    root: Handle

    def walk(self, handle: Handle) -> Iterator[Handle]: ...

    def drop_runs(self, before: float) -> list[Handle]: ...

    def forget(self, ids: list[str]) -> None: ...


class Ownership(Protocol):
    """A runtime's claim on the turns it runs (``_team.ownership`` for a stored tree's)."""

    @property
    def letting_go(self) -> bool: ...

    def start(self) -> None: ...

    def recover(self, handle_id: str) -> bool: ...

    def let_go(self, join_timeout: float) -> bool: ...


class Records(Protocol):
    """The handles' records."""

    def load(self, handle_id: str) -> HandleRecord | None:
        """A record this process does not have in memory (made elsewhere, or dropped)."""
        ...

    def children(self, handle: Handle) -> list[str]:
        """Child ids in spawn order (all of them, also those that left memory)."""
        ...


class ParkedRequests(Protocol):
    """Requests waiting for an answer, each parked on the deepest handle that asked."""

    def park(self, request: Request, handle_id: str) -> None:
        """Park ``request`` on ``handle_id``, unless it is parked already (children settle first)."""
        ...

    def parked(self, request_id: str) -> str | None:
        """The handle ``request_id`` is parked on, while it is open."""
        ...

    def unpark(self, request_id: str, outcome: str, answer: Any = None) -> str | None:
        """Close ``request_id`` at most once (across processes too); the handle that was
        waiting on it, or ``None`` when it was not open."""
        ...

    def suspended_on(self, request_id: str, table: Callable[[], list[Handle]]) -> list[str]:
        """The ids of every handle whose pending request is ``request_id`` (``table``: the
        handles in memory)."""
        ...

    def open_requests(self) -> list[Request]: ...


class Journals(TurnDocuments, Protocol):
    """A turn's documents (``documents.TurnDocuments``: its input, its resume) and its
    journal of steps, by rows keyed ``(handle, serial, segment, kind, step, call id)``; the
    rules are ``_run.journal``'s."""

    def change(self, *handles: Handle, dirty: bool = True) -> ContextManager[Any]:
        """The tree store's unit of work, which the journal's writes join."""
        ...

    def get(
        self, handle_id: str, serial: int, segment: int, kind: str, step: int, call_id: str
    ) -> tuple[str, Any] | None:
        """A row's ``(status, payload)``."""
        ...

    def put(
        self, handle_id: str, serial: int, segment: int, kind: str, step: int, call_id: str, status: str, payload: Any
    ) -> None:
        """Write a row (``payload`` is plain JSON data)."""
        ...

    def rows(self, handle_id: str) -> list[tuple[int, int, str, int, str, str, Any]]:
        """Every row of ``handle_id``, each ``(serial, segment, kind, step, call id, status,
        payload)``: what ``_run.recorded.recorded_turns`` reads."""
        ...

    def open(
        self,
        handle: Handle,
        turn: Turn,
        lineage: Callable[[Handle], Iterator[Handle]],
        owner: str,
        counted: Callable[[], None],
        *,
        defer_final: bool = False,
    ) -> Any:
        """The journal a running turn records to (``_run.journal.TurnJournal``)."""
        ...


class TreeLog(Announces, Protocol):
    """The tree's stream events (``documents.Announces``), and the runtime's own log
    (``Runtime.events``)."""

    #: Where streams read the tree's events.
    stream: TreeEvents

    def add_log(self, entry: dict[str, Any]) -> None:
        """Append to the runtime's own log (inside a unit, it commits with the unit)."""
        ...

    def runtime_log(self) -> list[dict[str, Any]]:
        """The runtime's own log, oldest first."""
        ...


class Transcripts(Protocol):
    """The handles' transcripts (conversation id = handle id)."""

    @property
    def conversations(self) -> ConversationStore:
        """``rt.conversation_store``."""
        ...

    def saving(self, handle_id: str, messages: list[dict[str, Any]]) -> ContextManager[Callable[[], None]]:
        """Save a settling turn's transcript: around the outcome's commit, the block
        calls what it yields inside that unit (a stored tree commits the transcript with
        the outcome; in memory it is saved before the block, outside every lock, as the
        host's conversation store may be any code)."""
        ...


class Runs(Protocol):
    """Runs (a child of the root with its descendants): what is listed, what is pruned."""

    def listing(self, table: HandleTable, keep_closed: int) -> list[HandleView]:
        """``handles()``: the live handles and at most ``keep_closed`` most recently closed
        ones, root first, then pre-order; the cost follows what it lists, not the history."""
        ...

    def prune(self, table: HandleTable | None, before: float) -> list[str]:
        """Delete the runs whose top handle closed before ``before`` (``time.time()``),
        each whole, with its events, transcripts, journal and requests; nothing of a run
        whose top handle is not closed. The ids of the handles deleted."""
        ...


class Owners(Protocol):
    """Who runs which turn: this runtime's claim, and turns any process may run."""

    def ownership(
        self, owner: str, *, lease_s: float, recover: str, take_over: Any, on_beat: Callable[[], None] | None
    ) -> Ownership: ...

    def dispatching(self, dispatcher: Any, tree: Any, owner: str, clock: Callable[[], float]) -> Any:
        """The runtime's side of a dispatcher (``_team.dispatching.Dispatching``): turns
        that any process of the tree may run."""
        ...


class TreeStore(Protocol):
    """Where one tree lives: the sum of its parts, and the unit of work that commits them.

    Every method is safe from any thread; those named "(lock held)" are called with the
    handle's lock held, and take only leaf locks.
    """

    runtime_id: str
    #: Whether the tree outlives its runtime (leaving a ``with`` block then releases it
    #: for another runtime, instead of closing it).
    lasting: bool
    #: The state the rows live in (``None`` in memory): the served layer keeps its
    #: bindings beside them (``toolnexus._serve.bindings``).
    state: StateStore | None
    records: Records
    requests: ParkedRequests
    journal: Journals
    events: TreeLog
    transcripts: Transcripts
    runs: Runs
    owners: Owners

    def change(self, *handles: Handle, dirty: bool = True) -> ContextManager[Any]:
        """One unit of work around a change to ``handles`` (their locks held): nested
        units join the outermost, which commits. ``dirty=False`` only joins (and, in a
        stored tree, re-reads rows another process changed)."""
        ...

    def sync(self, handle: Handle, *, exact: bool = False) -> None:
        """Re-read ``handle``'s record if another process changed it (lock held); ``exact``
        sees every commit made before the call (see ``Handle.sync``)."""
        ...

    def open_root(self, fresh: HandleRecord, agents: set[str], make: Callable[[HandleRecord], Handle]) -> Handle:
        """The root: the kept one when the state holds this tree already, else ``fresh``."""
        ...

    def wait(self, handle: Handle, timeout: float | None, *, here: bool) -> None:
        """Wait for a change to ``handle`` (lock held, released while waiting): ``here``
        when this process runs its turn and will notify."""
        ...

    def forget_handle(self, handle_id: str) -> None:
        """``handle_id`` left the runtime's memory."""
        ...

    def let_go(self, join_timeout: float) -> None:
        """The runtime is done with the tree (closed or released)."""
        ...


def check_age(older_than_s: Any) -> float:
    """``older_than_s`` as ``prune`` takes it: a finite number of seconds, 0 or more.

    Raises:
        ConfigError: anything else (a negative, NaN or infinite age, or not a number).
    """
    if isinstance(older_than_s, bool) or not isinstance(older_than_s, (int, float)):
        raise ConfigError(f"older_than_s must be a number of seconds, not {type(older_than_s).__name__}")
    if not math.isfinite(older_than_s) or older_than_s < 0:
        raise ConfigError(f"older_than_s must be a finite number of seconds, 0 or more, not {older_than_s}")
    return float(older_than_s)
