"""A run's events (CONTRACT §16) as AG-UI 1.0 events (CONTRACT §21): wire dicts, camelCase,
an optional field left out rather than ``null``.

- A model step's text is one message: ``TEXT_MESSAGE_START`` at its first piece, one
  ``TEXT_MESSAGE_CONTENT`` per piece, ``TEXT_MESSAGE_END`` with the step's ``message``.
- A tool call is ``TOOL_CALL_START/ARGS/END`` when it starts (its parent message is its
  step's) and ``TOOL_CALL_RESULT`` when it finishes; a frontend call gets no result.
- A teammate is a span: ``SUBAGENT_STARTED`` when its ``task`` call spawns it,
  ``SUBAGENT_FINISHED``/``SUBAGENT_ERROR`` at its result. Every event of a handle carries
  the ``subagentRunId`` of the nearest span at or above it (none for the thread's agent).
- The tree: a ``STATE_DELTA`` after each change (``_tree``).

Ids a client keys its history by are random and never reused: a message id per model step
and per tool result. A ``toolCallId`` is the model's own call id.
"""

from __future__ import annotations

import json
from typing import Any

from .._serve import new_id
from ..data import AgentResult, Event, Request
from ..wire import from_wire, to_wire
from ._tree import TreeState


def event(kind: str, **fields: Any) -> dict[str, Any]:
    """One AG-UI event; fields that are ``None`` are left out."""
    return {"type": kind, **{key: value for key, value in fields.items() if value is not None}}


