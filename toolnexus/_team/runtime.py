"""The agent runtime: a tree of handles driven by its verbs, on a pool of worker threads.

The runtime is its verbs and read-only views; each part it is made of has one owner:
a turn's life (admission, run, settle, slots, taking over an orphan) is ``scheduler.py``;
delegation (the ``task`` tool and its reattachment index) is ``task.py``; one turn's loop
and ledger, ``turns.py``; the wait behind ``wait``, ``run_agent`` and ``task``,
``waiting.py``; where the tree lives (memory or a state), the ``TreeStore`` of
``tree.py``; ending the runtime's threads, ``shutdown.py``. The lock order every verb
follows is set out once, in ``handle.py``. Blocking goes only upward: a parent waits on
its child, never the reverse.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import weakref
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Mapping

import attrs

from . import jobs as _jobs
from . import budget as budgets
from .._model import pricing
from .. import _seconds as seconds
from . import shutdown
from .._stores import storedruns
from .._run import tracing
from .._model.cancel import TurnGate
from .._tools.resources import close_resources
from .agentdef import AgentDef, call_lifecycle, normalize_registry
from .assembly import check_options, execution_for, make_executor, open_tree_store, weakly
from .closing import Closer
from ..data import AgentResult, Answer, Budget, HandleView, Request
from ..dispatch import Dispatcher
from .._model.engine import ConnectionOptions, build_engine
from ..errors import HandleClosed, InboxFull, SpawnError, StateError, ToolnexusError
from .handle import SUSPENDED, Handle, HandleRecord
from ..hooks import HooksLike
from .._run.runspec import Engine
from .pool import WorkerPool
from .record import InboxItem
from .scheduler import Scheduler
from .._stores.conversations import ConversationStore
from .._events.streams import RunStream, Streams
from .task import Delegation, agent_tool
from .._tools.tools import Tool
from .tree import HandleTree
from .turns import TurnRunner, check_priced
from .waiting import Waiter

if TYPE_CHECKING:
    import requests

    from ..state import StateStore

log = logging.getLogger("toolnexus")

ROOT = "root"


class Runtime:
    """Agents as handles in a tree, with hierarchical budgets, suspension and resume.

    Connection options are the ``Client``'s; ``registry`` maps agent names to
    ``AgentDef`` values (or dicts with the same keys). Use it as a context manager, or
    call ``close(rt.root)``: every thread it started has ended when that returns.

    ``inline=True`` starts no worker threads: every turn and tool call runs on the thread
    that waits for it (``run_agent``, ``wait``, a parent's ``task`` call), tool calls and
    ``task`` children one after another. ``around_tool`` is a context-manager factory
    entered around every tool call, on the thread that runs it.
    ``trace_content=True`` records prompt and completion text on the trace spans.
    ``dispatcher`` (with a ``state``; see ``toolnexus.celery``) hands every turn to other
    processes: ``wake`` and ``resume`` commit it as queued and send one message, and any
    runtime of the tree that claims it runs it.
    ``pool`` lends the runtime a ``WorkerPool``'s threads instead of starting its own:
    closing the root then waits for the work this runtime gave the pool, whose threads
    stay until the pool is closed.
    ``prices`` (US dollars per million tokens, by model name; see ``toolnexus.pricing``)
    gives every handle a cost and lets budgets cap it (``Budget(max_cost=...)``).

    Durations are seconds: ``timeout``, ``retry_base`` and ``max_retry_after`` as for the
    ``Client``; ``shutdown_timeout``, how long closing lets a running turn finish;
    ``lease``, how long a durable tree's owner may go without a heartbeat before another
    process takes its turns over. (``timeout_ms``, ``retry_base_ms``,
    ``max_retry_after_s``, ``shutdown_ms`` and ``lease_ms`` still work for this release,
    with a ``DeprecationWarning``.)
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
        **renamed_options: Any,
    ) -> None:
        given = {"retry_base": retry_base, "timeout": timeout, "max_retry_after": max_retry_after, "shutdown_timeout": shutdown_timeout, "lease": lease}
        times = seconds.renamed("Runtime", renamed_options, given)
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
        engine = Engine(model=build_engine(ConnectionOptions.among({**locals(), **times}), pool_size=workers), executor=lambda: executor)
        try:
            tree_store = open_tree_store(state, runtime_id, store)
            fresh = HandleRecord(id=ROOT, name=ROOT, parent=None, depth=0, budget=budgets.ROOT_BUDGET, nonce=os.urandom(16).hex())
            self.root = tree_store.open_root(fresh, set(self._registry), lambda record: Handle(record, None, tree_store))
        except BaseException:
            engine.model.close()
            raise
        self._tree = HandleTree(tree_store, self.root, weakly(self._load_handle), keep_closed)
        self._clock = clock or time.monotonic
        self._inbox_cap = inbox_cap
        self._execution = execution = make_execution(self._executor, self._tree, self._owner, self._clock)
        engine = attrs.evolve(engine, here_sources=execution.here_sources)
        self._delegation = Delegation(weakref.proxy(self), self._tree, execution.submit)
        gate = TurnGate(max_concurrent_turns) if max_concurrent_turns else None
        trace = tracing.Tracer(content=trace_content, provider=None if generate is not None else style)
        self._turns = self._turn_runner(engine, model=model, hooks=hooks, on_metric=on_metric, gate=gate, around_tool=around_tool, trace=trace, prices=price_table)
        self._scheduler = Scheduler(
            tree=self._tree, turns=self._turns, execution=execution, owner=self._owner, clock=self._clock,
            after_run=self._delegation.hand_over, before_settle=self._delegation.retire,
        )
        self._waiter = Waiter(
            tree=self._tree, turns=self._turns, execution=execution, run_turn=self._scheduler.run,
            interrupt=weakly(self.interrupt), inline=inline,
        )
        self._closer = Closer(self._tree, weakly(self.interrupt), self._clock, inline)
        self._streams = Streams(weakref.proxy(self), tree_store.stream_events, self._waiter, inline=inline)
        self._ownership = tree_store.ownership(self._owner, lease_s=lease_s, recover=recover, take_over=self._scheduler.take_over, on_beat=self._scheduler.on_beat)
        self._ownership.start()

    def __repr__(self) -> str:
        return f"Runtime(agents={sorted(self._registry)!r}, handles={len(self._tree)})"

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _turn_runner(self, engine: Engine, **options: Any) -> TurnRunner:
        store = self._tree.store
        return TurnRunner(engine=engine, store=store.conversations, clock=self._clock, lineage=self._tree.lineage, task_tool=self._delegation.task_tool, nonce=self.root.record.nonce, tree_store=store, owner=self._owner, **options)

    # --- the tree and its owner -----------------------------------------------------------

    def _load_handle(self, record: HandleRecord) -> Handle:
        """A handle made by another process (or before this runtime opened the tree)."""
        return Handle(record, self._registry.get(record.name), self._tree.store)

    def _atomic(self, *handles: Handle) -> ContextManager[Any]:
        """One unit of work around a change to ``handles`` (their locks held)."""
        return self._tree.store.change(*handles, dirty=False)

    def release(self) -> None:
        """Let go of a stored tree: end this runtime's threads, leave the stored tree as it
        is for any other runtime (or a later one) to continue. Without a state, closes."""
        if not self._tree.store.lasting:
            self.close(self.root)
            return
        if self._ownership.letting_go:
            return
        shutdown.cancel_running(self._tree.all())
        self._stop_workers(shutdown.threads_deadline(self._shutdown_s))
        self._let_go()

    def _let_go(self) -> None:
        shutdown.let_go(self._ownership, self._tree.store, self._shutdown_s)

    def recover(self, h: Handle | str) -> bool:
        """Continue an orphaned turn here from its journal (for ``recover="leave"``).

        Returns whether there was an orphaned turn to take over.
        """
        return self._ownership.recover(self._tree.get(h).id)

    # --- read-only views ----------------------------------------------------------------

    @property
    def conversation_store(self) -> ConversationStore:
        return self._tree.store.conversations

    @property
    def inline(self) -> bool:
        """Whether turns and tool calls run on the waiting thread (no worker threads)."""
        return self._inline

    def definition(self, name: str) -> AgentDef:
        try:
            return self._registry[name]
        except KeyError:
            raise SpawnError(f"unknown agent: {name!r}") from None

    def inspect(self, h: Handle | str) -> HandleView:
        handle = self._tree.get(h)
        with handle.lock:
            handle.sync()
            return handle.view()

    def budget(self, h: Handle | str) -> Budget:
        """The handle's effective budget, as carved at spawn."""
        return self._tree.get(h).record.budget

    def handles(self) -> list[HandleView]:
        """The live handles and at most ``keep_closed`` most recently closed ones, root
        first, then pre-order with children in spawn order (an older closed handle stays
        readable by id through ``inspect``, until ``prune`` removes it)."""
        return self._tree.listing()

    def prune(self, older_than_s: float) -> int:
        """Delete the finished runs (a child of the root with its descendants) whose top
        handle closed more than ``older_than_s`` seconds ago, each whole with its events,
        transcripts, journals and requests; nothing of a run still open. Without a state it
        lets them go from memory. Returns how many handles it removed.

        Raises:
            ConfigError: ``older_than_s`` is negative, NaN or infinite.
        """
        before = time.time() - storedruns.check_age(older_than_s)
        return len(self._tree.store.prune(self._tree, before))

    def transitions(self, h: Handle | str) -> list[str]:
        handle = self._tree.get(h)
        with handle.lock:
            handle.sync()
            return list(handle.record.transitions)

    def events(self) -> list[dict[str, Any]]:
        return self._tree.store.events()

    def open_requests(self) -> list[Request]:
        """Every request waiting for an ``resume``, once each (as the asking handle has it)."""
        return self._tree.store.open_requests()

    def keep_connections(self) -> tuple[Any, Callable[[], None]] | None:
        """A hold on the model endpoint's pooled connections that outlives ``close``:
        ``(endpoint, release)``, or None when there is nothing to keep."""
        return self._turns.engine.model.keep_connections()

    def metrics(self) -> str:
        """Prometheus text for every agent's model and tool calls."""
        return self._turns.metrics.render()

    # --- spawn and post -----------------------------------------------------------------

    def spawn(self, parent: Handle | str, name: str, budget: Budget | None = None) -> Handle:
        """Create a child of ``parent`` running agent ``name``, in state ``idle``.

        Raises:
            SpawnError: unknown agent, a closed parent, ``maxChildren``, ``maxDepth``, or
                an exhausted budget on the parent's chain; the message names which.
        """
        owner = self._tree.get(parent)
        definition = self._spawnable(owner, name)
        with owner.lock, self._atomic(owner):
            child = self._add_child(owner, definition, budget)
        call_lifecycle(definition.on_spawn, child)
        return child

    def spawn_woken(self, parent: Handle, agent: str, prompt: str, serial: int, call_id: str) -> Handle:
        """A ``task`` call's child: spawned, named in ``parent``'s index for turn ``serial``
        and woken on ``prompt``, in one unit of work (a process killed at any point leaves
        all of it or none). Its turn waits for the task call to run it (or, with a
        dispatcher, for whichever worker claims it first)."""
        definition = self._spawnable(parent, agent)
        trace = tracing.capture()  # the child's turn nests in the task call's span
        with parent.lock, self._atomic(parent):
            child = self._add_child(parent, definition, None)
            self._tree.store.emit(parent.id, "spawn", {"child": child.id, "agent": agent, "prompt": prompt})
            parent.remember_task((agent, prompt), serial, child.id, call_id)
            with child.lock:
                job = self._scheduler.admit(parent, child, prompt, trace)
        call_lifecycle(definition.on_spawn, child)
        if job is not None:
            self._execution.offer(job)
        return child

    def _spawnable(self, owner: Handle, name: str) -> AgentDef:
        definition = self.definition(name)
        spent = self._turns.chain_limit(owner)
        if spent is not None:
            raise SpawnError(budgets.exhausted(spent, owner.id))
        return definition

    def _add_child(self, owner: Handle, definition: AgentDef, budget: Budget | None) -> Handle:
        """The new child (``owner``'s lock held, in its unit of work)."""
        record = owner.record
        refused = budgets.spawn_refusal(record.budget, parent_id=record.id, accepting=owner.accepting, children=len(record.children), depth=record.depth)
        if refused is not None:
            raise SpawnError(refused)
        carved = budgets.carve(budgets.merge(definition.budget, budget), record.budget, record.tokens, record.pool_tool_calls, record.cost or 0.0)
        check_priced(self._registry, self._turns.model, self._turns.prices, definition.name, carved)
        child_id = f"{record.id}/{definition.name}.{owner.next_child_number()}"
        child = Handle(HandleRecord(id=child_id, name=definition.name, parent=record.id, depth=record.depth + 1, budget=carved), definition, self._tree.store)
        with child.lock, self._tree.store.change(child):  # the new row
            owner.add_child(child_id)
        self._tree.add(child)
        self._tree.event("spawn", child.id, parent=owner.id, agent=definition.name)
        return child

    def post(self, h: Handle | str, text: str, *, sender: str = "external", channel: str = "external") -> None:
        """Leave ``text`` in the handle's inbox for its next turn; no state change.

        Raises:
            HandleClosed: the handle is closed or closing.
            InboxFull: the inbox holds ``inbox_cap`` items already.
        """
        handle = self._tree.get(h)
        with handle.lock, self._atomic(handle):
            if not handle.accepting:
                problem: ToolnexusError = HandleClosed(f"closed: {handle.id} accepts no posts")
            elif len(handle.record.inbox) >= self._inbox_cap:
                problem = InboxFull(f"inbox full: {handle.id} holds {self._inbox_cap} items")
            else:
                handle.accept_post(InboxItem(sender=sender, channel=channel, text=text))
                return
        self._tree.event("post_rejected", handle.id, reason=str(problem), sender=sender)
        raise problem

    # --- wake and wait --------------------------------------------------------------------

    def wake(self, h: Handle | str, prompt: str | None = None) -> None:
        """Start a turn on an idle handle with ``prompt`` plus its whole inbox.

        A running handle ignores the wake (its inbox waits for the next turn); a
        suspended one waits for the Answer to its request. Over the parent's
        ``max_concurrent`` the wake queues until a sibling hands over its slot.

        Inline, the wake only admits the turn (the handle is ``running``, its inbox
        taken); the turn runs on the first thread that waits for it, and a ``close``
        before then interrupts it without waiting.

        Raises:
            HandleClosed: the handle is closed or closing.
        """
        job = self._scheduler.wake(self._tree.get(h), prompt)
        if job is not None:
            self._execution.submit(job)

    def run_dispatched(self, runtime_id: str, handle_id: str, serial: int, segment: int) -> bool:
        """Run the queued turn a dispatcher's message names, here and now (a worker's side).

        Returns false, doing nothing, when the turn is not queued any more: claimed by
        another runtime, finished, interrupted, or the message was for another tree.
        """
        return self._execution.run_sent(runtime_id, handle_id, serial, segment, self._scheduler.run)

    def wait(self, h: Handle | str, timeout: float | None = None) -> AgentResult:
        """The next result of a busy handle, or the last one of a settled handle.

        With ``timeout`` (seconds) a result with ``status="timeout"`` comes back when
        nothing settled in time; the handle keeps running. Called from a tool (a pool
        thread), it runs a turn that no worker has started yet instead of blocking on it.

        Inline, the waiting thread runs the turn itself; as nothing else could carry the
        turn on, a ``timeout`` interrupts it at its next step (a model call or a tool
        call; a tool that is running is not preempted) and the result is ``timeout``.
        """
        handle = self._tree.get(h)
        if handle is self.root:
            raise ToolnexusError("the root handle runs no agent; wait on one of its children")
        return self._waiter.next_result(handle, timeout, run_here=self._inline or _jobs.inside_job(), stop_at_deadline=self._inline)

    def settled(self, handle: Handle) -> AgentResult:
        """Wait for a handle to settle, running its turn here if no worker has it."""
        return self._waiter.next_result(handle, None, run_here=True)

    def resume_below(self, answer: Answer, child: Handle) -> None:
        self._resume_chain(answer, top=child)

    def close_child(self, child: Handle, *, force: bool) -> None:
        self._closer.close_tree(child, "task settled", self._clock() + self._shutdown_s, force=force)

    def agent_tool(self, name: str) -> Tool:
        """The agent ``name`` as a plain ``{prompt}`` tool for any toolkit."""
        self.definition(name)
        return agent_tool(self, name)

    def retry(self, h: Handle | str) -> None:
        """Try the handle's failed last turn again, from its journal: a turn that ended
        ``error`` because the model could not be reached or a commit failed (a resume's
        continuation included). Recorded replies are not asked again and finished tool
        calls (an approved one included) are not run again; a ``task`` call whose child
        failed tries the child again. Like ``wake``, it returns at once; ``wait`` for the
        result.

        Raises:
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
        """
        handle = self.spawn(self.root, name)
        if timeout is None:
            self._scheduler.wake(handle, prompt)  # run on this thread by the wait below: no hand-off
            result = self.settled(handle)
        else:
            self.wake(handle, prompt)  # on a worker, so that time can run out on it
            result = self._waiter.next_result(handle, timeout, run_here=self._inline or _jobs.inside_job(), stop_at_deadline=True)
            if result.status == "timeout":
                self.interrupt(handle)  # time is up: the run does not go on in the background
        if result.status != "pending":
            if self._scheduler.abandoned(handle):
                raise StateError(f"the state store failed while {handle.id} ran: {result.text}")
            self.close(handle)
        return result

    def stream(self, h: Handle | str, *, after: str | None = None, timeout: float | None = None) -> RunStream:
        """The events of ``h``'s subtree after event id ``after`` (or from the start of its
        current turn, or its next one) until ``h``'s result: see ``streams.Streams.watch``."""
        return self._streams.watch(self._tree.get(h), after, timeout)

    def stream_agent(self, name: str, prompt: str, *, timeout: float | None = None) -> RunStream:
        """``run_agent`` as a stream: see ``streams.Streams.run_agent``."""
        return self._streams.run_agent(name, prompt, timeout)

    # --- interrupt, resume, close -----------------------------------------------------------

    def interrupt(self, h: Handle | str, *, retryable: bool = False) -> None:
        """Abort the running turn (its inbox items go back), or cancel a pending request.

        The handle ends ``idle`` and waiters get ``status="interrupted"``; never a kill.
        ``retryable=True`` stops running turns only (this one's and its ``task`` children's),
        each keeping its journal so that ``retry`` continues it; a pending request stays open.
        """
        handle = self._tree.get(h)
        parent = self._tree.parent(handle)
        locked = (parent, handle) if parent is not None else (handle,)
        with parent.lock if parent is not None else _NOTHING, handle.lock, self._atomic(*locked):
            outcome = handle.interrupt(parent, self._turns.turn_calls, retryable=retryable)
        cancelled_request = outcome.request
        if outcome.settling is not None:
            settling, record = outcome.settling, handle.record
            with handle.lock:
                handle.changed.wait_for(lambda: handle.turn is not settling, timeout=self._shutdown_s)
                if record.state == SUSPENDED and record.pending is not None and not retryable:
                    cancelled_request = record.pending.id  # it settled pending: cancelled, as any suspended handle
        if outcome.cancel is not None:
            outcome.cancel.scope.cancel()
        if outcome.ended is not None:
            self._scheduler.release_slot(handle)  # the turn's runner, wherever it is, publishes nothing now
            for child in self._delegation.children(handle, outcome.ended):
                self.interrupt(child, retryable=retryable)
        if cancelled_request is not None:
            self._cancel_request(cancelled_request)

    def _cancel_request(self, request_id: str) -> None:
        """Every handle suspended on ``request_id`` goes back to idle; the id is dead."""
        self._tree.store.unpark(request_id, "cancelled")
        for handle in self._tree.suspended_on(request_id):
            with handle.lock, self._atomic(handle):
                handle.cancel(request_id)

    def resume(self, answer: Answer) -> None:
        """Route ``answer`` to the deepest handle suspended on its request; that handle
        continues from its checkpoint and each parent above it replays its turn.

        Raises:
            UnknownRequest: no handle is suspended on a request with ``answer.id``.
        """
        self._resume_chain(answer, top=None)

    def _resume_chain(self, answer: Answer, top: Handle | None) -> None:
        self._execution.submit(*self._scheduler.resume(answer, top))

    def close(self, h: Handle | str, force: bool = False) -> None:
        """Stop ``h`` and its subtree, leaf-first. A running turn gets up to
        ``shutdown_timeout`` seconds to finish (none with ``force``), then is interrupted.
        Closing the root also ends every thread of the runtime: it returns once they have
        ended, or after ``shutdown_timeout`` plus one second with a warning naming those left. On a
        ``pool=``, what ends is the work the runtime gave the pool; its threads stay."""
        handle = self._tree.get(h)
        threads_by = shutdown.threads_deadline(self._shutdown_s)
        deadline = self._clock() + self._shutdown_s
        self._closer.close_tree(handle, "closed", deadline, force)
        if handle is self.root:
            self._stop_workers(threads_by)
            self._let_go()

    def _stop_workers(self, deadline: float) -> None:
        shutdown.stop_workers(self._executor, self._turns.engine.model, deadline)
        close_resources(tool for definition in self._registry.values() for tool in definition.tools)

#: A context that does nothing: no parent lock at the root (reentrant, so one serves every use).
_NOTHING: ContextManager[Any] = contextlib.nullcontext()
