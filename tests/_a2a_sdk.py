"""The a2a-sdk 1.3.0 client, as the A2A tests drive a peer with it (asyncio lives here, in
the tests, never in the package).

``Caller(base, user)`` opens a blocking client (``SendMessage``) and a streaming one
(``SendStreamingMessage``, ``SubscribeToTask``) on one ``httpx.AsyncClient`` that carries
the caller's ``Authorization`` and a 30 s timeout (the SDK's own default is 5 s), and
notes which process served each answer (``X-Served-By``).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, Coroutine, TypeVar

import pytest

httpx = pytest.importorskip("httpx")
pytest.importorskip("a2a.client")

from a2a.client import ClientConfig, ClientFactory  # noqa: E402
from a2a.helpers import new_data_part, new_text_part  # noqa: E402
from a2a.types.a2a_pb2 import (  # noqa: E402
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from google.protobuf.json_format import MessageToDict  # noqa: E402

T = TypeVar("T")
#: How long one scenario may take before the test fails rather than hangs.
SCENARIO_S = 60.0


def run(scenario: Coroutine[Any, Any, T]) -> T:
    """Run one async scenario to its end, failing it after ``SCENARIO_S``."""
    return asyncio.run(asyncio.wait_for(scenario, SCENARIO_S))


def state(task: Task) -> str:
    return TaskState.Name(task.status.state)


def message(text: str | None = None, task: Task | None = None, data: Any = None) -> Message:
    """A user message: a text part and/or a data part, on ``task`` when given."""
    parts = ([new_text_part(text)] if text is not None else []) + ([new_data_part(data)] if data is not None else [])
    made = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, parts=parts)
    if task is not None:
        made.task_id, made.context_id = task.id, task.context_id
    return made


def kind(event: Any) -> str:
    """``task:STATE``, ``statusUpdate:STATE``, ``artifactUpdate`` or ``message`` for one
    StreamResponse."""
    for name, field in (("task", "task"), ("statusUpdate", "status_update")):
        if event.HasField(field):
            return f"{name}:{TaskState.Name(getattr(event, field).status.state)}"
    return "artifactUpdate" if event.HasField("artifact_update") else "message"


def artifact_text(task_or_events: Any) -> str:
    """The answer's text: a task's artifacts, or a stream's artifact updates, joined."""
    if isinstance(task_or_events, Task):
        artifacts = list(task_or_events.artifacts)
    else:
        artifacts = [e.artifact_update.artifact for e in task_or_events if e.HasField("artifact_update")]
    return "".join(part.text for artifact in artifacts for part in artifact.parts if part.HasField("text"))


def status_data(task: Task) -> dict[str, Any]:
    """The first data part of a task's status message, as JSON."""
    parts = [p for p in task.status.message.parts if p.HasField("data")]
    return MessageToDict(parts[0].data) if parts else {}


class Caller:
    """The SDK's clients of one caller (see the module's docstring)."""

    def __init__(self, base: str, user: str | None = "alice", **headers: str) -> None:
        self.base = base
        self.served_by: list[int] = []
        if user is not None:
            headers.setdefault("Authorization", f"Bearer {user}")
        self._headers = headers

    async def __aenter__(self) -> Caller:
        async def note(response: Any) -> None:
            self.served_by.append(int(response.headers.get("x-served-by", 0)))

        self.http = httpx.AsyncClient(timeout=30, headers=self._headers, event_hooks={"response": [note]})
        self.blocking = await ClientFactory(ClientConfig(streaming=False, httpx_client=self.http)).create_from_url(
            self.base
        )
        self.streaming = await ClientFactory(ClientConfig(httpx_client=self.http)).create_from_url(self.base)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.http.aclose()

    async def send(self, sent: Message, *, immediately: bool = False) -> Task:
        request = SendMessageRequest(message=sent)
        if immediately:
            request.configuration.return_immediately = True
        events = [event async for event in self.blocking.send_message(request)]
        assert len(events) == 1 and events[0].HasField("task"), events
        return events[0].task

    async def stream(self, sent: Message) -> list[Any]:
        return [event async for event in self.streaming.send_message(SendMessageRequest(message=sent))]

    async def subscribe(self, task_id: str) -> list[Any]:
        return [event async for event in self.streaming.subscribe(SubscribeToTaskRequest(id=task_id))]

    async def get(self, task_id: str, history_length: int | None = None) -> Task:
        request = GetTaskRequest(id=task_id)
        if history_length is not None:
            request.history_length = history_length
        return await self.blocking.get_task(request)

    async def cancel(self, task_id: str) -> Task:
        return await self.blocking.cancel_task(CancelTaskRequest(id=task_id))
