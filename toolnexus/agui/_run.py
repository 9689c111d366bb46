"""One AG-UI run, from its ``RUN_STARTED`` to exactly one ``RUN_FINISHED`` or ``RUN_ERROR``.

The run watches its thread's handle from the event before it acted, until the handle
settles or rests (``_port.watch``): it never holds a server thread while a person decides.
A frontend call of the same model step the input answered already is resumed here, in the
same run. Before the last event the thread's binding records what the next input must
answer. Closed before its end (the server does when the client goes), it interrupts the
thread's turn, which can run again after.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Generator

import attrs

from .._serve import Refused, bindings_of, change
from ..data import AgentResult, Answer, Request
from ..errors import ToolnexusError, UnknownRequest
from . import _port
from ._thread import FRONTEND, Started
from ._translate import Translator, asker, event, interrupt, path_to

if TYPE_CHECKING:
    from .._team.runtime import Runtime

log = logging.getLogger("toolnexus")

#: The AG-UI protocol version this server speaks, declared on ``RUN_STARTED``.
PROTOCOL_VERSION = "1.0"

class Run:
    """The items of one started run (see the module's docstring); an iterator that can be
    closed at any time, also before its first item."""

    def __init__(self, started: Started, wait: float | None) -> None:
        self._started = started
        self._wait = wait
        self._rt: Runtime = started.plan.rt
        self._done = False
        self._items = self._run()

    def __iter__(self) -> Run:
        return self

    def __next__(self) -> dict[str, Any] | None:
        return next(self._items)

    def close(self) -> None:
        """Stop; a run that has not ended interrupts its thread's turn."""
        self._items.close()
        self._started.watch.close()  # when nothing was read yet
        if not self._done:
            self._done = True
            self._interrupt()

    def _interrupt(self) -> None:
        try:
            self._rt.interrupt(self._started.handle)
        except ToolnexusError as exc:  # a closed thread, a state that went away: nothing left to stop
            run = self._started.plan.input.run_id
            log.warning("AG-UI run %s: could not interrupt thread %s: %s", run, self._started.handle, exc)

    def _run(self) -> Generator[dict[str, Any] | None, None, None]:
        started, run_input = self._started, self._started.plan.input
        spans = dict(started.binding.data.get("spans") or {})
        frontend = {tool.name for tool in run_input.tools}
        translator = Translator(started.tree, spans=spans, frontend=frontend, answered=started.plan.answered)
        ids = {"threadId": run_input.thread_id, "runId": run_input.run_id}
        yield event("RUN_STARTED", **ids, protocolVersion=PROTOCOL_VERSION)
        try:
            yield event("STATE_SNAPSHOT", snapshot=started.snapshot)
            yield from translator.restart(self._waiting_path())
            result = yield from self._follow(translator)
            last = self._last(translator, result)
        except Exception as exc:  # the stream failed (a state gone, a bug): the run stops, and says so
            log.warning("AG-UI run %s of thread %s failed", run_input.run_id, started.handle, exc_info=True)
            self._interrupt()
            said = str(exc) if isinstance(exc, ToolnexusError) else f"the server failed ({type(exc).__name__})"
            last = [event("RUN_ERROR", message=said, code="internal")]
        self._done = True  # the last events are the run's end: a client that goes now stops nothing
        yield from last

    def _waiting_path(self) -> list[str]:
        """A resumed run's handles from the thread's down to the one that asked."""
        asked, thread = self._started.plan.request, self._started.handle
        return [each for each in path_to(asked) if each.startswith(thread + "/")] if asked is not None else []

    def _follow(self, translator: Translator) -> Generator[dict[str, Any] | None, None, AgentResult | None]:
        """The run's events until the thread's handle rests; returns its result."""
        after, stashed = self._started.cursor, dict(self._started.plan.stashed)
        watched = self._started.watch
        while True:
            try:
                while True:
                    try:
                        item = watched.next_event(self._wait)
                    except StopIteration:
                        break
                    if item is None:
                        yield None
                        continue
                    after = item.id
                    yield from translator.on(item)
            finally:
                watched.close()
            result: AgentResult | None = watched.result
            answer = self._answered_already(translator, stashed)
            if answer is None:
                return result
            watched = _port.watch(self._rt, self._started.handle, after)  # before: its model calls stream
            try:
                self._rt.resume(answer)
            except UnknownRequest:
                watched.close()
                return result

    def _answered_already(self, translator: Translator, stashed: dict[str, Answer]) -> Answer | None:
        """The answer the input gave for the frontend call the thread now waits on, if any."""
        request = translator.pending.get(self._started.handle)
        if request is None or request.kind != FRONTEND:
            return None
        call = str((request.data or {}).get("call") or "")
        given = stashed.pop(call, None)
        if given is None:
            return None
        translator.pending.pop(self._started.handle, None)
        return attrs.evolve(given, id=request.id)

    def _last(self, translator: Translator, result: AgentResult | None) -> list[dict[str, Any]]:
        """The events that end the run: what is still open, then its outcome."""
        run_input, thread = self._started.plan.input, self._started.handle
        status = result.status if result is not None else "closed"
        closing = translator.close()
        request = None
        if status == "pending":
            request = translator.pending.get(thread) or self._rt.inspect(thread).pending
        pending_calls = _calls_pending(translator, request) if request and _frontend(request, thread) else []
        self._record(translator, pending_calls, request)
        ids = {"threadId": run_input.thread_id, "runId": run_input.run_id}
        return closing + [_end(ids, status, result, request, pending_calls, thread)]

    def _record(self, translator: Translator, pending_calls: list[str], request: Request | None) -> None:
        """What the thread's next input must answer, in its binding (before the run's last
        event, so the input that answers it finds it on any worker)."""
        path = set(path_to(request)) if request is not None else set()

        def edit(binding: Any) -> dict[str, Any]:
            data = dict(binding.data)
            data["pending"] = pending_calls
            data["calls"] = [*(data.get("calls") or ()), *translator.calls]
            data["spans"] = {key: value for key, value in translator.spans.items() if key in path}
            return data

        binding = self._started.binding
        try:
            change(bindings_of(self._rt), binding.surface, binding.principal, binding.id, edit)
        except Refused as refused:  # the thread went (pruned), or others keep changing it
            log.warning("AG-UI thread %s: its next input may not find this run's end: %s", binding.id, refused.reason)


def _end(
    ids: dict[str, str],
    status: str,
    result: AgentResult | None,
    request: Request | None,
    pending_calls: list[str],
    thread: str,
) -> dict[str, Any]:
    """The run's last event, for how its thread's turn came to rest."""
    if status == "done":
        return event("RUN_FINISHED", **ids, outcome={"type": "success"}, result=result.text if result else None)
    if pending_calls:
        return event("RUN_FINISHED", **ids, outcome={"type": "success", "pendingToolCallIds": pending_calls})
    if request is not None:
        return event("RUN_FINISHED", **ids, outcome={"type": "interrupt", "interrupts": [interrupt(request, thread)]})
    if status == "interrupted":
        return event("RUN_FINISHED", **ids, outcome={"type": "cancelled"})
    text = result.text if result is not None and result.text else f"the run ended {status}"
    return event("RUN_ERROR", message=text, code=status)


def _frontend(request: Request | None, thread: str) -> bool:
    """Whether the thread's agent waits on one of its frontend calls."""
    return request is not None and request.kind == FRONTEND and asker(request) in (None, thread)


def _calls_pending(translator: Translator, request: Request) -> list[str]:
    calls = list(translator.frontend_open)
    halted = str((request.data or {}).get("call") or "")
    if halted and halted not in calls:
        calls.insert(0, halted)
    return calls