class Translator:
    """The AG-UI events of one run of a thread whose agent's handle is ``thread``.

    ``spans`` is what the thread knows of its teammates' spans (from earlier runs: a
    resumed run starts those on the waiting path again); ``frontend`` the names of the
    tools the client runs, and ``answered`` the calls of them the input has the results of
    (a frontend call gets no ``TOOL_CALL_RESULT``: the client's own tool message is it).
    """

    def __init__(
        self, tree: TreeState, *, spans: dict[str, dict[str, Any]], frontend: set[str], answered: tuple[str, ...] = ()
    ) -> None:
        self.thread = tree.thread
        self.tree = tree
        self.spans = {key: dict(value) for key, value in spans.items()}
        self._frontend = frontend
        self._texts: dict[str, str] = {}  # handle -> its open text message
        self._steps: dict[str, str] = {}  # handle -> the message of its latest model step
        self._tasks: dict[str, list[tuple[str, str, str]]] = {}  # handle -> task calls no child claimed yet
        self._started: set[str] = set()  # spans started in this run (open or finished)
        self._open: list[str] = []  # open spans, outermost first
        self.pending: dict[str, Request] = {}  # handle -> the request it suspended on
        #: The thread agent's calls streamed in this run, and its frontend calls still open.
        self.calls: list[str] = []
        self.frontend_open: list[str] = []
        self._hosted = set(answered)  # frontend calls: their results are the client's own messages

    # --- a run's first and last events ---------------------------------------------------------

    def restart(self, path: list[str]) -> list[dict[str, Any]]:
        """A resumed run starts the spans on the way to the handle that waited again,
        outermost first (a span is started once per run)."""
        out: list[dict[str, Any]] = []
        for handle in path:
            if handle != self.thread and handle not in self._started:
                known = self.spans.get(handle) or {}
                name = str(known.get("name") or handle.rsplit("/", 1)[-1].rsplit(".", 1)[0])
                out.append(self._start_span(handle, name, known.get("call")))
        return out

    def close(self) -> list[dict[str, Any]]:
        """What closes the run's open messages and spans, innermost first: before its end."""
        out = [
            event("TEXT_MESSAGE_END", messageId=message, subagentRunId=self.tag(handle))
            for handle, message in self._texts.items()
        ]
        self._texts.clear()
        while self._open:
            span = self._open[-1]
            out.extend(self._end_span(span, self.pending.get(span)))
        return out

    # --- one event -------------------------------------------------------------------------------

    def on(self, item: Event) -> list[dict[str, Any]]:
        """The AG-UI events for one event of the run."""
        handle = item.handle or self.thread
        read = getattr(self, f"_on_{item.kind}", None)
        return read(handle, item.data) if read is not None else []

    def _on_text(self, handle: str, data: dict[str, Any]) -> list[dict[str, Any]]:
        delta = str(data.get("delta") or "")
        if not delta:
            return []
        out = []
        message = self._texts.get(handle)
        if message is None:
            message = self._texts[handle] = self._steps[handle] = new_id()
            out.append(event("TEXT_MESSAGE_START", messageId=message, role="assistant", subagentRunId=self.tag(handle)))
        out.append(event("TEXT_MESSAGE_CONTENT", messageId=message, delta=delta, subagentRunId=self.tag(handle)))
        return out

    def _on_retry(self, handle: str, data: dict[str, Any]) -> list[dict[str, Any]]:
        """A step asked again: what it wrote so far stays a message of its own."""
        message = self._texts.pop(handle, None)
        return [] if message is None else [event("TEXT_MESSAGE_END", messageId=message, subagentRunId=self.tag(handle))]

    def _on_message(self, handle: str, data: dict[str, Any]) -> list[dict[str, Any]]:
        tag = self.tag(handle)
        message = self._texts.pop(handle, None)
        if message is not None:
            out = [event("TEXT_MESSAGE_END", messageId=message, subagentRunId=tag)]
        else:
            message = self._steps[handle] = new_id()  # the message the step's tool calls belong to
            text = str(data.get("text") or "")
            out = [] if not text else [
                event("TEXT_MESSAGE_START", messageId=message, role="assistant", subagentRunId=tag),
                event("TEXT_MESSAGE_CONTENT", messageId=message, delta=text, subagentRunId=tag),
                event("TEXT_MESSAGE_END", messageId=message, subagentRunId=tag),
            ]
        return out + self._delta(self.tree.lineage(handle), handle)

    def _on_tool_call(self, handle: str, data: dict[str, Any]) -> list[dict[str, Any]]:
        call, name, tag = str(data.get("id")), str(data.get("name")), self.tag(handle)
        arguments = data.get("arguments")
        arguments = arguments if isinstance(arguments, str) else json.dumps(arguments or {}, ensure_ascii=False)
        if name == "task":
            self._tasks.setdefault(handle, []).append((call, *_task_key(arguments)))
        if handle == self.thread:
            self.calls.append(call)
            if name in self._frontend:
                self.frontend_open.append(call)
                self._hosted.add(call)
        parent = self._steps.get(handle)
        out = [event("TOOL_CALL_START", toolCallId=call, toolCallName=name, parentMessageId=parent, subagentRunId=tag)]
        if arguments:
            out.append(event("TOOL_CALL_ARGS", toolCallId=call, delta=arguments, subagentRunId=tag))
        out.append(event("TOOL_CALL_END", toolCallId=call, subagentRunId=tag))
        return out

    def _on_tool_result(self, handle: str, data: dict[str, Any]) -> list[dict[str, Any]]:
        call = str(data.get("id"))
        if call in self.frontend_open:
            self.frontend_open.remove(call)
        if call in self._hosted and handle == self.thread:
            return []
        content = str(data.get("output") or "")
        tag = self.tag(handle)
        fields = {"messageId": new_id(), "toolCallId": call, "content": content, "role": "tool", "subagentRunId": tag}
        return [event("TOOL_CALL_RESULT", **fields)]

    def _on_spawn(self, handle: str, data: dict[str, Any]) -> list[dict[str, Any]]:
        child, agent = str(data.get("child")), str(data.get("agent"))
        if child in self._started:  # a resumed task call reattached to its child: one span per run
            return []
        waiting = self._tasks.get(handle) or []
        key = (agent, str(data.get("prompt")))
        call = next((each for each in waiting if each[1:] == key), None)
        if call is not None:
            waiting.remove(call)
        known = (self.spans.get(child) or {}).get("call")
        return [self._start_span(child, agent, call[0] if call is not None else known)] + self._delta([child], child)

    def _on_state(self, handle: str, data: dict[str, Any]) -> list[dict[str, Any]]:
        return self._delta([handle], handle)

    def _on_pending(self, handle: str, data: dict[str, Any]) -> list[dict[str, Any]]:
        request = data.get("request")
        if isinstance(request, dict):
            self.pending[handle] = from_wire(Request, request)
        return []

    def _on_result(self, handle: str, data: dict[str, Any]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if handle in self._open:
            message = self._texts.pop(handle, None)
            if message is not None:
                out.append(event("TEXT_MESSAGE_END", messageId=message, subagentRunId=self.tag(handle)))
            result = AgentResult(text=str(data.get("text") or ""), status=str(data.get("status")))
            while handle in self._open:  # spans it opened below it first (none, normally)
                out.extend(self._end_span(self._open[-1], self.pending.get(self._open[-1]), result))
        return out + self._delta(self.tree.lineage(handle), handle)

    # --- spans and attribution -------------------------------------------------------------------

    def tag(self, handle: str) -> str | None:
        """The span an event of ``handle`` belongs to: the nearest started one at or above it."""
        while handle != self.thread and handle.startswith(self.thread + "/"):
            if handle in self._started:
                return handle
            handle = handle.rsplit("/", 1)[0]
        return None

    def _start_span(self, child: str, agent: str, call: Any) -> dict[str, Any]:
        parent = self.tag(child.rsplit("/", 1)[0])
        self._started.add(child)
        self._open.append(child)
        self.spans[child] = {"name": agent, **({"call": call} if call else {})}
        called = call or None
        return event(
            "SUBAGENT_STARTED", subagentRunId=child, name=agent, parentToolCallId=called, parentSubagentRunId=parent
        )

    def _end_span(self, span: str, request: Request | None, result: AgentResult | None = None) -> list[dict[str, Any]]:
        self._open.remove(span)
        status = result.status if result is not None else "pending" if request is not None else "done"
        if status == "pending":
            own = request is not None and asker(request) == span
            outcome = {"type": "suspended", **({"interruptIds": [request.id]} if own and request else {})}
            return [event("SUBAGENT_FINISHED", subagentRunId=span, outcome=outcome)]
        if status == "done":
            text = result.text if result is not None else None
            return [event("SUBAGENT_FINISHED", subagentRunId=span, outcome={"type": "success"}, result=text)]
        text = result.text if result is not None and result.text else status
        return [event("SUBAGENT_ERROR", subagentRunId=span, message=text, code=status)]

    def _delta(self, handles: list[str], by: str) -> list[dict[str, Any]]:
        ops = self.tree.patch(handles)
        return [event("STATE_DELTA", delta=ops, subagentRunId=self.tag(by))] if ops else []


def _task_key(arguments: str) -> tuple[str, str]:
    """A ``task`` call's ``(agent, prompt)``, as its child's ``spawn`` event names them."""
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return "", ""
    if not isinstance(parsed, dict):
        return "", ""
    return str(parsed.get("agent")), str(parsed.get("prompt"))


def asker(request: Request) -> str | None:
    """The handle whose own tool asked ``request`` (the runtime stamps its path on it)."""
    path = (request.data or {}).get("path")
    return "/".join(str(part) for part in path) if isinstance(path, list) and path else None


def path_to(request: Request) -> list[str]:
    """The handles from the root down to the one that asked ``request``."""
    found = asker(request)
    if found is None:
        return []
    parts = found.split("/")
    return ["/".join(parts[:end]) for end in range(1, len(parts) + 1)]


def interrupt(request: Request, thread: str) -> dict[str, Any]:
    """A pending request as an AG-UI ``Interrupt`` (the request itself under metadata)."""
    asked = asker(request) or thread
    return {
        "id": request.id,
        "reason": request.kind,
        "message": request.prompt,
        **({"subagentRunId": asked} if asked != thread else {}),
        **({"expiresAt": request.expires_at} if request.expires_at else {}),
        "metadata": {"toolnexus": {"request": to_wire(request)}},
    }
