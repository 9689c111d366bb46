"""A handle's values: the record a tree store keeps for each handle, and its parts.

Plain attrs data with no behaviour: ``Handle`` (``handle.py``) owns the decisions and the
lock; a tree store keeps the record (in memory, or as one small row body through
``wire``'s converter). What is large and written once per turn (a turn's input, the
transcript a suspension stopped at, the resume a turn continues) is not part of the
record: the tree store keeps it beside the record, by turn serial and segment.
"""

from __future__ import annotations


from typing import Any

import attrs

from .._model.cancel import CancelScope
from .jobs import Job
from ..data import NO_USAGE, AgentResult, Answer, Budget, HandleView, Request, Usage, add_cost

IDLE, RUNNING, SUSPENDED, CLOSED = "idle", "running", "suspended", "closed"


@attrs.frozen
class InboxItem:
    """One post waiting for the next turn, with where it came from."""

    sender: str
    channel: str
    text: str


@attrs.frozen
class Suspension:
    """Where a suspended turn stopped. What it had done is in its journal: a resume replays
    the turn from there, asking no model again for a step already answered."""

    request: Request
    #: The call that halted the turn (the one that asked, or its ``task`` call that relays
    #: a child's request) and the model step that made it.
    call: str
    step: int
    #: How many times the turn went on after a suspension so far.
    segment: int
    #: The ledger when the turn began, so its result after resume covers the whole turn.
    before: Usage
    #: Model calls the turn made before it suspended.
    turns: int
    #: The suspended turn's span, as trace-context headers: the resumed turn links to it.
    trace: dict[str, str] | None = None


@attrs.frozen
class Resume:
    """How the handle whose own tool asked continues its suspended turn: replayed from its
    journal, with the ``answer`` to ``request`` for the halted ``call`` of model ``step``
    (run again with ``ctx.answer``, or fed back declined)."""

    call: str
    step: int
    request: Request
    answer: Answer


@attrs.frozen
class RunningTurn:
    """The running turn as the record holds it: enough for another process to take it
    over after a crash (its input and resume are kept beside the record)."""

    #: How many times the turn went on after a suspension (it names a dispatcher's message).
    segment: int = 0
    #: The runtime that runs it; ``None`` while it is queued for a dispatcher.
    owner: str | None = None
    #: The ledger when the turn began.
    before: Usage = NO_USAGE
    #: When a dispatcher was last asked to run it; ``None`` once a runtime claimed it.
    queued_at: float | None = None
    #: Whether it continues a suspension (a ``Resume`` is kept for this segment).
    resumed: bool = False


@attrs.frozen
class QueuedWake:
    """A wake waiting for a slot under the parent's ``max_concurrent``."""

    prompt: str | None
    #: The trace context of the wake, for the turn it starts later.
    trace: dict[str, str] | None = None


@attrs.frozen
class FailedTurn:
    """A turn that ended ``error`` (or was interrupted to be continued later) and kept its
    journal, so that ``retry`` can continue it without asking a model again for a step it
    answered or running a finished call again."""

    serial: int
    segment: int
    #: The ledger when the turn began.
    before: Usage
    #: Inbox items the turn had taken and gave back when it was interrupted (they lead
    #: the inbox): a retry, whose input holds them already, takes them again.
    returned: int = 0


@attrs.frozen
class TaskEntry:
    """One row of the reattachment index: the child a ``task`` call made in a turn."""

    serial: int
    child: str
    #: The id of the tool call that spawned it ("" when unknown).
    call: str = ""


@attrs.define(eq=False)
class Turn:
    """One admitted turn: its input, its cancellation scope and the job that runs it."""

    serial: int
    input: str
    scope: CancelScope = attrs.Factory(CancelScope)
    job: Job | None = None
    #: The answer a replayed turn gives its halted call (see ``record.Resume``).
    resume: Resume | None = None
    #: How many times the turn went on after a suspension (it names a dispatcher's message).
    segment: int = 0
    started: float = 0.0
    #: The ledger when the turn began: what the turn spent is the ledger now less this.
    before: Usage = NO_USAGE
    #: Model calls this turn made so far, counted by the ``TurnRunner`` under its lock.
    model_calls: int = 0
    settling: bool = False
    #: Its input is kept in the store already, and maybe a journal: a replay, a claimed turn.
    kept: bool = False
    #: Where the turn was queued, as trace-context headers (``tracing.capture``).
    trace: dict[str, str] | None = None
    #: A resumed turn: the span of the turn that suspended. Set by the runner when this
    #: turn ends pending: its own span.
    suspended_trace: dict[str, str] | None = None
    #: Where the running turn records its steps (``journal.TurnJournal``), set when it runs.
    journal: Any = None


