"""The agent runtime: a tree of handles driven by six verbs, on a pool of worker threads.

Each handle runs its turns on a ``concurrent.futures`` worker. A thread that must block
on a child's turn (the ``task`` tool, ``run_agent``) runs that turn itself when no worker
has started it yet, so blocked parents can never starve their children of workers.
Blocking goes only upward: a parent waits on its child, never the reverse.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable, ContextManager, Iterator, Mapping

import attrs

from . import _jobs, budget as budgets, tracing
from .agent import AgentDef, normalize_registry
from .engine import ConnectionOptions, build_engine
from .loop import Engine
from ._cancel import TurnGate
from .data import AgentResult, Answer, Budget, HandleView, Request, RunResult, ToolResult
from .errors import Cancelled, HandleClosed, InboxFull, SpawnError, ToolnexusError, UnknownRequest
from .handle import CLOSED, IDLE, RUNNING, SUSPENDED, Handle, HandleRecord, InboxItem, Turn, render_input
from .hooks import HooksLike
from .store import ConversationStore, InMemoryStore
from .task import agent_tool, result_as_tool_output, task_tool
from .tree import HandleTree
from .turns import TurnRunner
from .tools import Tool, ToolContext, failure

if TYPE_CHECKING:
    import requests

log = logging.getLogger("toolnexus")

ROOT = "root"
_DEFAULT_WORKERS = 32
_THREAD_GRACE_S = 1.0  # after shutdown_ms, how long close(root) waits for interrupted threads to end


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
        inline: bool = False,
        around_tool: Callable[[], ContextManager[Any]] | None = None,
        trace_content: bool = False,
    ) -> None:
        self._registry = normalize_registry(registry)
        self.root = Handle(HandleRecord(id=ROOT, name=ROOT, parent=None, depth=0, budget=budgets.ROOT_BUDGET))
        self._tree = HandleTree(self.root)
        self._clock = clock or time.monotonic
        self._inbox_cap = inbox_cap
        self._shutdown_s = shutdown_ms / 1000
        self._store: ConversationStore = store if store is not None else InMemoryStore()
        workers = max_workers or _DEFAULT_WORKERS
        self._inline = inline
        # Inline: no pool at all; a turn runs on the thread that waits for it.
        self._executor = None if inline else ThreadPoolExecutor(max_workers=workers, thread_name_prefix="toolnexus")
        options = ConnectionOptions(
            base_url=base_url,
            style=style,
            api_key=api_key,
            headers=headers,
            session=session,
            generate=generate,
            retries=retries,
            retry_base_ms=retry_base_ms,
            timeout_ms=timeout_ms,
            max_retry_after_s=max_retry_after_s,
            request_params=request_params,
        )
        engine = Engine(model=build_engine(options, pool_size=workers), executor=lambda: self._executor)
        self._turns = TurnRunner(
            engine=engine,
            store=self._store,
            model=model,
            hooks=hooks,
            on_metric=on_metric,
            gate=TurnGate(max_concurrent_turns) if max_concurrent_turns else None,
            clock=self._clock,
            lineage=self._tree.lineage,
            task_tool=lambda handle, serial: task_tool(self, handle, serial),
            around_tool=around_tool,
            trace=tracing.Tracer(content=trace_content, provider=None if generate is not None else style),
        )

    def __repr__(self) -> str:
        return f"Runtime(agents={sorted(self._registry)!r}, handles={len(self._tree)})"

    def __enter__(self) -> Runtime:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close(self.root)

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
            return list(handle.record.transitions)

    def events(self) -> list[dict[str, Any]]:
        return self._tree.events()

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
        with owner.lock:
            child = self._add_child(owner, definition, budget)
        self._tree.event("spawn", child.id, parent=owner.id, agent=name)
        self._call_user(definition.on_spawn, child)
        return child

    def _add_child(self, owner: Handle, definition: AgentDef, budget: Budget | None) -> Handle:
        record = owner.record
        if record.closing or record.state == CLOSED:
            raise SpawnError(f"closed: {record.id} does not accept new children")
        cap = record.budget.max_children
        if cap is not None and len(record.children) >= cap:
            raise SpawnError(f"maxChildren: {record.id} already has {cap} children")
        depth = record.depth + 1
        if depth > budgets.max_depth(record.budget):
            raise SpawnError(f"maxDepth: a child of {record.id} would be at depth {depth} (max {budgets.max_depth(record.budget)})")
        own = budgets.merge(definition.budget, budget)
        carved = budgets.carve(own, record.budget, record.tokens, record.pool_tool_calls)
        record.spawned += 1
        child_id = f"{record.id}/{definition.name}.{record.spawned}"
        child = Handle(HandleRecord(id=child_id, name=definition.name, parent=record.id, depth=depth, budget=carved), definition)
        record.children.append(child_id)
        self._tree.add(child)
        return child

    def post(self, h: Handle | str, text: str, *, sender: str = "external", channel: str = "external") -> None:
        """Leave ``text`` in the handle's inbox for its next turn; no state change.

        Raises:
            HandleClosed: the handle is closed or closing.
            InboxFull: the inbox holds ``inbox_cap`` items already.
        """
        handle = self._tree.get(h)
        with handle.lock:
            record = handle.record
            if record.closing or record.state == CLOSED:
                problem: ToolnexusError = HandleClosed(f"closed: {record.id} accepts no posts")
            elif len(record.inbox) >= self._inbox_cap:
                problem = InboxFull(f"inbox full: {record.id} holds {self._inbox_cap} items")
            else:
                record.inbox.append(InboxItem(sender=sender, channel=channel, text=text))
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
            _jobs.submit(self._executor, job)

    def _wake(self, handle: Handle, prompt: str | None) -> _jobs.Job | None:
        """``wake`` without handing the turn to a worker: for a caller about to wait on it,
        which then runs it on its own thread (no hand-off)."""
        parent = self._tree.parent(handle)
        if parent is None:
            raise ToolnexusError("the root handle runs no agent; spawn a child and wake that")
        trace = tracing.capture()  # the turn nests here, whichever thread runs it
        with parent.lock, handle.lock:
            return self._admit(parent, handle, prompt, trace)

    def _admit(self, parent: Handle, handle: Handle, prompt: str | None, trace: tracing.Carrier | None) -> _jobs.Job | None:
        """Check, take a slot and flip to running as one step (both locks held)."""
        record = handle.record
        if record.closing or record.state == CLOSED:
            raise HandleClosed(f"closed: {record.id} cannot be woken")
        if handle.busy or record.state == SUSPENDED:
            return None
        cap = budgets.max_concurrent(parent.record.budget) if parent is not self.root else None
        if cap is not None and parent.record.running_children >= cap:
            record.queued, record.queued_prompt, record.queued_trace = True, prompt, trace
            parent.record.wake_queue.append(record.id)
            handle.changed.notify_all()
            self._tree.event("wake_queued", record.id, parent=parent.id)
            return None
        parent.record.running_children += 1
        return self._start_turn(handle, prompt, trace)

    def _start_turn(self, handle: Handle, prompt: str | None, trace: tracing.Carrier | None) -> _jobs.Job:
        record = handle.record
        record.taken, record.inbox = record.inbox, []
        record.turn_serial += 1
        text = render_input(prompt, record.taken, _ancestry(record.id))
        return self._begin(handle, Turn(serial=record.turn_serial, input=text, tokens_before=record.tokens, trace=trace))

    def _begin(self, handle: Handle, turn: Turn) -> _jobs.Job:
        turn.started = self._clock()
        turn.job = _jobs.Job(lambda: self._run_turn(handle, turn))
        handle.turn = turn
        handle.move(RUNNING)
        return turn.job

    def _run_turn(self, handle: Handle, turn: Turn) -> None:
        started = time.perf_counter()
        error: str | None = None
        try:
            result, run = self._execute(handle, turn)
        except Cancelled:
            return  # interrupted: the interrupt already published the outcome
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
            if handle.turn is not turn:
                return  # interrupted meanwhile; the interrupt published already
            turn.settling = True  # from here an interrupt waits for the outcome instead
        if not pending:
            self._retire_task_children(handle, turn.serial)
            if run is not None:
                self._store.save(handle.id, run.messages)
        with handle.lock:
            handle.turn = None
            record = handle.record
            if pending:
                request = _stamp_path(result.pending, record.id)  # type: ignore[arg-type]
                result = attrs.evolve(result, pending=request, text=request.prompt)
                record.pending, record.pending_input = request, turn.input
                record.pending_tokens_before, record.pending_turns = turn.tokens_before, result.turns
                record.pending_trace = turn.suspended_trace
                record.checkpoint = run.messages if run is not None else None
                self._tree.park(request.id, record.id)
                handle.move(SUSPENDED)
            else:
                record.pending = record.checkpoint = record.pending_input = None
                record.taken = []
                handle.move(IDLE)
            handle.publish(result)
        self._release_slot(handle)

    def _hand_over_task_children(self, handle: Handle, serial: int) -> None:
        """A ``task`` child is woken for its caller to run (caller-runs); if the turn ended
        before waiting on it (a failure, an interrupt), a worker runs it instead."""
        for child in self._task_children(handle, serial):
            with child.lock:
                job = child.turn.job if _runnable(child) else None  # type: ignore[union-attr]
            if job is not None:
                _jobs.submit(self._executor, job)

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
        if parent is None:
            return
        jobs = []
        with parent.lock:
            record = parent.record
            record.running_children -= 1
            cap = budgets.max_concurrent(record.budget) if parent is not self.root else None
            while record.wake_queue and (cap is None or record.running_children < cap):
                sibling = self._tree.get(record.wake_queue.pop(0))
                with sibling.lock:
                    if not sibling.record.queued:
                        continue
                    sibling.record.queued = False
                    record.running_children += 1
                    jobs.append(self._start_turn(sibling, sibling.record.queued_prompt, sibling.record.queued_trace))
                    sibling.record.queued_trace = None
                self._tree.event("wake_dequeued", sibling.id, parent=parent.id)
        for job in jobs:
            _jobs.submit(self._executor, job)

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
        return self._next_result(handle, timeout, run_here=self._inline or _jobs.inside_job(), stop_at_deadline=self._inline)

    def _await(self, handle: Handle) -> AgentResult:
        """Wait for a handle to settle, running its turn here if no worker has it."""
        return self._next_result(handle, None, run_here=True)

    def _next_result(self, handle: Handle, timeout: float | None, *, run_here: bool, stop_at_deadline: bool = False) -> AgentResult:
        """Wait for the handle's next settled result, running its unstarted turn here when
        ``run_here``. Inline, a wake queued behind ``max_concurrent`` runs the unstarted
        sibling turn that holds the slot first. ``stop_at_deadline``: a turn this thread
        runs is interrupted (by a timer, at its next step) when time is up and the result
        is ``timeout``; otherwise such a turn runs to its end."""
        deadline = None if timeout is None else time.monotonic() + timeout
        record = handle.record
        with handle.lock:
            if record.result is not None and not handle.busy:
                return record.result
            since = record.settled
        while True:
            with handle.lock:
                if record.settled > since and record.result is not None:
                    return record.result
                if record.state == CLOSED:
                    return _closed_result(record)
                job = handle.turn.job if run_here and _runnable(handle) else None  # type: ignore[union-attr]
                behind = job is None and run_here and self._inline and record.queued
            owner = handle
            if behind:
                owner, job = self._slot_holder(handle)
            if job is None:
                with handle.lock:
                    if record.settled > since or record.state == CLOSED or (run_here and _runnable(handle)):
                        continue  # changed while the siblings were looked at
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        turns = self._turns.turn_calls(handle.turn) if handle.turn is not None else 0
                        break
                    handle.changed.wait(remaining)
                continue
            if deadline is None or not stop_at_deadline:
                job.run()
                continue
            with self._interrupt_at(owner, deadline) as fired:
                job.run()
            with owner.lock:
                result = owner.record.result
            if fired.is_set() and result is not None and result.status == "interrupted":
                turns = result.turns if owner is handle else 0  # a sibling's turn is not this handle's
                break
        return AgentResult(text="", status="timeout", turns=turns, total_tokens=record.tokens, handle_id=record.id)

    def _slot_holder(self, handle: Handle) -> tuple[Handle, _jobs.Job | None]:
        """Inline: a sibling holding one of the parent's slots whose turn nobody started."""
        parent = self._tree.parent(handle)
        if parent is None:
            return handle, None
        with parent.lock:
            siblings = [self._tree.get(child_id) for child_id in parent.record.children]
        for sibling in siblings:
            with sibling.lock:
                if sibling is not handle and _runnable(sibling):
                    return sibling, sibling.turn.job  # type: ignore[union-attr]
        return handle, None

    @contextlib.contextmanager
    def _interrupt_at(self, handle: Handle, deadline: float) -> Iterator[threading.Event]:
        """Interrupt ``handle`` at ``deadline`` from a short-lived timer thread, so that a
        turn running on the waiting thread itself still stops when time is up."""
        fired = threading.Event()

        def fire() -> None:
            fired.set()
            self.interrupt(handle)

        timer = threading.Timer(max(0.0, deadline - time.monotonic()), fire)
        timer.name, timer.daemon = f"toolnexus-deadline {handle.id}", True
        timer.start()
        try:
            yield fired
        finally:
            timer.cancel()
            timer.join()

    def task_child(self, parent: Handle, serial: int, agent: str, prompt: str) -> Handle | ToolResult:
        """The child for one ``task`` call: reattached by key within the turn ``serial``,
        or spawned and woken. A child that ended ``error``, ``interrupted`` or ``timeout``
        is not reattached: the repeated call is a retry and runs a fresh child, which the
        index then names. A refused spawn is an error result."""
        key = (agent, prompt)
        with parent.task_lock:
            entry = parent.record.task_keys.get(key)
            child = self._tree.get(entry[1]) if entry is not None and entry[0] == serial else None
            if child is not None and _ended_in_failure(child):
                child = None
            if child is None:
                try:
                    child = self.spawn(parent, agent)
                    parent.record.task_keys[key] = (serial, child.id)
                    self._wake(child, prompt)  # run by the task call that waits on it
                except (SpawnError, HandleClosed) as exc:
                    return failure(f"cannot delegate to {agent}: {exc}")
                return child
        self._tree.event("reattach", child.id, parent=parent.id, state=self.inspect(child).state)
        return child

    def delegate(self, parent: Handle, serial: int, agent: str, prompt: str, ctx: ToolContext) -> ToolResult:
        """One ``task`` call: spawn, wake, wait and close fused, reattaching by key."""
        child = ctx.prepared if isinstance(ctx.prepared, (Handle, ToolResult)) else self.task_child(parent, serial, agent, prompt)
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
            result = self._next_result(handle, timeout, run_here=self._inline or _jobs.inside_job(), stop_at_deadline=True)
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
        cancelled_request: str | None = None
        turn: Turn | None = None
        settling: Turn | None = None
        with parent.lock if parent is not None else contextlib.nullcontext(), handle.lock:
            record = handle.record
            if record.state == RUNNING and handle.turn is not None and handle.turn.settling:
                settling = handle.turn  # finished already: its outcome stands
            elif record.state == RUNNING:
                turn, handle.turn = handle.turn, None
                record.inbox, record.taken = record.taken + record.inbox, []
                handle.move(IDLE)
                handle.publish(_interrupted(record, self._turns.turn_calls(turn) if turn is not None else 0))
            elif record.queued and parent is not None:
                record.queued = False
                parent.record.wake_queue.remove(record.id)
                handle.publish(_interrupted(record, 0))
            elif record.state == SUSPENDED and record.pending is not None:
                cancelled_request = record.pending.id
        if settling is not None:
            with handle.lock:
                handle.changed.wait_for(lambda: handle.turn is not settling, timeout=self._shutdown_s)
                if record.state == SUSPENDED and record.pending is not None:
                    cancelled_request = record.pending.id  # it settled pending: cancel that, as on any suspended handle
        if turn is not None:
            turn.scope.cancel()
            self._release_slot(handle)
            for child in self._task_children(handle, turn.serial):
                self.interrupt(child)
        if cancelled_request is not None:
            self._cancel_request(cancelled_request)

    def _task_children(self, handle: Handle, serial: int) -> list[Handle]:
        with handle.task_lock:
            ids = [child_id for turn_serial, child_id in handle.record.task_keys.values() if turn_serial == serial]
        return [self._tree.get(child_id) for child_id in ids]

    def _cancel_request(self, request_id: str) -> None:
        """Every handle suspended on ``request_id`` goes back to idle; the id is dead."""
        self._tree.unpark(request_id)
        for handle in self._tree.all():
            with handle.lock:
                record = handle.record
                if record.state != SUSPENDED or record.pending is None or record.pending.id != request_id:
                    continue
                turns = record.pending_turns
                record.pending = record.checkpoint = record.pending_input = None
                record.inbox, record.taken = record.taken + record.inbox, []
                handle.move(IDLE)
                handle.publish(_interrupted(record, turns))

    def resume(self, answer: Answer) -> None:
        """Route ``answer`` to the deepest handle suspended on its request; that handle
        continues from its checkpoint and each parent above it replays its turn.

        Raises:
            UnknownRequest: no handle is suspended on a request with ``answer.id``.
        """
        self._resume_chain(answer, top=None)

    def _resume_chain(self, answer: Answer, top: Handle | None) -> None:
        origin_id = self._tree.unpark(answer.id)
        if origin_id is None:
            raise UnknownRequest(f"no handle is waiting on request {answer.id!r}")
        chain = self._suspended_chain(self._tree.get(origin_id), answer.id, top)
        trace = tracing.capture()  # the resumed turns nest where the answer came in
        jobs = []
        for position, handle in enumerate(chain):
            parent = self._tree.parent(handle)
            assert parent is not None
            with parent.lock, handle.lock:
                record = handle.record
                if record.state != SUSPENDED or record.pending is None or record.pending.id != answer.id:
                    continue
                turn = Turn(
                    serial=record.turn_serial,
                    input=record.pending_input or "",
                    tokens_before=record.pending_tokens_before,
                    prior_turns=record.pending_turns,
                    trace=trace,
                    suspended_trace=record.pending_trace,
                )
                if position == 0:
                    turn.resume = (record.checkpoint or [], record.pending, answer)
                record.pending = record.checkpoint = record.pending_input = None
                parent.record.running_children += 1
                jobs.append(self._begin(handle, turn))
        for job in jobs:
            _jobs.submit(self._executor, job)

    def _suspended_chain(self, origin: Handle, request_id: str, top: Handle | None) -> list[Handle]:
        chain = [origin]
        current = origin
        while current is not top:
            parent = self._tree.parent(current)
            if parent is None or parent is self.root:
                break
            with parent.lock:
                waiting = parent.record.state == SUSPENDED and parent.record.pending is not None and parent.record.pending.id == request_id
            if not waiting:
                break
            chain.append(parent)
            current = parent
        return chain

    def close(self, h: Handle | str, force: bool = False) -> None:
        """Stop ``h`` and its subtree, leaf-first. A running turn gets up to
        ``shutdown_ms`` to finish (none with ``force``), then is interrupted. Closing the
        root also ends every thread of the runtime: it returns once they have ended, or
        after ``shutdown_ms`` plus one second with a warning naming those left."""
        handle = self._tree.get(h)
        threads_by = time.monotonic() + self._shutdown_s + _THREAD_GRACE_S  # real time, whatever the clock
        deadline = self._clock() + self._shutdown_s
        self._close_tree(handle, "closed", deadline, force)
        if handle is self.root:
            self._stop_workers(threads_by)

    def _close_tree(self, handle: Handle, reason: str, deadline: float, force: bool) -> None:
        with handle.lock:
            if handle.record.state == CLOSED:
                return
            handle.record.closing = True
            children = [self._tree.get(child_id) for child_id in handle.record.children]
        for child in children:
            self._close_tree(child, "parent closed", deadline, force)
        if not force:
            with handle.lock:
                handle.changed.wait_for(lambda: not handle.busy or self._unstarted(handle), timeout=max(0.0, deadline - self._clock()))
        while True:
            self.interrupt(handle)
            with handle.lock:
                state = handle.record.state
                if state == CLOSED:
                    return
                if state == IDLE:
                    handle.move(CLOSED)
                    break
                if state == RUNNING:
                    # A turn that was already settling (saving its transcript) outlasted the
                    # interrupt's wait: let its outcome land, then go round again.
                    handle.changed.wait_for(lambda: handle.record.state != RUNNING)
                # SUSPENDED: the settling turn ended pending; the next interrupt cancels it.
        self._tree.event("close", handle.id, reason=reason)
        if handle.definition is not None:
            self._call_user(handle.definition.on_close, handle, reason)

    def _unstarted(self, handle: Handle) -> bool:
        """Inline, a turn no thread has picked up has nothing to finish (lock held)."""
        return self._inline and (_runnable(handle) or handle.record.queued)

    def _stop_workers(self, deadline: float) -> None:
        """End the pool; wait for its threads (interrupted turns unwinding) until ``deadline``
        on the monotonic clock."""
        executor = self._executor
        if executor is not None:  # inline: no pool
            executor.shutdown(wait=False, cancel_futures=True)
        threads = [t for t in list(getattr(executor, "_threads", ())) if t is not threading.current_thread()]
        for thread in threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        left = [thread.name for thread in threads if thread.is_alive()]
        if left:
            log.warning("close: %d runtime thread(s) still running past shutdown_ms + 1 s (a tool that ignores ctx.cancelled?): %s", len(left), ", ".join(left))
        self._turns.engine.model.close()

    # --- helpers --------------------------------------------------------------------------

    @staticmethod
    def _call_user(callback: Callable[..., Any] | None, *args: Any) -> None:
        if callback is None:
            return
        try:
            callback(*args)
        except Exception:
            log.warning("lifecycle callback %r raised; ignored", callback, exc_info=True)


