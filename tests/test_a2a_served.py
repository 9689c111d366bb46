"""CONTRACT §22 "Serving": a2a-sdk 1.3.0's own client drives ``toolnexus.a2a.wsgi_app``
under gunicorn (two worker processes, threads, one SQLite state) through every method:
the card, blocking and streamed messages, input required answered (from another process)
and declined, get, cancel, subscribe, and the errors a caller meets."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any, Iterator

import attrs
import pytest

from _a2a_sdk import Caller, artifact_text, kind, message, run, state, status_data
from _gunicorn import free_port, serving

pytest.importorskip("gunicorn")

import httpx  # noqa: E402
from a2a.client import (  # noqa: E402
    A2ACardResolver,
    A2AClientError,
    AgentCardResolutionError,
    ClientConfig,
    ClientFactory,
)
from a2a.types.a2a_pb2 import SendMessageRequest, SubscribeToTaskRequest  # noqa: E402
from a2a.utils.errors import TaskNotCancelableError, TaskNotFoundError, UnsupportedOperationError  # noqa: E402

TESTS = str(Path(__file__).resolve().parent)


@attrs.frozen
class Peer:
    """The app under gunicorn with two workers (``base``), and a second gunicorn of one
    worker on the same state (``other``): a request sent there is served by another process."""

    base: str
    other: str


@pytest.fixture(scope="module")
def peer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Peer]:
    port, other = free_port(), free_port()
    app = f"_a2a_team:app({str(tmp_path_factory.mktemp('a2a') / 'tasks.db')!r})"
    with serving(port, TESTS, app, "-k", "gthread", "--threads", "4"):
        with serving(other, TESTS, app, "-k", "gthread", "--threads", "2", "-w", "1"):
            yield Peer(f"http://127.0.0.1:{port}", f"http://127.0.0.1:{other}")


async def sent(base: str, text: str) -> Any:
    """The task a message of ``text`` from alice rests in."""
    async with Caller(base) as caller:
        return await caller.send(message(text))


def test_the_sdk_client_reads_the_card_the_agent_and_its_team(peer: Peer) -> None:
    async def scenario() -> Any:
        async with Caller(peer.base) as caller:
            return await A2ACardResolver(caller.http, peer.base).get_agent_card()

    card = run(scenario())
    assert card.name == "lead" and card.description == "answers, or asks asker to ship"
    assert [(i.url, i.protocol_binding, i.protocol_version) for i in card.supported_interfaces] == [
        (peer.base + "/", "JSONRPC", "1.0")
    ]
    assert card.capabilities.streaming
    assert [skill.id for skill in card.skills] == ["lead", "asker", "worker"]
    assert all(list(skill.tags) == ["toolnexus"] for skill in card.skills)


def test_a_message_completes_a_task_whose_artifact_is_the_answer(peer: Peer) -> None:
    task = run(sent(peer.base, "hello there"))
    assert state(task) == "TASK_STATE_COMPLETED"
    assert artifact_text(task) == "lead heard: hello there"
    assert [m.parts[0].text for m in task.history] == ["hello there"]
    assert task.history[0].task_id == task.id and task.context_id


def test_a_streamed_message_sends_the_task_then_its_updates_until_it_completes(peer: Peer) -> None:
    async def scenario() -> Any:
        async with Caller(peer.base) as caller:
            return await caller.stream(message("hello stream"))

    events = run(scenario())
    assert [kind(e) for e in events] == [
        "task:TASK_STATE_SUBMITTED",
        "statusUpdate:TASK_STATE_WORKING",
        "artifactUpdate",
        "statusUpdate:TASK_STATE_COMPLETED",
    ]
    assert artifact_text(events) == "lead heard: hello stream"
    assert {e.status_update.task_id for e in events if e.HasField("status_update")} == {events[0].task.id}


def test_input_required_is_answered_on_another_worker_process(peer: Peer) -> None:
    async def scenario() -> tuple[Any, Any, Any, list[int]]:
        async with Caller(peer.base) as caller:
            asked = await caller.send(message("ask ship the order"))
            starter = caller.served_by[-1]
        os.kill(starter, signal.SIGKILL)  # the answer cannot land on the process that started the task
        async with Caller(peer.base) as caller:  # new connections: the old ones went with that process
            answered = await caller.send(message("yes, ship it", asked, data={"note": "fine"}))
            again = await caller.get(asked.id)
            return asked, answered, again, [starter, *caller.served_by]

    asked, answered, again, (starter, *answerers) = run(scenario())
    assert state(asked) == "TASK_STATE_INPUT_REQUIRED"
    request = status_data(asked)
    assert request["kind"] == "approval" and request["prompt"] == "ship it?"
    assert request["data"]["amount"] == 5.0 and request["data"]["path"][-1] == "asker.1"
    assert [p.text for p in asked.status.message.parts if p.HasField("text")] == ["ship it?"]
    assert state(answered) == "TASK_STATE_COMPLETED"
    assert artifact_text(answered) == "lead: asker: approved with {'note': 'fine'}"
    assert [m.parts[0].text for m in answered.history] == ["ask ship the order", "yes, ship it"]
    assert starter not in answerers
    assert state(again) == "TASK_STATE_COMPLETED"


def test_input_required_ends_the_stream_and_a_declining_answer_streams_the_rest(peer: Peer) -> None:
    async def scenario() -> tuple[list[Any], list[Any], Any]:
        async with Caller(peer.base) as caller:
            asked = await caller.stream(message("ask ship the parcel"))
            task = asked[0].task
            answered = await caller.stream(message("no", task, data={"ok": False, "reason": "too late"}))
            return asked, answered, await caller.get(task.id, history_length=0)

    asked, answered, shown = run(scenario())
    assert [kind(e) for e in asked] == [
        "task:TASK_STATE_SUBMITTED",
        "statusUpdate:TASK_STATE_WORKING",
        "statusUpdate:TASK_STATE_INPUT_REQUIRED",
    ]
    assert kind(answered[0]) == "task:TASK_STATE_WORKING"
    assert [kind(e) for e in answered[-2:]] == ["artifactUpdate", "statusUpdate:TASK_STATE_COMPLETED"]
    assert artifact_text(answered) == "lead: asker: too late: ship it?"  # the reason declines it
    assert state(shown) == "TASK_STATE_COMPLETED" and len(shown.history) == 0


def test_return_immediately_answers_at_once_and_a_subscription_follows_the_task(peer: Peer) -> None:
    async def scenario() -> tuple[Any, list[Any]]:
        async with Caller(peer.base) as caller:
            started = await caller.send(message("ask ship at once"), immediately=True)
            followed = await caller.subscribe(started.id)
            return started, followed

    started, followed = run(scenario())
    assert state(started) in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_INPUT_REQUIRED")
    assert kind(followed[0]).startswith("task:") and followed[0].task.id == started.id
    assert kind(followed[-1]).endswith("TASK_STATE_INPUT_REQUIRED")


def test_a_subscription_to_a_task_that_waits_for_input_ends_after_the_task(peer: Peer) -> None:
    async def scenario() -> list[Any]:
        async with Caller(peer.base) as caller:
            asked = await caller.send(message("ask ship twice"))
            return await caller.subscribe(asked.id)

    assert [kind(e) for e in run(scenario())] == ["task:TASK_STATE_INPUT_REQUIRED"]


def test_a_cancel_in_another_process_stops_a_working_task_and_its_subscriber_sees_it(peer: Peer) -> None:
    async def scenario() -> tuple[Any, Any, list[Any], Any]:
        async with Caller(peer.base) as caller, Caller(peer.other) as elsewhere:
            started = await caller.send(message("wait for me"), immediately=True)
            subscription = caller.streaming.subscribe(SubscribeToTaskRequest(id=started.id))
            first = await anext(subscription)  # the subscription is open: it sent the task
            canceled = await elsewhere.cancel(started.id)
            followed = [first] + [event async for event in subscription]
            assert not set(caller.served_by) & set(elsewhere.served_by)
            return started, canceled, followed, await caller.get(started.id)

    started, canceled, followed, shown = run(scenario())
    assert state(started) in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
    assert state(canceled) == "TASK_STATE_CANCELED"
    assert kind(followed[-1]) == "statusUpdate:TASK_STATE_CANCELED"
    assert state(shown) == "TASK_STATE_CANCELED"


def test_cancel_of_a_task_that_waits_for_input_cancels_its_request(peer: Peer) -> None:
    async def scenario() -> tuple[Any, Any, Exception]:
        async with Caller(peer.base) as caller, Caller(peer.other) as elsewhere:
            asked = await caller.send(message("ask ship never"))
            canceled = await elsewhere.cancel(asked.id)
            try:
                await caller.send(message("yes", asked))
            except UnsupportedOperationError as exc:
                return asked, canceled, exc
            raise AssertionError("an answer to a canceled task was taken")

    asked, canceled, refused = run(scenario())
    assert state(asked) == "TASK_STATE_INPUT_REQUIRED"
    assert state(canceled) == "TASK_STATE_CANCELED"
    assert "terminal state: TASK_STATE_CANCELED" in refused.message


def test_a_run_that_fails_is_a_failed_task_that_says_why(peer: Peer) -> None:
    task = run(sent(peer.base, "break it"))
    assert state(task) == "TASK_STATE_FAILED"
    assert "the model broke" in task.status.message.parts[0].text


def test_the_sdk_client_meets_the_errors_it_knows(peer: Peer) -> None:
    async def scenario() -> list[str]:
        seen = []
        async with Caller(peer.base) as alice, Caller(peer.base, "bob") as bob:
            asked = await alice.send(message("ask ship for alice"))
            finished = await alice.send(message("hello"))
            for attempt in (
                bob.get(asked.id),
                bob.cancel(asked.id),
                bob.send(message("yes", asked)),
                alice.cancel(finished.id),
                alice.send(message("more", finished)),
            ):
                try:
                    await attempt
                except (TaskNotFoundError, TaskNotCancelableError, UnsupportedOperationError) as exc:
                    seen.append(type(exc).__name__)
            assert state(await alice.get(asked.id)) == "TASK_STATE_INPUT_REQUIRED"
        return seen

    assert run(scenario()) == [
        "TaskNotFoundError",
        "TaskNotFoundError",
        "TaskNotFoundError",
        "TaskNotCancelableError",
        "UnsupportedOperationError",
    ]


def test_a_caller_authorize_refuses_gets_401_for_the_card_and_every_call(peer: Peer) -> None:
    async def scenario() -> tuple[Exception, Exception]:
        try:
            async with Caller(peer.base, None):
                raise AssertionError("the card was served to a stranger")
        except AgentCardResolutionError as exc:
            card_refused: Exception = exc
        async with Caller(peer.base) as alice, httpx.AsyncClient(timeout=30) as stranger:
            card = await A2ACardResolver(alice.http, peer.base).get_agent_card()  # read with alice's login
            client = ClientFactory(ClientConfig(streaming=False, httpx_client=stranger)).create(card)
            try:
                async for _ in client.send_message(SendMessageRequest(message=message("hello"))):
                    pass
            except A2AClientError as exc:
                return card_refused, exc
        raise AssertionError("a stranger's message was taken")

    card_refused, call_refused = run(scenario())
    assert getattr(card_refused, "status_code", None) == 401
    assert "HTTP Error 401" in str(call_refused)
