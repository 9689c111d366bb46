"""Spawning: a new child handle, with its carved budget, for the ``spawn`` verb and for a
``task`` call (whose child is spawned, named in the parent's index and woken in one unit
of work)."""

from __future__ import annotations

from typing import Callable, Mapping

from . import budget as budgets
from . import jobs as _jobs
from .._run import tracing
from .agentdef import AgentDef, call_lifecycle
from ..data import Budget
from ..errors import SpawnError
from .execution import Execution
from .handle import Handle, HandleRecord
from .tree import HandleTree
from .turns import TurnRunner, check_priced

#: ``admit(parent, child, prompt, trace)``: the scheduler's admission (both locks held).
Admit = Callable[[Handle, Handle, "str | None", "tracing.Carrier | None"], "_jobs.Job | None"]


class Spawner:
    """Makes the children of one runtime's tree from its registry."""

    def __init__(
        self, registry: Mapping[str, AgentDef], tree: HandleTree, turns: TurnRunner, admit: Admit, execution: Execution
    ) -> None:
        self._registry = registry
        self._tree = tree
        self._turns = turns
        self._admit = admit
        self._execution = execution

    def definition(self, name: str) -> AgentDef:
        """The registry's definition of ``name``; a ``SpawnError`` for an unknown agent."""
        try:
            return self._registry[name]
        except KeyError:
            raise SpawnError(f"unknown agent: {name!r}") from None

    def spawn(self, owner: Handle, name: str, budget: Budget | None) -> Handle:
        """A new idle child of ``owner`` running agent ``name`` (``Runtime.spawn``)."""
        definition = self._spawnable(owner, name)
        with owner.lock, self._tree.store.change(owner, dirty=False):
            child = self._add_child(owner, definition, budget)
        call_lifecycle(definition.on_spawn, child)
        return child

    def spawn_woken(self, parent: Handle, agent: str, prompt: str, serial: int, call_id: str) -> Handle:
        """A ``task`` call's child: spawned, named in ``parent``'s index for turn ``serial``
        and woken on ``prompt``, in one unit of work (a process killed at any point leaves
        all of it or none). Its turn is offered to the call that waits on it."""
        definition = self._spawnable(parent, agent)
        trace = tracing.capture()  # the child's turn nests in the task call's span
        with parent.lock, self._tree.store.change(parent, dirty=False):
            child = self._add_child(parent, definition, None)
            self._tree.store.events.emit(parent.id, "spawn", {"child": child.id, "agent": agent, "prompt": prompt})
            parent.remember_task((agent, prompt), serial, child.id, call_id)
            with child.lock:
                job = self._admit(parent, child, prompt, trace)
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
        refused = budgets.spawn_refusal(
            record.budget,
            parent_id=record.id,
            accepting=owner.accepting,
            children=len(record.children),
            depth=record.depth,
        )
        if refused is not None:
            raise SpawnError(refused)
        merged = budgets.merge(definition.budget, budget)
        carved = budgets.carve(merged, record.budget, record.tokens, record.pool_tool_calls, record.cost or 0.0)
        check_priced(self._registry, self._turns.model, self._turns.prices, definition.name, carved)
        child_id = f"{record.id}/{definition.name}.{owner.next_child_number()}"
        child_record = HandleRecord(
            id=child_id, name=definition.name, parent=record.id, depth=record.depth + 1, budget=carved
        )
        child = Handle(child_record, definition, self._tree.store)
        with child.lock, self._tree.store.change(child):  # the new row
            owner.add_child(child_id)
        self._tree.add(child)
        self._tree.event("spawn", child.id, parent=owner.id, agent=definition.name)
        return child
