"""The agent runtime: a tree of handles driven by six verbs, on a pool of worker threads.

Each handle runs its turns on a ``concurrent.futures`` worker. A thread that must block
on a child's turn (the ``task`` tool, ``run_agent``) runs that turn itself when no worker
has started it yet, so blocked parents can never starve their children of workers.
Blocking goes only upward: a parent waits on its child, never the reverse.

The lock order every verb follows is set out once, in ``handle.py``. A durable tree's
owner registration, heartbeat and orphan recovery live in ``ownership.py``; the wait
loop behind ``wait``, ``run_agent`` and ``task``, in ``waiting.py``; ending the runtime's
threads and letting go of its tree, in ``shutdown.py``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Mapping

import attrs

from . import _jobs, budget as budgets, shutdown, tracing
from .agentdef import AgentDef, normalize_registry
from .inbox import ancestry, render_input
from .engine import ConnectionOptions, build_engine
from .loop import Engine
from ._cancel import TurnGate
from ._closing import close_resources
from .dispatch import Dispatcher, Dispatching
from .data import AgentResult, Answer, Budget, HandleView, Request, RunResult, ToolResult
from .errors import Cancelled, ConfigError, HandleClosed, InboxFull, SpawnError, ToolnexusError, UnknownHandle, UnknownRequest
from .handle import CLOSED, IDLE, RUNNING, SUSPENDED, Handle, HandleRecord, Turn
from .record import InboxItem
from .hooks import HooksLike
from .ownership import RECOVER_OPTIONS
from .pool import DEFAULT_WORKERS, Lent, WorkerPool
from .store import ConversationStore
from .task import agent_tool, result_as_tool_output, task_tool
from .tree import HandleTree, MemoryTree, TreeStore
from .turns import TurnRunner
from .waiting import Waiter, runnable
from .tools import Tool, ToolContext, failure
from .wire import to_wire

if TYPE_CHECKING:
    import requests

    from .state import StateStore

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
        retry_base_ms: int = 500,
        timeout_ms: int | None = None,
        max_retry_after_s: float = 60,
        request_params: dict[str, Any] | None = None,
        store: ConversationStore | None = None,
        clock: Callable[[], float] | None = None,
        inbox_cap: int = 64,
        max_concurrent_turns: int | None = None,
        shutdown_ms: int = 5000,
        hooks: HooksLike = None,
        on_metric: Callable[[dict[str, Any]], Any] | None = None,
        max_workers: int | None = None,
        state: str | os.PathLike[str] | StateStore | None = None,
        runtime_id: str = "default",
        lease_ms: int = 15000,
        recover: str = "resume",
        keep_closed: int = 1000,
        inline: bool = False,
        around_tool: Callable[[], ContextManager[Any]] | None = None,
        trace_content: bool = False,
        dispatcher: Dispatcher | None = None,
        pool: WorkerPool | None = None,
    ) -> None:
        self._registry = normalize_registry(registry)
        if state is not None and store is not None:
            raise ConfigError("give store= or state=, not both: with a state, transcripts live in it")
        if dispatcher is not None and state is None:
            raise ConfigError("a dispatcher runs turns in other processes: it needs a state= they share")
        if recover not in RECOVER_OPTIONS:
            raise ConfigError(f"recover must be one of {', '.join(RECOVER_OPTIONS)}, not {recover!r}")
        if lease_ms <= 0:
            raise ConfigError(f"lease_ms must be positive, not {lease_ms}")
        if keep_closed < 0:
            raise ConfigError(f"keep_closed must be 0 or more, not {keep_closed}")
        self._owner = os.urandom(16).hex()  # this runtime object, as the owner of the turns it runs
        # The engine first: bad connection options fail before the state is touched.
        if pool is not None and max_workers is not None:
            raise ConfigError("give max_workers= or pool=, not both: a pool has its own size")
        workers = pool.max_workers if pool is not None else max_workers or DEFAULT_WORKERS
        self._inline = inline
        # Inline: no pool at all; a turn runs on the thread that waits for it.
        self._executor: ThreadPoolExecutor | Lent | None
        if inline:
            self._executor = None
        elif pool is not None:
            self._executor = pool.lend()
        else:
            self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="toolnexus")
        executor = self._executor
        engine = Engine(model=build_engine(ConnectionOptions.among(locals()), pool_size=workers), executor=lambda: executor)
        try:
            tree_store = open_tree_store(state, runtime_id, store)
            fresh = HandleRecord(id=ROOT, name=ROOT, parent=None, depth=0, budget=budgets.ROOT_BUDGET, nonce=os.urandom(16).hex())
            self.root = tree_store.open_root(fresh, set(self._registry), lambda record: Handle(record, None, tree_store))
        except BaseException:
            engine.model.close()
            raise
        self._tree = HandleTree(tree_store, self.root, _weakly(self._load_handle), keep_closed)
        self._clock = clock or time.monotonic
        self._inbox_cap = inbox_cap
        self._shutdown_s = shutdown_ms / 1000
        self._store: ConversationStore = tree_store.conversations
        if dispatcher is not None:
            # A delegation runs on the turn's own (worker) thread, so the children it woke run
            # on other workers while it waits; the turn's other tool calls run on the pool.
            engine = attrs.evolve(engine, here_sources=frozenset({"agent"}))
        self._turns = TurnRunner(
            engine=engine,
            store=self._store,
            model=model,
            hooks=hooks,
            on_metric=on_metric,
            gate=TurnGate(max_concurrent_turns) if max_concurrent_turns else None,
            clock=self._clock,
            lineage=self._tree.lineage,
            task_tool=_weakly(self._task_tool),
            nonce=self.root.record.nonce,
            tree_store=tree_store,
            owner=self._owner,
            around_tool=around_tool,
            trace=tracing.Tracer(content=trace_content, provider=None if generate is not None else style),
        )
        # With a dispatcher, turns are queued in the state and run by whichever runtime claims them.
        self._dispatching: Dispatching | None = None
        if dispatcher is not None:
            self._dispatching = tree_store.dispatching(dispatcher, self._tree, self._owner)
        self._waiter = Waiter(
            tree=self._tree,
            turns=self._turns,
            dispatching=self._dispatching,
            clock=self._clock,
            run_turn=_weakly(self._run_turn),
            interrupt=_weakly(self.interrupt),
            inline=inline,
        )
        on_beat = self._dispatching.resend_stale if self._dispatching is not None else None
        self._ownership = tree_store.ownership(self._owner, lease_s=lease_ms / 1000, recover=recover, take_over=self._take_over, on_beat=on_beat)
        self._ownership.start()

    def __repr__(self) -> str:
        return f"Runtime(agents={sorted(self._registry)!r}, handles={len(self._tree)})"

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    # --- the tree store -------------------------------------------------------------------

    def _task_tool(self, handle: Handle, serial: int) -> Tool:
        return task_tool(self, handle, serial)

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

    # --- taking over orphaned turns (see ownership.py) ------------------------------------------

    def recover(self, h: Handle | str) -> bool:
        """Continue an orphaned turn here from its journal (for ``recover="leave"``).

        Returns whether there was an orphaned turn to take over.
        """
        return self._ownership.recover(self._tree.get(h).id)

    def _take_over(self, handle_id: str, dead_owner: str | None, mode: str) -> bool:
        """Claim the turn of ``handle_id`` from its dead owner (compare-and-set on the owner)."""
        handle = self._tree.get(handle_id)
        parent = self._tree.parent(handle)
        assert parent is not None
        job = None
        with parent.lock, handle.lock, self._atomic(parent, handle):
            record = handle.record
            owner = record.running.owner if record.running is not None else None
            if record.state != RUNNING or owner != dead_owner or handle.turn is not None:
                return False  # finished, interrupted or claimed by someone else meanwhile
            if mode == "interrupt":
                handle.abort()
            elif self._dispatching is not None:
                job = self._dispatching.requeue(handle)  # a worker takes it over from its journal
            else:
                turn = handle.stored_turn()
                turn.job = job = _jobs.Job(lambda: self._run_turn(handle, turn))
                handle.take_over(turn, self._clock(), self._owner)
            self._tree.event("recovered", handle.id, mode=mode, owner=dead_owner)
        if job is None:
            self._release_slot(handle)
        else:
            self._dispatch(job)
        return True

    # --- handing admitted turns over to run ---------------------------------------------------

    def _dispatch(self, *jobs: _jobs.Job) -> None:
        """Hand admitted turns over to run: the only place that does. Here that is this
        runtime's pool (or, inline, the first thread that waits). Every admitted turn is
        already in the state with its owner, input and serial, and ``_take_over`` claims a
        stored turn by compare-and-set on its owner: a dispatcher that runs turns in other
        processes plugs in at these two points: with one, a job sends the turn's message."""
        for job in jobs:
            if self._dispatching is not None:
                job.run()
            else:
                _jobs.submit(self._executor, job)

    # --- read-only views ----------------------------------------------------------------

    @property
    def conversation_store(self) -> ConversationStore:
        return self._store

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
        """Every handle, root first, then pre-order with children in spawn order."""
        return [self.inspect(handle) for handle in self._tree.walk(self.root)]

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
        definition = self.definition(name)
        spent = self._turns.chain_limit(owner)
        if spent is not None:
            raise SpawnError(f"budget exhausted: {spent} of {owner.id} or an ancestor is spent")
        with owner.lock, self._atomic(owner):
            child = self._add_child(owner, definition, budget)
            self._tree.event("spawn", child.id, parent=owner.id, agent=name)
        self._call_user(definition.on_spawn, child)
        return child

    def _add_child(self, owner: Handle, definition: AgentDef, budget: Budget | None) -> Handle:
        record = owner.record
        if not owner.accepting:
            raise SpawnError(f"closed: {record.id} does not accept new children")
        cap = record.budget.max_children
        if cap is not None and len(record.children) >= cap:
            raise SpawnError(f"maxChildren: {record.id} already has {cap} children")
        depth = record.depth + 1
        if depth > budgets.max_depth(record.budget):
            raise SpawnError(f"maxDepth: a child of {record.id} would be at depth {depth} (max {budgets.max_depth(record.budget)})")
        own = budgets.merge(definition.budget, budget)
        carved = budgets.carve(own, record.budget, record.tokens, record.pool_tool_calls)
        child_id = f"{record.id}/{definition.name}.{owner.next_child_number()}"
        child = Handle(HandleRecord(id=child_id, name=definition.name, parent=record.id, depth=depth, budget=carved), definition, self._tree.store)
        with child.lock, self._tree.store.change(child):  # the new row
            owner.add_child(child_id)
        self._tree.add(child)
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

    # --- wake and the turn ----------------------------------------------------------------

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
        job = self._wake(self._tree.get(h), prompt)
        if job is not None:
            self._dispatch(job)

    def _wake(self, handle: Handle, prompt: str | None) -> _jobs.Job | None:
        """``wake`` without handing the turn to a worker: for a caller about to wait on it,
        which then runs it on its own thread (no hand-off)."""
        parent = self._tree.parent(handle)
        if parent is None:
            raise ToolnexusError("the root handle runs no agent; spawn a child and wake that")
        trace = tracing.capture()  # the turn nests here, whichever thread runs it
        with parent.lock, handle.lock, self._atomic(parent, handle):
            return self._admit(parent, handle, prompt, trace)

    def _admit(self, parent: Handle, handle: Handle, prompt: str | None, trace: tracing.Carrier | None) -> _jobs.Job | None:
        """Check, take a slot and flip to running as one step (both locks held)."""
        if not handle.accepting:
            raise HandleClosed(f"closed: {handle.id} cannot be woken")
        if handle.busy or handle.record.state == SUSPENDED:
            return None
        if parent is not self.root and not parent.take_slot(self._slot_cap(parent)):
            handle.enqueue(prompt, trace)
            parent.queue_wake(handle.id)
            self._tree.event("wake_queued", handle.id, parent=parent.id)
            return None
        return self._start_turn(handle, prompt, trace)

    def _slot_cap(self, parent: Handle) -> int | None:
        return budgets.max_concurrent(parent.record.budget) if parent is not self.root else None

    def _start_turn(self, handle: Handle, prompt: str | None, trace: tracing.Carrier | None) -> _jobs.Job:
        text = render_input(prompt, handle.record.inbox, ancestry(handle.id))
        return self._begin(handle, handle.start(prompt, text, trace))

    def _begin(self, handle: Handle, turn: Turn) -> _jobs.Job:
        if self._dispatching is not None:
            return self._dispatching.queue(handle, turn)
        turn.job = _jobs.Job(lambda: self._run_turn(handle, turn))
        handle.begin(turn, self._clock(), self._owner)
        return turn.job

    def run_dispatched(self, runtime_id: str, handle_id: str, serial: int, segment: int) -> bool:
        """Run the queued turn a dispatcher's message names, here and now (a worker's side).

        Returns false, doing nothing, when the turn is not queued any more: claimed by
        another runtime, finished, interrupted, or the message was for another tree.
        """
        if self._dispatching is None:
            raise ConfigError("run_dispatched needs a Runtime built with state= and dispatcher=")
        if runtime_id != self._tree.store.runtime_id:
            log.warning("a turn message for tree %r reached the runtime of tree %r; ignored", runtime_id, self._tree.store.runtime_id)
            return False
        try:
            handle = self._tree.get(handle_id)
        except UnknownHandle:
            return False
        with handle.lock:
            handle.sync()
            job = self._dispatching.claim(handle, self._clock(), self._run_turn, serial, segment)
        if job is None:
            return False
        job.run()
        return True

    def _run_turn(self, handle: Handle, turn: Turn) -> None:
        started = time.perf_counter()
        error: str | None = None
        try:
            result, run = self._execute(handle, turn)
        except Cancelled:
            with handle.lock:  # interrupted (here, or from another process): it published
                handle.lose(turn)
            return
        except Exception as exc:  # a failed turn is a result, never an exception upward
            log.debug("turn of %s failed", handle.id, exc_info=True)
            result, run, error = self._turns.failed(handle, turn, exc), None, type(exc).__name__
        except BaseException as exc:  # SystemExit in a tool: settle so no waiter hangs, then go on up
            self._settle(handle, turn, self._turns.failed(handle, turn, exc), None)
            raise
        self._settle(handle, turn, result, run)
        self._turns.emit_run(handle, result, run, started, error)

    def _execute(self, handle: Handle, turn: Turn) -> tuple[AgentResult, RunResult | None]:
        try:
            return self._turns.execute(handle, turn)
        finally:
            self._hand_over_task_children(handle, turn.serial)

    def _settle(self, handle: Handle, turn: Turn, result: AgentResult, run: RunResult | None) -> None:
        """Publish a finished turn: save the transcript, flip the state, free the slot."""
        pending = result.status == "pending" and result.pending is not None
        with handle.lock:
            if not handle.mark_settling(turn, self._owner):
                return  # interrupted meanwhile; the interrupt published already
        if not pending:
            self._retire_task_children(handle, turn.serial)
        saving = self._tree.store.saving_transcript(handle.id, run.messages) if run is not None and not pending else _NO_TRANSCRIPT
        with saving as save, handle.lock, self._atomic(handle):
            save()  # the transcript lands with the outcome (see TreeStore.saving_transcript)
            if pending:
                suspended = handle.suspend(turn, result, run.messages if run is not None else None)
                self._tree.store.park(suspended.pending, handle.id)  # type: ignore[arg-type]
            else:
                handle.finish(turn, result)
        self._release_slot(handle)

    def _hand_over_task_children(self, handle: Handle, serial: int) -> None:
        """A ``task`` child is woken for its caller to run (caller-runs); if the turn ended
        before waiting on it (a failure, an interrupt), a worker runs it instead."""
        for child in self._task_children(handle, serial):
            with child.lock:
                job = child.turn.job if runnable(child) else None  # type: ignore[union-attr]
            if job is not None:
                self._dispatch(job)

    def _retire_task_children(self, handle: Handle, serial: int) -> None:
        """A finished turn leaves no delegated child waiting: a child still suspended
        (its request was declined upstream) has its request cancelled and is closed."""
        for child in self._task_children(handle, serial):
            with child.lock:
                waiting = child.record.state == SUSPENDED
            if waiting:
                self._close_tree(child, "task settled", self._clock() + self._shutdown_s, force=True)

    def _release_slot(self, handle: Handle) -> None:
        """Give the finished turn's slot to the next queued sibling, if any."""
        parent = self._tree.parent(handle)
        if parent is None or parent is self.root:
            return  # the root caps nothing: its children's turns take no slot
        jobs = []
        with parent.lock:
            record = parent.record
            with self._atomic(parent):
                parent.free_slot()
            cap = self._slot_cap(parent)
            while record.wake_queue and (cap is None or record.running_children < cap):
                sibling = self._tree.get(record.wake_queue[0])
                with sibling.lock, self._atomic(parent, sibling):
                    parent.drop_wake(sibling.id)
                    if not sibling.record.queued:
                        continue
                    parent.take_slot(cap)
                    wake = sibling.dequeue()
                    jobs.append(self._start_turn(sibling, wake.prompt, wake.trace))
                    self._tree.event("wake_dequeued", sibling.id, parent=parent.id)
        self._dispatch(*jobs)

    # --- wait and delegation --------------------------------------------------------------

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

    def _await(self, handle: Handle) -> AgentResult:
        """Wait for a handle to settle, running its turn here if no worker has it."""
        return self._waiter.next_result(handle, None, run_here=True)

    def task_child(self, parent: Handle, serial: int, agent: str, prompt: str, call_id: str = "") -> Handle | ToolResult:
        """The child for one ``task`` call: reattached by key within the turn ``serial``,
        or spawned and woken. A child that ended ``error``, ``interrupted`` or ``timeout``
        is not reattached by another call: that repeated call is a retry and runs a fresh
        child, which the index then names (the same call, replayed after a resume or a
        crash, still reattaches). A refused spawn is an error result."""
        key = (agent, prompt)
        with parent.task_lock:
            with parent.lock:
                parent.sync()
                entry = parent.task_entry(key, serial)
            child = self._tree.get(entry.child) if entry is not None else None
            if child is not None and entry is not None and (not call_id or entry.call != call_id) and _ended_in_failure(child):
                child = None
            if child is None:
                try:
                    child = self.spawn(parent, agent)
                    with parent.lock, self._atomic(parent):
                        parent.remember_task(key, serial, child.id, call_id)
                    job = self._wake(child, prompt)  # run by the task call that waits on it,
                    if job is not None and self._dispatching is not None:
                        self._dispatch(job)  # or, with a dispatcher, by any worker that claims it first
                except (SpawnError, HandleClosed) as exc:
                    return failure(f"cannot delegate to {agent}: {exc}")
                return child
        self._tree.event("reattach", child.id, parent=parent.id, state=self.inspect(child).state)
        return child

    def delegate(self, parent: Handle, serial: int, agent: str, prompt: str, ctx: ToolContext) -> ToolResult:
        """One ``task`` call: spawn, wake, wait and close fused, reattaching by key."""
        child = ctx.prepared if isinstance(ctx.prepared, (Handle, ToolResult)) else self.task_child(parent, serial, agent, prompt, ctx.call_id or "")
        if isinstance(child, ToolResult):
            return child
        result = self._child_result(child, ctx)
        if result.status != "pending":
            self._close_tree(child, "task settled", self._clock() + self._shutdown_s, force=False)
        return result_as_tool_output(agent, result)

    def _child_result(self, child: Handle, ctx: ToolContext) -> AgentResult:
        with child.lock:
            record = child.record
            answer_fits = ctx.answer is not None and record.pending is not None and ctx.answer.id == record.pending.id
            if record.state == SUSPENDED and not answer_fits:
                return record.result  # type: ignore[return-value]
        if answer_fits:
            self._resume_chain(ctx.answer, top=child)  # type: ignore[arg-type]
        return self._await(child)

    def agent_tool(self, name: str) -> Tool:
        """The agent ``name`` as a plain ``{prompt}`` tool for any toolkit."""
        self.definition(name)
        return agent_tool(self, name)

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
            self._wake(handle, prompt)  # run on this thread by the wait below: no hand-off
            result = self._await(handle)
        else:
            self.wake(handle, prompt)  # on a worker, so that time can run out on it
            result = self._waiter.next_result(handle, timeout, run_here=self._inline or _jobs.inside_job(), stop_at_deadline=True)
            if result.status == "timeout":
                self.interrupt(handle)  # time is up: the run does not go on in the background
        if result.status != "pending":
            self.close(handle)
        return result

    # --- interrupt, resume, close -----------------------------------------------------------

    def interrupt(self, h: Handle | str) -> None:
        """Abort the running turn (its inbox items go back), or cancel a pending request.

        The handle ends ``idle`` and waiters get ``status="interrupted"``; never a kill.
        """
        handle = self._tree.get(h)
        parent = self._tree.parent(handle)
        locked = (parent, handle) if parent is not None else (handle,)
        with parent.lock if parent is not None else _NOTHING, handle.lock, self._atomic(*locked):
            outcome = handle.interrupt(parent, self._turns.turn_calls)
        cancelled_request = outcome.request
        if outcome.settling is not None:
            settling, record = outcome.settling, handle.record
            with handle.lock:
                handle.changed.wait_for(lambda: handle.turn is not settling, timeout=self._shutdown_s)
                if record.state == SUSPENDED and record.pending is not None:
                    cancelled_request = record.pending.id  # it settled pending: cancel that, as on any suspended handle
        if outcome.cancel is not None:
            outcome.cancel.scope.cancel()
        if outcome.ended is not None:
            self._release_slot(handle)  # the turn's runner, wherever it is, publishes nothing now
            for child in self._task_children(handle, outcome.ended):
                self.interrupt(child)
        if cancelled_request is not None:
            self._cancel_request(cancelled_request)

    def _task_children(self, handle: Handle, serial: int) -> list[Handle]:
        with handle.task_lock:
            ids = handle.task_children(serial)
        return [self._tree.get(child_id) for child_id in ids]

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
        """Resume every handle suspended on ``answer.id`` from the asking one up to ``top``
        (an ancestor answering inline) or to the root's child (the host's durable resume)."""
        origin_id = self._tree.store.parked(answer.id)
        if origin_id is None:
            raise UnknownRequest(f"no handle is waiting on request {answer.id!r}")
        chain = self._suspended_chain(self._tree.get(origin_id), answer.id, top)
        above = self._tree.parent(chain[-1])
        assert above is not None
        path = [above, *reversed(chain)]  # lock order: ancestor before descendant
        trace = tracing.capture()  # the resumed turns nest where the answer came in
        jobs = []
        with contextlib.ExitStack() as held:
            for each in path:
                held.enter_context(each.lock)
            held.enter_context(self._atomic(*path))
            # The claim, every flip and every slot commit together or not at all.
            if self._tree.store.unpark(answer.id, "answered", to_wire(answer)) is None:
                raise UnknownRequest(f"no handle is waiting on request {answer.id!r} (answered or cancelled already)")
            for position, handle in enumerate(chain):
                if not handle.suspended_on(answer.id):
                    continue
                turn = handle.resume(answer, origin=position == 0, via_idle=top is None, trace=trace)
                above_it = path[len(chain) - 1 - position]
                if above_it is not self.root:
                    above_it.take_slot(None)
                jobs.append(self._begin(handle, turn))
        self._dispatch(*jobs)

    def _suspended_chain(self, origin: Handle, request_id: str, top: Handle | None) -> list[Handle]:
        chain = [origin]
        current = origin
        while current is not top:
            parent = self._tree.parent(current)
            if parent is None or parent is self.root:
                break
            with parent.lock:
                parent.sync()
                waiting = parent.suspended_on(request_id)
            if not waiting:
                break
            chain.append(parent)
            current = parent
        return chain

    def close(self, h: Handle | str, force: bool = False) -> None:
        """Stop ``h`` and its subtree, leaf-first. A running turn gets up to
        ``shutdown_ms`` to finish (none with ``force``), then is interrupted. Closing the
        root also ends every thread of the runtime: it returns once they have ended, or
        after ``shutdown_ms`` plus one second with a warning naming those left. On a
        ``pool=``, what ends is the work the runtime gave the pool; its threads stay."""
        handle = self._tree.get(h)
        threads_by = shutdown.threads_deadline(self._shutdown_s)
        deadline = self._clock() + self._shutdown_s
        self._close_tree(handle, "closed", deadline, force)
        if handle is self.root:
            self._stop_workers(threads_by)
            self._let_go()

    def _close_tree(self, handle: Handle, reason: str, deadline: float, force: bool) -> None:
        with handle.lock, self._atomic(handle):
            children_ids = handle.begin_closing()
        if children_ids is None:
            return
        children = [self._tree.get(child_id) for child_id in children_ids]
        for child in children:
            self._close_tree(child, "parent closed", deadline, force)
        if not force:
            with handle.lock:
                handle.changed.wait_for(lambda: not handle.busy or self._unstarted(handle), timeout=max(0.0, deadline - self._clock()))
        while True:
            with handle.lock:  # an idle handle has nothing to interrupt
                handle.sync()
                idle = handle.record.state == IDLE and not handle.record.queued
            if not idle:
                self.interrupt(handle)
            with handle.lock, self._atomic(handle):
                state = handle.record.state
                if state == CLOSED:
                    return
                if state == IDLE:
                    handle.close()
                    self._tree.event("close", handle.id, reason=reason)
                    break
                if state == RUNNING:
                    # A turn that was already settling (saving its transcript) outlasted the
                    # interrupt's wait: let its outcome land, then go round again.
                    handle.changed.wait_for(lambda: handle.record.state != RUNNING)
                # SUSPENDED: the settling turn ended pending; the next interrupt cancels it.
        if handle.definition is not None:
            self._call_user(handle.definition.on_close, handle, reason)
        self._retire(handle)

    def _retire(self, handle: Handle) -> None:
        """Let the oldest closed handles leave memory (a state still has them). A task
        child closed while its parent's turn runs waits for that turn: a repeated call may
        still reattach to it."""
        parent = self._tree.parent(handle)
        if parent is None:
            return
        with parent.lock:
            busy = parent is not self.root and parent.record.state == RUNNING
        if busy:
            return
        for gone in self._tree.retire(handle):
            try:
                above = self._tree.parent(gone)
            except UnknownHandle:  # left memory before its child did
                above = None
            if above is not None:
                with above.lock:
                    if gone.id in above.record.children:
                        above.record.children.remove(gone.id)
            self._tree.store.forget_handle(gone.id)

    def _unstarted(self, handle: Handle) -> bool:
        """Inline, a turn no thread has picked up has nothing to finish (lock held)."""
        return self._inline and (runnable(handle) or handle.record.queued)

    def _stop_workers(self, deadline: float) -> None:
        shutdown.stop_workers(self._executor, self._turns.engine.model, deadline)
        close_resources(tool for definition in self._registry.values() for tool in definition.tools)

    # --- helpers --------------------------------------------------------------------------

    @staticmethod
    def _call_user(callback: Callable[..., Any] | None, *args: Any) -> None:
        if callback is None:
            return
        try:
            callback(*args)
        except Exception:
            log.warning("lifecycle callback %r raised; ignored", callback, exc_info=True)


