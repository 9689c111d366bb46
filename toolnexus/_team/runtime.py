"""The agent runtime: a tree of handles driven by its verbs, on a pool of worker threads.

The runtime is its verbs and read-only views; each part it is made of has one owner:
a turn's life (admission, run, settle, slots, taking over an orphan) is ``scheduler.py``;
delegation (the ``task`` tool and its reattachment index) is ``task.py``; one turn's loop
and ledger, ``turns.py``; the wait behind ``wait``, ``run_agent`` and ``task``,
``waiting.py``; where the tree lives (memory or a state), the ``TreeStore`` of
``tree.py``; putting the runtime together and ending what it started, ``lifecycle.py``. The lock order every verb
follows is set out once, in ``handle.py``. Blocking goes only upward: a parent waits on
its child, never the reverse.
"""

from __future__ import annotations

import functools
import logging
import os
import time
import weakref
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Mapping


from . import jobs as _jobs
from .._model import pricing
from .. import _seconds as seconds
from .._stores.parts import check_age
from .._run import tracing
from .._model.cancel import TurnGate
from .agentdef import normalize_registry
from . import lifecycle
from .lifecycle import check_options, execution_for, make_executor, open_tree, weakly
from .closing import Closer
from ..data import AgentResult, Answer, Budget
from .dispatching import Dispatcher
from .._model.engine import ConnectionOptions, build_engine
from ..errors import StateError, ToolnexusError
from .handle import Handle, HandleRecord
from ..hooks import HooksLike
from .._run.runspec import Engine
from .pool import WorkerPool
from .port import RuntimePort
from .inbox import post
from .record import InboxItem
from .scheduler import Scheduler
from .spawning import Spawner
from .._stores.conversations import ConversationStore
from .._events.streams import RunStream, Streams
from .task import Delegation, agent_tool
from .views import TreeViews
from .reruns import Reruns
from .._tools.tools import Tool
from .turns import TurnRunner, check_priced
from .waiting import Waiter

if TYPE_CHECKING:
    import requests

    from ..state import StateStore

log = logging.getLogger("toolnexus")