def _ancestry(handle_id: str) -> set[str]:
    parts = handle_id.split("/")
    return {"/".join(parts[: i + 1]) for i in range(len(parts))}


def _stamp_path(request: Request, handle_id: str) -> Request:
    data = dict(request.data or {})
    if "path" in data:
        return request  # relayed: the deepest handle stamped it already
    data["path"] = handle_id.split("/")
    return attrs.evolve(request, data=data)


_RETRIED_STATUSES = ("error", "interrupted", "timeout")


def _ended_in_failure(child: Handle) -> bool:
    """Whether a task child settled on an outcome worth a retry rather than a reattach."""
    with child.lock:
        record = child.record
        return not child.busy and record.state != SUSPENDED and record.result is not None and record.result.status in _RETRIED_STATUSES


def _runnable(handle: Handle) -> bool:
    turn = handle.turn
    return turn is not None and turn.job is not None and not turn.job.claimed


def _interrupted(record: HandleRecord, turns: int) -> AgentResult:
    """``turns``: the model calls of the turn that was interrupted."""
    return AgentResult(text="interrupted", status="interrupted", turns=turns, total_tokens=record.tokens, handle_id=record.id)


def _closed_result(record: HandleRecord) -> AgentResult:
    return AgentResult(text="closed", status="closed", turns=record.turns, total_tokens=record.tokens, handle_id=record.id)
