"""Where an admitted turn runs: here, or in whichever process of the tree claims it.

``concurrent.futures`` answers "where does this callable run?" with one ``Executor``
interface and an implementation chosen once; the caller only submits. A runtime does the
same for its turns: ``Execution`` is the interface, chosen once where the runtime is put
together (``lifecycle.execution_for``), and the scheduler, the waiter and the verbs only
call it, never asking which one they hold.

- ``LocalExecution``: turns run on the runtime's pool, or inline (no pool) on the first
  thread that waits for them.
- ``dispatching.Dispatching``: turns are committed as queued in the state and a dispatcher
  sends one message each; any runtime of the tree claims and runs them, and a thread that
  waits here takes queued turns meanwhile.

Every method named "(lock held)" is called with the handle's lock held, inside its unit
of work; ``submit`` and ``offer`` are called after that unit committed.
"""

from __future__ import annotations

from concurrent.futures import Executor
from typing import TYPE_CHECKING, Callable, Protocol

from . import jobs as _jobs
from ..errors import ConfigError

if TYPE_CHECKING:
    from .handle import Handle, Turn

#: ``run(handle, turn)``: the scheduler's run of one admitted turn, to its settled outcome.
RunTurn = Callable[["Handle", "Turn"], None]


class Execution(Protocol):
    """Where one runtime's admitted turns run."""

    #: The tool sources whose calls run on the turn's own thread (the others go to the pool).
    here_sources: frozenset[str]
    #: Whether admitted turns are queued for every process of the tree: a thread that waits
    #: and helps then takes queued turns, and hears of every commit to find them.
    shared: bool

    def begin(self, handle: Handle, turn: Turn, run: RunTurn) -> _jobs.Job:
        """``turn`` becomes ``handle``'s running turn (lock held): the job that runs it, or
        the job that sends its message."""
        ...

    def take_over(self, handle: Handle, run: RunTurn) -> _jobs.Job:
        """The running turn of a dead owner continues (lock held): here from its journal,
        or queued again for any process; the job that runs it, or sends its message."""
        ...

    def submit(self, *jobs: _jobs.Job) -> None:
        """Hand admitted turns over to run (after their unit of work committed)."""
        ...

    def offer(self, job: _jobs.Job) -> None:
        """A ``task`` child's turn, admitted for the call that is about to wait on it."""
        ...

    def claim(self, handle: Handle, run: RunTurn) -> _jobs.Job | None:
        """The handle's turn queued for any process, claimed for this thread (lock held);
        ``None`` when no such turn waits."""
        ...

    def queued_sibling(self, handle: Handle, run: RunTurn) -> _jobs.Job | None:
        """A queued turn of another child of ``handle``'s parent, claimed for this thread
        while it waits on ``handle``; ``None`` when there is none."""
        ...

    def run_sent(self, runtime_id: str, handle_id: str, serial: int, segment: int, run: RunTurn) -> bool:
        """Run here the queued turn a dispatcher's message names; whether it ran.

        Raises:
            ConfigError: this runtime has no dispatcher.
        """
        ...

    def on_beat(self) -> None:
        """What the owner's heartbeat does for the execution, after each beat."""
        ...


class LocalExecution:
    """Turns run in this process: on ``executor`` (the runtime's pool, or its share of a
    ``WorkerPool``), or, with none (``inline=True``), on the first thread that waits.

    A waiter that finds a turn nobody has started runs it itself (caller-runs), so a
    submitted job may run on a worker or on the waiting thread, whichever claims it first.
    """

    here_sources: frozenset[str] = frozenset()
    shared = False

    def __init__(self, executor: Executor | None, *, owner: str, clock: Callable[[], float]) -> None:
        self._executor = executor
        self._owner = owner
        self._clock = clock

    def begin(self, handle: Handle, turn: Turn, run: RunTurn) -> _jobs.Job:
        job = turn.job = _jobs.Job(lambda: run(handle, turn))
        handle.begin(turn, self._clock(), self._owner)
        return job

    def take_over(self, handle: Handle, run: RunTurn) -> _jobs.Job:
        turn = handle.stored_turn()
        job = turn.job = _jobs.Job(lambda: run(handle, turn))
        handle.take_over(turn, self._clock(), self._owner)
        return job

    def submit(self, *jobs: _jobs.Job) -> None:
        for job in jobs:
            _jobs.submit(self._executor, job)

    def offer(self, job: _jobs.Job) -> None:
        """Nothing to do: the waiting call runs the turn on its own thread (no hand-off)."""

    def claim(self, handle: Handle, run: RunTurn) -> _jobs.Job | None:
        return None  # a turn of this process is its handle's own job

    def queued_sibling(self, handle: Handle, run: RunTurn) -> _jobs.Job | None:
        return None

    def run_sent(self, runtime_id: str, handle_id: str, serial: int, segment: int, run: RunTurn) -> bool:
        raise ConfigError("running a dispatched turn needs a Runtime built with state= and dispatcher=")

    def on_beat(self) -> None:
        pass
