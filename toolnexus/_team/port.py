"""The runtime's private port: what the ``task`` tool, a dispatcher's worker, ``Agent`` and
the served surfaces call on a runtime, and a host never does.

``concurrent.futures.Future`` teaches ``result()`` and keeps ``set_result`` for the
executor; a ``Runtime`` likewise shows the verbs the documentation teaches, and keeps the
calls its own machinery makes here: delegation's (``task.Team``: spawn a woken child, wait
for it on this thread, resume below it, close it), a worker's (run the turn a message
names, behind ``toolnexus.dispatch.run_turn``) and ``Agent``'s (keep the model's
connections across runtimes, a stream whose end it handles itself), the served layer's
(where the tree is kept) and the AG-UI endpoint's (where a run's events start, the front
end's tools offered to a thread). ``port_of(rt)`` is the one way in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence

from ..data import AgentResult, Answer, HandleView
from . import offers

if TYPE_CHECKING:
    from .._events.streams import Finish, RunStream, Streams
    from .._model.engine import ModelEngine
    from .agentdef import AgentDef
    from .closing import Closer
    from .execution import Execution
    from .handle import Handle
    from .scheduler import Scheduler
    from .spawning import Spawner
    from .._stores.parts import TreeStore
    from .tree import HandleTree
    from .waiting import Waiter


class Ported(Protocol):
    """A runtime, as far as its port is concerned."""

    _port: RuntimePort


class Verbs(Protocol):
    """The runtime's public verbs delegation also calls."""

    def inspect(self, h: Handle | str) -> HandleView: ...

    def retry(self, h: Handle | str) -> None: ...


def port_of(rt: Ported) -> RuntimePort:
    """``rt``'s private port."""
    return rt._port


class RuntimePort:
    """One runtime's private side, over the parts the runtime is made of (``verbs`` is the
    runtime itself, held weakly, for the public verbs delegation also calls)."""

    def __init__(
        self,
        verbs: Verbs,
        *,
        spawner: Spawner,
        scheduler: Scheduler,
        waiter: Waiter,
        closer: Closer,
        execution: Execution,
        streams: Streams,
        model: ModelEngine,
        tree: HandleTree,
        close_by: Callable[[], float],
    ) -> None:
        self._verbs = verbs
        self._spawner = spawner
        self._scheduler = scheduler
        self._waiter = waiter
        self._closer = closer
        self._execution = execution
        self._streams = streams
        self._model = model
        self._tree = tree
        self._close_by = close_by

    # --- delegation (``task.Team``) ------------------------------------------------------------

    def definition(self, name: str) -> AgentDef:
        """The registry's definition of ``name`` (``SpawnError`` when unknown)."""
        return self._spawner.definition(name)

    def inspect(self, h: Handle | str) -> HandleView:
        return self._verbs.inspect(h)

    def retry(self, h: Handle | str) -> None:
        self._verbs.retry(h)

    def spawn_woken(self, parent: Handle, agent: str, prompt: str, serial: int, call_id: str) -> Handle:
        """Spawn ``agent`` under ``parent``, name it in the index for turn ``serial`` and
        wake it on ``prompt``, as one unit of work; its turn waits for the caller (or, with
        a dispatcher, for whichever worker claims it first)."""
        return self._spawner.spawn_woken(parent, agent, prompt, serial, call_id)

    def settled(self, handle: Handle) -> AgentResult:
        """Wait for a handle to settle, running its turn on this thread if nobody has."""
        return self._waiter.next_result(handle, None, run_here=True)

    def resume_below(self, answer: Answer, child: Handle) -> None:
        """Resume the handles suspended on ``answer`` from the asking one up to ``child``."""
        self._execution.submit(*self._scheduler.resume(answer, child))

    def close_child(self, child: Handle, *, force: bool) -> None:
        """Close a settled ``task`` child and its subtree."""
        self._closer.close_tree(child, "task settled", self._close_by(), force=force)

    # --- a dispatcher's worker (``toolnexus.dispatch.run_turn``) -------------------------------

    def run_dispatched(self, runtime_id: str, handle_id: str, serial: int, segment: int) -> bool:
        """Run the queued turn a dispatcher's message names, here and now; false, doing
        nothing, when it is not queued any more or the message was for another tree."""
        return self._execution.run_sent(runtime_id, handle_id, serial, segment, self._scheduler.run)

    # --- the served layer (``toolnexus._serve``) -----------------------------------------------

    @property
    def tree_store(self) -> TreeStore:
        """Where the tree lives (its ``state`` and ``runtime_id``): the served layer keeps
        its bindings beside the tree's rows."""
        return self._tree.store

    # --- the AG-UI endpoint (``toolnexus.agui``) ------------------------------------------------

    def latest_event(self) -> str:
        """The id of the tree's latest durable event, read from the state: what any process
        commits from now on comes after it."""
        return self._streams.latest()

    def offer(self, h: Handle | str, specs: Sequence[dict[str, Any]]) -> None:
        """Offer the host's tools ``specs`` (``{"name", "description", "parameters"}``) to
        the model of ``h``'s turns from its next one on (and to a turn that resumes),
        instead of what it was offered before."""
        offers.offer(self._tree, self._tree.get(h).id, specs)

    # --- ``Agent`` ------------------------------------------------------------------------------

    def keep_connections(self) -> tuple[Any, Callable[[], None]] | None:
        """A hold on the model endpoint's pooled connections that outlives the runtime's
        close: ``(endpoint, release)``, or None when there is nothing to keep."""
        return self._model.keep_connections()

    def stream_agent(self, name: str, prompt: str, timeout: float | None, finish: Finish) -> RunStream:
        """``Runtime.stream_agent`` with ``finish`` called on the result when the stream
        ends (``None`` when it was closed early), after the handle is closed."""
        return self._streams.run_agent(name, prompt, timeout, finish)