@attrs.frozen
class Interruption:
    """What an ``interrupt`` of one handle leaves for the runtime to do."""

    #: The turn that was running here: its scope is to be cancelled.
    cancel: Turn | None = None
    #: The serial of the turn this interrupt ended (its slot and task children to free).
    ended: int | None = None
    #: A turn that was already settling: its own outcome stands, wait for it.
    settling: Turn | None = None
    #: The pending request to cancel (the handle was suspended on it).
    request: str | None = None


NOTHING_TO_INTERRUPT = Interruption()


@attrs.define
class HandleRecord:
    """Everything a handle is, as plain data."""

    id: str
    name: str
    parent: str | None
    depth: int
    budget: Budget
    state: str = IDLE
    children: list[str] = attrs.Factory(list)
    spawned: int = 0
    transitions: list[str] = attrs.Factory(list)
    inbox: list[InboxItem] = attrs.Factory(list)
    taken: list[InboxItem] = attrs.Factory(list)
    turns: int = 0
    tokens: int = 0
    tool_calls: int = 0
    pool_tool_calls: int = 0
    #: US dollars charged here (own calls and descendants'); ``None`` until a priced call is.
    cost: float | None = None
    #: ``tokens`` split as the model calls charged them (own and descendants').
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    #: Model calls charged here whose server reported no usage (``Usage.unmeasured_calls``).
    unmeasured_calls: int = 0
    #: The most one model call charged here has cost: how a call in flight is reckoned
    #: against a money cap (``budget.may_fly``).
    largest_cost: float | None = None
    suspension: Suspension | None = None
    turn_serial: int = 0
    #: ``(agent, prompt)`` -> the child a ``task`` call made for it, and in which turn.
    task_keys: dict[tuple[str, str], TaskEntry] = attrs.Factory(dict)
    result: AgentResult | None = None
    settled: int = 0
    closing: bool = False
    wake: QueuedWake | None = None
    running_children: int = 0
    wake_queue: list[str] = attrs.Factory(list)
    running: RunningTurn | None = None
    #: The last turn, when it failed and can be tried again (``Runtime.retry``).
    failed: FailedTurn | None = None
    #: The tree's own random id (the root's record), part of every idempotency key.
    nonce: str = ""
    #: Tools a host offers this handle's model and runs itself (``offers.py``): their specs.
    offered: list[dict[str, Any]] = attrs.Factory(list)
    #: The stored row's version this record reflects (a stored tree only; not in the body).
    version: int = 0

    @property
    def pending(self) -> Request | None:
        return self.suspension.request if self.suspension is not None else None

    @property
    def spent(self) -> Usage:
        """The ledger as one ``Usage``: what the handle and its descendants spent."""
        tokens = (self.prompt_tokens, self.completion_tokens, self.tokens, self.cached_tokens)
        return Usage(*tokens, cost=self.cost, unmeasured_calls=self.unmeasured_calls)

    def charge(self, usage: Usage) -> None:
        """Add one model call's usage to the ledger (its cost, when it was priced)."""
        self.tokens += usage.total_tokens
        self.prompt_tokens += usage.prompt_tokens
        self.completion_tokens += usage.completion_tokens
        self.cached_tokens += usage.cached_tokens
        self.unmeasured_calls += usage.unmeasured_calls
        if usage.cost is not None:
            self.cost = add_cost(self.cost, usage.cost)
            self.largest_cost = max(self.largest_cost or 0.0, usage.cost)

    @property
    def queued(self) -> bool:
        """Waiting for a slot under the parent's ``max_concurrent``."""
        return self.wake is not None


def interrupted(record: HandleRecord, turns: int) -> AgentResult:
    """``turns``: the model calls of the turn that was interrupted."""
    return AgentResult(text="interrupted", status="interrupted", turns=turns, usage=record.spent, handle_id=record.id)


def closed_result(record: HandleRecord) -> AgentResult:
    return AgentResult(text="closed", status="closed", turns=record.turns, usage=record.spent, handle_id=record.id)


def stamp_path(request: Request, handle_id: str) -> Request:
    data = dict(request.data or {})
    if "path" in data:
        return request  # relayed: the deepest handle stamped it already
    data["path"] = handle_id.split("/")
    return attrs.evolve(request, data=data)


def view_of(r: HandleRecord) -> HandleView:
    """What ``inspect`` shows of a record."""
    return HandleView(
        id=r.id,
        name=r.name,
        state=r.state,
        parent=r.parent,
        children=list(r.children),
        turns=r.turns,
        tokens=r.tokens,
        tool_calls=r.tool_calls,
        inbox=len(r.inbox),
        pending=r.pending,
        cost=r.cost,
        unmeasured_calls=r.unmeasured_calls,
    )
