"""A task is one run: the A2A task of one caller ↔ one handle under the root.

The task id is a public id of the served layer (``bindings``, surface ``"a2a"``), random
and bound to the principal that started it: another principal's task is "not found", as a
missing one is. The binding's data keeps what the runtime does not: the task's
``contextId``, the caller's messages (``history``) and, once the run has ended, its
``final`` state (recorded once, by whichever request sees the end first, with a
compare-and-set; the handle is closed then). Everything else is read from the runtime, so
any worker process with the same state answers for any task:

- the handle runs: ``TASK_STATE_WORKING``;
- it waits on a ``Request`` anywhere in its tree: ``TASK_STATE_INPUT_REQUIRED``;
- it settled: ``done`` ⇒ ``COMPLETED``, ``interrupted``/``closed`` ⇒ ``CANCELED``, any
  other status ⇒ ``FAILED``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import attrs

from .._serve import Binding, bindings_of, new_id
from ..data import AgentResult, Answer, Request
from ..errors import ToolnexusError, UnknownHandle, UnknownRequest
from ..wire import to_wire
from .._a2a import shapes
from ._params import Sent, invalid
from .._a2a.rpc import TASK_NOT_CANCELABLE, TASK_NOT_FOUND, UNSUPPORTED_OPERATION, RpcError

if TYPE_CHECKING:
    from .._team.runtime import Runtime

log = logging.getLogger("toolnexus")

#: The surface name of A2A tasks in the runtime's bindings.
SURFACE = "a2a"
#: The name of a completed task's artifact.
ANSWER = "answer"
#: How often a lost compare-and-set is read again before the request gives up.
ATTEMPTS = 16


@attrs.frozen
class Now:
    """A task's state as it is now: the A2A state, the text that goes with it (the answer,
    or the error), the open request while it waits for input, and when it was seen."""

    state: str
    text: str = ""
    request: Request | None = None
    at: str = attrs.field(factory=shapes.timestamp)

    @property
    def terminal(self) -> bool:
        return self.state in shapes.TERMINAL


def of_result(result: AgentResult) -> Now:
    """The A2A state of a settled run."""
    if result.status == "done":
        return Now(shapes.COMPLETED, result.text)
    if result.status == "pending" and result.pending is not None:
        return Now(shapes.INPUT_REQUIRED, result.pending.prompt, result.pending)
    if result.status in ("interrupted", "closed"):
        return Now(shapes.CANCELED, "the task was canceled")
    text = result.text if result.status == "error" else f"[{result.status}] {result.text}"
    return Now(shapes.FAILED, text.strip() or f"the run ended {result.status}")


def answer_of(request: Request, parts: list[dict[str, Any]]) -> Answer:
    """The caller's message as the ``Answer`` to ``request``: a first data part that is an
    object with ``"ok": false`` declines (its ``reason``, else ``declined``); otherwise it
    approves, with that object as the data, or ``{"text": <the text>}``."""
    found, value = shapes.first_data(parts)
    if found and isinstance(value, dict):
        if value.get("ok") is False:
            reason = value.get("reason")
            return Answer(id=request.id, ok=False, reason=reason if isinstance(reason, str) and reason else "declined")
        return Answer(id=request.id, ok=True, data=value)
    return Answer(id=request.id, ok=True, data={"text": shapes.text_of(parts)})


class Tasks:
    """The tasks of one caller (``principal``) on one runtime, each a run of ``agent``."""

    def __init__(self, rt: Runtime, agent: str, principal: str) -> None:
        self.rt = rt
        self.agent = agent
        self.principal = principal
        self._store = bindings_of(rt)

    # --- finding and starting ----------------------------------------------------------------

    def find(self, task_id: str) -> Binding:
        """The caller's task ``task_id``.

        Raises:
            RpcError: ``-32001`` for a task that does not exist and, the same, for another
                caller's.
        """
        found = self._store.get(SURFACE, self.principal, task_id)
        if found is None:
            raise RpcError(TASK_NOT_FOUND, f"Task {task_id[:80]} not found")
        return found

    def start(self, sent: Sent) -> Binding:
        """A new task: spawn ``agent`` under the root, bind it to the caller under a new
        task id with the message as its history, and wake it on the message's text.

        Raises:
            RpcError: ``-32602``, a message with nothing an agent can read (raw bytes only).
        """
        prompt = shapes.prompt_of(sent.parts)
        if not prompt.strip():
            raise invalid("the message has no text, data or url part for the agent to read")
        rt = self.rt
        task_id, context_id = new_id(), sent.context_id or new_id()
        first = {**sent.message, "taskId": task_id, "contextId": context_id}
        handle = rt.spawn(rt.root, self.agent)
        bound = None
        try:
            bound = self._store.bind(
                SURFACE, self.principal, handle.id, {"contextId": context_id, "history": [first]}, id=task_id
            )
            if bound is None:  # 128 random bits taken: never, but not a task to hand out twice
                raise ToolnexusError("a new task id was taken; send the message again")
            rt.wake(handle, prompt)
        except BaseException:
            if bound is not None:
                self._store.delete(bound)
            rt.close(handle, force=True)  # a run nobody can reach: not started
            raise
        return bound

    # --- what a task is now ---------------------------------------------------------------------

    def now(self, binding: Binding) -> Now:
        """The task's state, from its recorded end or from its run."""
        final = binding.data.get("final")
        if isinstance(final, dict):
            return Now(str(final["state"]), str(final.get("text", "")), at=str(final["at"]))
        rt = self.rt
        try:
            view = rt.inspect(binding.handle)
        except UnknownHandle:  # pruned with its binding meanwhile
            raise RpcError(TASK_NOT_FOUND, f"Task {binding.id} not found") from None
        if view.state == "suspended" and view.pending is not None:
            return Now(shapes.INPUT_REQUIRED, view.pending.prompt, view.pending)
        if view.state == "running":
            return Now(shapes.WORKING)
        result = rt.wait(binding.handle, timeout=0)  # settled: its last result, at once
        if result.status == "timeout":  # woken by nobody yet
            return Now(shapes.SUBMITTED)
        return of_result(result)

    def settle(self, binding: Binding, now: Now) -> tuple[Binding, Now]:
        """Record a terminal state once (the first request to see it wins; the others read
        what it wrote) and close the handle; anything else is returned as it is."""
        for _ in range(ATTEMPTS):
            if not now.terminal or "final" in binding.data:
                return binding, now
            final = {"state": now.state, "text": now.text, "at": now.at}
            updated = self._store.update(binding, {**binding.data, "final": final})
            if updated is not None:
                self._close(updated.handle)
                return updated, now
            binding = self.find(binding.id)
            now = self.now(binding)
        raise ToolnexusError(f"task {binding.id} is being changed by other requests; try again")

    def current(self, binding: Binding) -> tuple[Binding, Now]:
        """The task as it is now (a terminal state recorded on the way)."""
        return self.settle(binding, self.now(binding))

    def settled(self, binding: Binding) -> tuple[Binding, Now]:
        """Wait until the run rests (ends, or waits for input), then the task as it is."""
        self.rt.wait(binding.handle)
        return self.current(binding)

    def _close(self, handle: str) -> None:
        try:
            self.rt.close(handle)
        except ToolnexusError:
            log.warning("a2a: the handle %s of an ended task could not be closed", handle, exc_info=True)

    # --- the caller's verbs --------------------------------------------------------------------

    def answer(self, binding: Binding, sent: Sent) -> Binding:
        """The caller's next message on a task that waits for input: the Answer to its
        request, and the message appended to its history.

        Raises:
            RpcError: ``-32602`` a ``contextId`` that is not the task's; ``-32004`` a task
                that has ended, or that is working (it takes a message only when it asks).
        """
        context_id = binding.data.get("contextId")
        if sent.context_id is not None and sent.context_id != context_id:
            raise invalid(f"contextId {sent.context_id[:80]!r} is not the context of task {binding.id}")
        binding, now = self.current(binding)
        if now.terminal:
            raise RpcError(UNSUPPORTED_OPERATION, f"Task {binding.id} is in terminal state: {now.state}")
        if now.request is None:
            raise RpcError(
                UNSUPPORTED_OPERATION,
                f"Task {binding.id} is {now.state}: it takes a message only in {shapes.INPUT_REQUIRED}",
            )
        try:
            self.rt.resume(answer_of(now.request, sent.parts))
        except UnknownRequest:
            raise RpcError(
                UNSUPPORTED_OPERATION, f"Task {binding.id} is not waiting for input any more (answered already)"
            ) from None
        said = {**sent.message, "taskId": binding.id, "contextId": context_id}
        return self._edit(binding, lambda data: {**data, "history": [*data.get("history", []), said]})

    def cancel(self, binding: Binding) -> tuple[Binding, Now]:
        """Cancel a task: record ``CANCELED``, then interrupt its run (a request it waits
        on is cancelled) and close it.

        Raises:
            RpcError: ``-32002``, a task that has ended.
        """
        binding, now = self.current(binding)
        canceled = Now(shapes.CANCELED, "the task was canceled")
        final = {"state": canceled.state, "text": canceled.text, "at": canceled.at}

        def edit(data: dict[str, Any]) -> dict[str, Any]:
            if "final" in data:
                raise RpcError(TASK_NOT_CANCELABLE, f"Task {binding.id} cannot be canceled: it has ended")
            return {**data, "final": final}

        if now.terminal:
            edit(binding.data)
        binding = self._edit(binding, edit)
        try:
            self.rt.interrupt(binding.handle)
        finally:
            try:
                self.rt.close(binding.handle, force=True)
            except ToolnexusError:
                log.warning("a2a: the handle %s of a canceled task could not be closed", binding.handle, exc_info=True)
        return binding, canceled

    def _edit(self, binding: Binding, edit: Any) -> Binding:
        """Change the binding's data with ``edit``, read again after a lost race."""
        for _ in range(ATTEMPTS):
            updated = self._store.update(binding, edit(binding.data))
            if updated is not None:
                return updated
            binding = self.find(binding.id)
        raise ToolnexusError(f"task {binding.id} is being changed by other requests; try again")

    # --- as JSON ----------------------------------------------------------------------------

    def task(self, binding: Binding, now: Now, history_length: int | None = None) -> dict[str, Any]:
        """The ``Task`` as JSON; ``history_length`` keeps that many of the latest messages."""
        context_id = str(binding.data.get("contextId", ""))
        made: dict[str, Any] = {"id": binding.id, "contextId": context_id, "status": self.status(binding, now)}
        if now.state == shapes.COMPLETED:
            made["artifacts"] = [self.artifact(binding, now)]
        history = list(binding.data.get("history", []))
        if history_length is not None:
            history = history[len(history) - history_length :] if history_length else []
        if history:
            made["history"] = history
        return made

    def status(self, binding: Binding, now: Now) -> dict[str, Any]:
        """The task's ``TaskStatus``: waiting for input, the agent's message has the prompt
        and the ``Request`` as a data part; failed or canceled, a text part says why."""
        parts: list[dict[str, Any]] = []
        note_id = ""
        if now.request is not None:
            parts = [shapes.text_part(now.request.prompt), shapes.data_part(to_wire(now.request))]
            note_id = f"{binding.id}.{now.request.id}"
        elif now.state in (shapes.FAILED, shapes.CANCELED) and now.text:
            parts, note_id = [shapes.text_part(now.text)], f"{binding.id}.{now.state.rsplit('_', 1)[-1].lower()}"
        if not parts:
            return shapes.status(now.state, now.at)
        context_id = str(binding.data.get("contextId", ""))
        return shapes.status(
            now.state, now.at, shapes.message(note_id, shapes.AGENT, parts, task_id=binding.id, context_id=context_id)
        )

    def artifact(self, binding: Binding, now: Now) -> dict[str, Any]:
        """A completed task's answer: one artifact whose text is the run's final text."""
        return shapes.artifact(f"{binding.id}.{ANSWER}", ANSWER, [shapes.text_part(now.text)])