class Runtime(TreeViews, Reruns):
    """Agents as handles in a tree, with hierarchical budgets, suspension and resume.

    A context manager, or call ``close(rt.root)``: every thread it started has ended when
    that returns. Durations are seconds. The connection options (``base_url``, ``model``,
    ``style``, ``api_key``, ``headers``, ``session``, ``generate``, ``retries``, ``retry_base``,
    ``timeout``, ``max_retry_after``, ``request_params``) and ``hooks``, ``on_metric``,
    ``around_tool`` and ``trace_content`` are the ``Client``'s. (``timeout_ms``,
    ``retry_base_ms``, ``max_retry_after_s``, ``shutdown_ms`` and ``lease_ms`` still work
    for this release, with a ``DeprecationWarning``.)

    Args:
        registry: Agent names to ``AgentDef`` values (or dicts with the same keys).
        store: Where the handles' transcripts are kept (not with ``state``: it has its own).
        clock: The monotonic clock turns are timed on (``time.monotonic``).
        inbox_cap: Items a handle's inbox holds before ``post`` raises ``InboxFull``.
        max_concurrent_turns: Turns that may wait on the model at once; ``None``: no bound.
        shutdown_timeout: How long closing lets a running turn finish.
        max_workers: The runtime's worker threads (not with ``pool``).
        state: Where the tree lives: ``None`` (memory), a SQLite file's path, a
            ``postgresql://`` URL or a ``StateStore``.
        runtime_id: The tree's name in the state (trees may share one).
        lease: How long a durable tree's owner may go without a heartbeat before another
            process takes its turns over.
        recover: What an orphaned turn does: ``"resume"``, ``"interrupt"`` or ``"leave"``.
        keep_closed: How many closed handles ``handles()`` lists at most.
        inline: Start no worker threads: every turn and tool call runs on the thread that
            waits for it, tool calls and ``task`` children one after another.
        dispatcher: Hands every turn to other processes (with a ``state``; see
            ``toolnexus.celery``): any runtime of the tree that claims it runs it.
        pool: A ``WorkerPool`` whose threads the runtime borrows instead of its own.
        prices: As the ``Client``'s: every handle gets a cost, which budgets can cap.

    Raises:
        ConfigError: options that do not go together, or an agent the registry lacks.
        StateError: the state cannot be opened.
    """

    def __init__(
        self,
        registry: Mapping[str, Any],
        *,
        base_url: str | None = None,
        model: str = "default",
        style: str = "openai",
        api_key: str | None = None,
        headers: dict[str, str] | None = None,
        session: requests.Session | None = None,
        generate: Callable[[dict[str, Any]], Any] | None = None,
        retries: int = 2,
        retry_base: float = 0.5,
        timeout: float | None = None,
        max_retry_after: float = 60.0,
        request_params: dict[str, Any] | None = None,
        store: ConversationStore | None = None,
        clock: Callable[[], float] | None = None,
        inbox_cap: int = 64,
        max_concurrent_turns: int | None = None,
        shutdown_timeout: float = 5.0,
        hooks: HooksLike = None,
        on_metric: Callable[[dict[str, Any]], Any] | None = None,
        max_workers: int | None = None,
        state: str | os.PathLike[str] | StateStore | None = None,
        runtime_id: str = "default",
        lease: float = 15.0,
        recover: str = "resume",
        keep_closed: int = 1000,
        inline: bool = False,
        around_tool: Callable[[], ContextManager[Any]] | None = None,
        trace_content: bool = False,
        dispatcher: Dispatcher | None = None,
        pool: WorkerPool | None = None,
        prices: Mapping[str, Any] | None = None,
        timeout_ms: float | None = None, retry_base_ms: float | None = None,
        max_retry_after_s: float | None = None, shutdown_ms: float | None = None, lease_ms: float | None = None,
    ) -> None:
        times = seconds.durations("Runtime", locals())
        self._registry = normalize_registry(registry)
        lease_s, self._shutdown_s = check_options(
            state=state, store=store, recover=recover, lease=times["lease"], shutdown_timeout=times["shutdown_timeout"],
            keep_closed=keep_closed, pool=pool, max_workers=max_workers,
        )
        make_execution = execution_for(dispatcher, state)
        price_table = check_priced(self._registry, model, pricing.table(prices))  # before anything is built
        self._owner = os.urandom(16).hex()  # this runtime object, as the owner of the turns it runs
        self._inline = inline
        self._executor, workers = make_executor(inline=inline, pool=pool, max_workers=max_workers)
        executor = self._executor
        # The engine first: bad connection options fail before the state is touched.
        options = ConnectionOptions.among({**locals(), **times})
        model_engine = build_engine(options, pool_size=workers, required=state is None)  # a state may be replayed
        load = weakly(self._load_handle)
        self._tree = open_tree(state, runtime_id, store, set(self._registry), model_engine, load, keep_closed)
        self.root = self._tree.root
        """The root handle (id ``"root"``): it runs no agent; each run is a child of it."""
        self._clock = clock or time.monotonic
        self._inbox_cap = inbox_cap
        self._execution = execution = make_execution(self._executor, self._tree, self._owner, self._clock)
        engine = Engine(model=model_engine, executor=lambda: executor, here_sources=execution.here_sources)
        self._assemble(
            engine, inline=inline, model=model, hooks=hooks, on_metric=on_metric, around_tool=around_tool,
            prices=price_table, gate=TurnGate(max_concurrent_turns) if max_concurrent_turns else None,
            trace=tracing.Tracer(content=trace_content, provider=None if generate is not None else style),
        )
        take_over, on_beat = self._scheduler.take_over, self._scheduler.on_beat
        self._ownership = self._tree.store.owners.ownership(
            self._owner, lease_s=lease_s, recover=recover, take_over=take_over, on_beat=on_beat
        )
        self._ownership.start()

    def _assemble(self, engine: Engine, *, inline: bool, **turn_options: Any) -> None:
        """The parts a turn's life is made of, each built on those before it; delegation
        calls back through the private port, built last."""
        tree, execution, clock = self._tree, self._execution, self._clock
        self._delegation = delegation = Delegation(tree, execution.submit)
        self._turns = turns = TurnRunner(
            engine=engine, conversations=tree.store.transcripts.conversations, clock=clock, lineage=tree.lineage,
            task_tool=delegation.task_tool, nonce=self.root.record.nonce, tree_store=tree.store, owner=self._owner,
            **turn_options,
        )
        self._scheduler = scheduler = Scheduler(
            tree=tree, turns=turns, execution=execution, owner=self._owner, clock=clock,
            after_run=delegation.hand_over, before_settle=delegation.retire,
        )
        self._closer = Closer(
            tree, clock, inline=inline, settle_wait_s=self._shutdown_s, turn_calls=turns.turn_calls,
            release_slot=scheduler.release_slot, task_children=delegation.children,
            request_cancelled=turns.request_cancelled,
        )
        self._waiter = Waiter(
            tree=tree, turns=turns, execution=execution, run_turn=scheduler.run, interrupt=self._closer.interrupt,
            inline=inline,
        )
        self._streams = Streams(weakref.proxy(self), tree.store.events.stream, self._waiter, inline=inline)
        self._spawner = Spawner(self._registry, tree, turns, scheduler.admit, execution)
        self._port = RuntimePort(
            weakref.proxy(self), spawner=self._spawner, scheduler=scheduler, waiter=self._waiter,
            closer=self._closer, execution=execution, streams=self._streams, model=engine.model, tree=tree,
            close_by=functools.partial(_deadline, clock, self._shutdown_s),
        )
        delegation.team = weakref.proxy(self._port)  # its parts hold the delegation: no cycle back

    def __repr__(self) -> str:
        return f"Runtime(agents={sorted(self._registry)!r}, handles={len(self._tree)})"

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    # --- the tree and its owner -----------------------------------------------------------

    def _load_handle(self, record: HandleRecord) -> Handle:
        """A handle made by another process (or before this runtime opened the tree)."""
        return Handle(record, self._registry.get(record.name), self._tree.store)

    def release(self) -> None:
        """Let go of a stored tree: end this runtime's threads and leave the tree as it is in
        the state, for any other runtime (or a later one) to continue; its running turns are
        orphaned for recovery. Without a state it closes the root. Leaving a ``with`` block
        releases; releasing twice is harmless.

        Raises:
            StateError: the state store failed while the tree was handed back.
        """
        if not self._tree.store.lasting:
            self.close(self.root)
            return
        if self._ownership.letting_go:
            return
        lifecycle.cancel_running(self._tree.all())
        self._end(lifecycle.threads_deadline(self._shutdown_s))
        self._let_go()

    def _let_go(self) -> None:
        lifecycle.let_go(self._ownership, self._tree.store, self._shutdown_s)

    def recover(self, h: Handle | str) -> bool:
        """Continue an orphaned turn here from its journal (for ``recover="leave"``).

        Args:
            h: the handle whose turn lost its process, or its id.

        Returns:
            Whether there was an orphaned turn to take over.

        Raises:
            UnknownHandle: ``h`` is not a handle of this tree.
        """
        return self._ownership.recover(self._tree.get(h).id)

    # --- spawn and post -----------------------------------------------------------------

    def spawn(self, parent: Handle | str, name: str, budget: Budget | None = None) -> Handle:
        """Create a child of ``parent`` running agent ``name``, in state ``idle``.

        Args:
            parent: the handle (or its id) the child is made under; ``rt.root`` for a run.
            name: the agent, by its registry name.
            budget: limits of its own, over the definition's; each is capped by what the
                parent has left.

        Returns:
            The child, whose id is ``<parent id>/<name>.<n>``.

        Raises:
            UnknownHandle: ``parent`` is not a handle of this tree.
            SpawnError: unknown agent, a closed parent, ``maxChildren``, ``maxDepth``, or
                an exhausted budget on the parent's chain; the message names which.
        """
        return self._spawner.spawn(self._tree.get(parent), name, budget)

    def post(self, h: Handle | str, text: str, *, sender: str = "external", channel: str = "external") -> None:
        """Leave ``text`` in the handle's inbox for its next turn; no state change.

        Args:
            h: the handle, or its id.
            text: the message.
            sender: who sent it (a handle id is trusted when it is an ancestor's).
            channel: where it came from, shown with it.

        Raises:
            UnknownHandle: ``h`` is not a handle of this tree.
            HandleClosed: the handle is closed or closing.
            InboxFull: the inbox holds ``inbox_cap`` items already.
        """
        post(self._tree, self._tree.get(h), InboxItem(sender=sender, channel=channel, text=text), self._inbox_cap)

    # --- wake and wait --------------------------------------------------------------------

    def wake(self, h: Handle | str, prompt: str | None = None) -> None:
        """Start a turn on an idle handle with ``prompt`` plus its whole inbox.

        A running handle ignores the wake (its inbox waits for the next turn); a
        suspended one waits for the Answer to its request. Over the parent's
        ``max_concurrent`` the wake queues until a sibling hands over its slot.

        Inline, the wake only admits the turn (the handle is ``running``, its inbox
        taken); the turn runs on the first thread that waits for it, and a ``close``
        before then interrupts it without waiting.

        Args:
            h: the handle, or its id.
            prompt: what the turn starts from, before the inbox; ``None`` for the inbox alone.

        Raises:
            UnknownHandle: ``h`` is not a handle of this tree.
            HandleClosed: the handle is closed or closing.
            ToolnexusError: ``h`` is the root, which runs no agent.
        """
        job = self._scheduler.wake(self._tree.get(h), prompt)
        if job is not None:
            self._execution.submit(job)

    def wait(self, h: Handle | str, timeout: float | None = None) -> AgentResult:
        """The next result of a busy handle, or the last one of a settled handle.

        With ``timeout`` (seconds) a result with ``status="timeout"`` comes back when
        nothing settled in time; the handle keeps running. Called from a tool (a pool
        thread), it runs a turn that no worker has started yet instead of blocking on it.

        Inline, the waiting thread runs the turn itself; as nothing else could carry the
        turn on, a ``timeout`` interrupts it at its next step (a model call or a tool
        call; a tool that is running is not preempted) and the result is ``timeout``.

        Args:
            h: the handle, or its id.
            timeout: seconds; ``None`` waits as long as it takes.

        Returns:
            The ``AgentResult``: ``done``, ``pending`` (its request in ``pending``),
            ``incomplete``, ``interrupted``, ``closed``, ``timeout`` or ``error``.

        Raises:
            UnknownHandle: ``h`` is not a handle of this tree.
            ToolnexusError: ``h`` is the root, which runs no agent.
        """
        handle = self._tree.get(h)
        if handle is self.root:
            raise ToolnexusError("the root handle runs no agent; wait on one of its children")
        run_here = self._inline or _jobs.inside_job()
        return self._waiter.next_result(handle, timeout, run_here=run_here, stop_at_deadline=self._inline)

    def agent_tool(self, name: str) -> Tool:
        """An agent as a plain tool for any toolkit: each call spawns it under the root,
        wakes it on the call's ``prompt``, waits and closes it. A run that ends pending
        suspends the calling tool with the agent's request, and the call that carries the
        answer resumes that same run.

        Args:
            name: the agent, by its registry name.

        Returns:
            The ``Tool`` (``{prompt}``), whose result is the agent's final text with
            ``{agent, turns, total_tokens}`` as metadata.

        Raises:
            SpawnError: no agent has that name.
        """
        return agent_tool(lambda: self, name, self.definition(name).does)

    def retry(self, h: Handle | str) -> None:
        """Try the handle's failed last turn again, from its journal: a turn that ended
        ``error`` because the model could not be reached or a commit failed (a resume's
        continuation included). Recorded replies are not asked again and finished tool
        calls (an approved one included) are not run again; a ``task`` call whose child
        failed tries the child again. Like ``wake``, it returns at once; ``wait`` for the
        result.

        Args:
            h: the handle, or its id.

        Raises:
            UnknownHandle: ``h`` is not a handle of this tree.
            ToolnexusError: the handle's last turn did not fail (or it is busy).
            HandleClosed: the handle is closed or closing.
        """
        job = self._scheduler.retry(self._tree.get(h))
        self._execution.submit(job)

    def run_agent(self, name: str, prompt: str, *, timeout: float | None = None) -> AgentResult:
        """Spawn ``name`` under the root, run one turn on ``prompt``, close it.

        A pending result leaves the handle open (suspended) for ``resume``. With
        ``timeout`` (seconds) the run is interrupted when time is up and the result has
        ``status="timeout"``: at once with worker threads, even while a tool is blocked
        (that tool's thread is not killed: it finishes on its own, and its result is
        dropped); inline, at the run's next step, since a tool blocking the calling
        thread cannot be preempted.

        Args:
            name: the agent, by its registry name.
            prompt: what its turn starts from.
            timeout: seconds; ``None`` waits as long as it takes.

        Returns:
            The run's ``AgentResult`` (``handle_id`` names the handle, for ``resume``).

        Raises:
            SpawnError: no agent has that name, or a budget refuses the spawn.
            StateError: the state failed while the run went on, so its outcome is not kept.
        """
        handle = self.spawn(self.root, name)
        if timeout is None:
            self._scheduler.wake(handle, prompt)  # run on this thread by the wait below: no hand-off
            result = self._port.settled(handle)
        else:
            self.wake(handle, prompt)  # on a worker, so that time can run out on it
            run_here = self._inline or _jobs.inside_job()
            result = self._waiter.next_result(handle, timeout, run_here=run_here, stop_at_deadline=True)
            if result.status == "timeout":
                self.interrupt(handle)  # time is up: the run does not go on in the background
        if result.status != "pending":
            if self._scheduler.abandoned(handle):
                raise StateError(f"the state store failed while {handle.id} ran: {result.text}")
            self.close(handle)
        return result

    def stream(
        self, h: Handle | str, *, after: str | None = None, timeout: float | None = None, end_at_rest: bool = False
    ) -> RunStream:
        """Watch ``h`` and its subtree: their events after ``after`` until ``h``'s first
        result after that point, whether it is kept already or still to come. While it
        watches, the model calls of the subtree stream their text; closing the stream only
        stops watching.

        Args:
            h: the handle to watch, or its id.
            after: an event id (from any process of a stored tree); ``None`` starts at the
                beginning of ``h``'s current turn, or of its next one when it is idle.
            timeout: seconds; when they are up the stream ends with a ``result`` of status
                ``timeout`` (the run goes on).
            end_at_rest: end also as soon as ``h`` rests (suspended on a request, settled
                with no turn to come, or closed) and every event after ``after`` has come,
                instead of waiting for a next turn; without ``after``, a settled handle then
                replays its last turn. A served stream that must never hold a thread while a
                person decides uses it (``toolnexus.sse`` does).

        Returns:
            A ``RunStream`` of ``Event``, whose ``result`` is ``h``'s result once it ends.

        Raises:
            ToolnexusError: ``after`` is not an event id a store can hold.
            UnknownHandle: ``h`` is not a handle of this tree.
        """
        return self._streams.watch(self._tree.get(h), after, timeout, rests=end_at_rest)

    def stream_agent(self, name: str, prompt: str, *, timeout: float | None = None) -> RunStream:
        """``run_agent`` as a stream: spawn ``name`` under the root, wake it on ``prompt``
        and yield its subtree's events until its result. A result other than ``pending``
        closes the handle (a pending one leaves it open for ``resume``); closing the stream
        early, or running out of time, interrupts the run first.

        Args:
            name: the agent, by its registry name.
            prompt: what its turn starts from.
            timeout: seconds; when they are up the stream ends with a ``timeout`` result.

        Returns:
            A ``RunStream`` of ``Event``, whose ``result`` is the run's ``AgentResult``.

        Raises:
            SpawnError: no agent has that name, or a budget refuses the spawn.
        """
        return self._streams.run_agent(name, prompt, timeout)

    def prune(self, older_than_s: float) -> int:
        """Delete finished runs (a child of the root with its descendants), each whole with
        its events, transcripts, journals and requests; nothing of a run still open. Without
        a state it lets them go from memory.

        Args:
            older_than_s: how long ago, in seconds, a run's top handle must have closed.

        Returns:
            How many handles it removed.

        Raises:
            ConfigError: ``older_than_s`` is negative, NaN or infinite.
        """
        before = time.time() - check_age(older_than_s)
        return len(self._tree.store.runs.prune(self._tree, before))

    # --- interrupt, resume, close -----------------------------------------------------------

    def interrupt(self, h: Handle | str, *, retryable: bool = False) -> None:
        """Abort the running turn (its inbox items go back), or cancel a pending request.

        The handle ends ``idle`` and waiters get ``status="interrupted"``; never a kill.
        ``retryable=True`` stops running turns only (this one's and its ``task`` children's),
        each keeping its journal so that ``retry`` continues it; a pending request stays open.

        Args:
            h: the handle, or its id.
            retryable: stop running turns only, keeping what they did for ``retry``.

        Raises:
            UnknownHandle: ``h`` is not a handle of this tree.
        """
        self._closer.interrupt(self._tree.get(h), retryable=retryable)

    def resume(self, answer: Answer) -> None:
        """Route ``answer`` to the deepest handle suspended on its request; that handle
        continues from its checkpoint and each parent above it replays its turn. Like
        ``wake``, it returns at once; ``wait`` for the result.

        Args:
            answer: the ``Answer`` to a request of ``open_requests()`` (``make_answer``).

        Raises:
            UnknownRequest: no handle is suspended on a request with ``answer.id`` (it was
                answered or cancelled already, or never asked).
        """
        self._execution.submit(*self._scheduler.resume(answer, None))

    def close(self, h: Handle | str, force: bool = False) -> None:
        """Stop ``h`` and its subtree, leaf-first. A running turn gets up to
        ``shutdown_timeout`` seconds to finish (none with ``force``), then is interrupted;
        each closed handle stays readable. Closing the root also ends every thread of the
        runtime: it returns once they have ended, or after ``shutdown_timeout`` plus one
        second with a warning naming those left. On a ``pool=``, what ends is the work the
        runtime gave the pool; its threads stay.

        Args:
            h: the handle, or its id; ``rt.root`` for the whole runtime.
            force: interrupt running turns at once.

        Raises:
            UnknownHandle: ``h`` is not a handle of this tree.
        """
        handle = self._tree.get(h)
        threads_by = lifecycle.threads_deadline(self._shutdown_s)
        deadline = self._clock() + self._shutdown_s
        self._closer.close_tree(handle, "closed", deadline, force)
        if handle is self.root:
            self._end(threads_by)
            self._let_go()

    def _end(self, deadline: float) -> None:
        tools = (tool for definition in self._registry.values() for tool in definition.tools)
        lifecycle.end(self._executor, self._turns.engine.model, tools, deadline)


def _deadline(clock: Callable[[], float], seconds: float) -> float:
    return clock() + seconds