def _weakly(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` called through a weak reference to its runtime: the parts a runtime hands
    its own methods to keep no cycle back to it, so reference counting frees a closed
    runtime at once instead of leaving a whole tree to the cycle collector."""
    ref = weakref.WeakMethod(method)

    def call(*args: Any, **kwargs: Any) -> Any:
        bound = ref()
        if bound is None:
            raise ToolnexusError("the runtime is gone")
        return bound(*args, **kwargs)

    return call


_RETRIED_STATUSES = ("error", "interrupted", "timeout")

#: A context that does nothing: no store transaction without a state, no parent lock at the
#: root (reentrant, so one serves every use).
_NOTHING: ContextManager[Any] = contextlib.nullcontext()


def _nothing_to_save() -> None:
    pass


#: The transcript context of a turn that settles with none to save (it failed, or suspended).
_NO_TRANSCRIPT: ContextManager[Callable[[], None]] = contextlib.nullcontext(_nothing_to_save)


def open_tree_store(state: str | os.PathLike[str] | StateStore | None, runtime_id: str, conversations: ConversationStore | None) -> TreeStore:
    """Where the tree lives: in memory without a state, else as rows in it. The state
    modules (and sqlite3) load only for a runtime that has one."""
    if state is None:
        return MemoryTree(conversations)
    from .state import StateStore, open_state
    from .stored import StoredTree

    owned = not isinstance(state, StateStore)
    return StoredTree(open_state(state), runtime_id, sole_user=owned, owns_store=owned)


def _ended_in_failure(child: Handle) -> bool:
    """Whether a task child settled on an outcome worth a retry rather than a reattach."""
    with child.lock:
        child.sync()
        record = child.record
        return not child.busy and record.state != SUSPENDED and record.result is not None and record.result.status in _RETRIED_STATUSES
