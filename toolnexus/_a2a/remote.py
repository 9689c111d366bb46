"""One task of a remote teammate (CONTRACT §22 "Calling"): the prompt sent as a message,
the task followed until it rests, and what it rests in as the teammate's outcome.

- ``TASK_STATE_COMPLETED``: done, its artifacts' text (else its status message's text);
  a direct ``{"message"}`` answer is done with that message's text.
- ``TASK_STATE_INPUT_REQUIRED`` (or ``AUTH_REQUIRED``): pending on a ``Request`` of kind
  ``"a2a"``: the status message's text as the prompt, ``data = {"taskId", "contextId",
  "url", "data": <its first data part or None>}``. The ``Answer`` goes back as a message on
  that task: a text part (``answer.data["text"]`` when given, else ``approved`` or
  ``declined``) and a data part, the Answer's JSON.
- ``FAILED``, ``REJECTED``, ``CANCELED``, or any failure of the exchange: an error naming
  the peer's URL and the cause; never an exception.

A streaming peer is sent ``SendStreamingMessage``: its first frame names the task, which
is noted at once (``note``), so that an interrupt can cancel it and a turn continued
after a crash follows the same task instead of starting another. A stream that ends
before the task rests is followed again (``GetTask``, then ``SubscribeToTask``), a few
times. An interrupt (``check`` saying the turn was interrupted, here or in another
process) sends ``CancelTask`` and raises ``Cancelled``; a turn whose scope is cancelled
while it is still its process's (the runtime lets go of a state) raises ``Cancelled``
and leaves the task to the process that continues the turn.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Iterator

import attrs

from ..data import Answer, Request, make_request
from ..errors import Cancelled
from .._model.cancel import CancelScope
from ..wire import to_wire
from . import rpc, shapes
from .peer import CANCEL_TIMEOUT_S, Card, Cards, Link, Peer, PeerError

log = logging.getLogger("toolnexus")

#: The states a remote task rests in: ended, or waiting for its caller.
RESTING = shapes.TERMINAL | shapes.INTERRUPTED
#: How many times a task whose stream ended before it rested is followed again.
FOLLOW_AGAIN = 3
#: What ``check`` says when the turn is not this process's any more; and why a turn that
#: is still its own stops (its runtime lets go).
INTERRUPTED, TAKEN_OVER, LET_GO = "interrupted", "taken over", "let go"


@attrs.frozen
class Outcome:
    """What a remote task rested in, as a teammate's result: ``status`` is ``done``,
    ``pending`` (with ``request``) or ``error``."""

    status: str
    text: str
    request: Request | None = None


def answer_parts(answer: Answer) -> list[dict[str, Any]]:
    """An Answer as the parts of the message that carries it to the remote task."""
    given = answer.data.get("text") if isinstance(answer.data, dict) else None
    text = given if isinstance(given, str) and given else ("approved" if answer.ok else "declined")
    return [shapes.text_part(text), shapes.data_part(to_wire(answer))]


class Tracker:
    """A remote task as its frames (or a ``GetTask``) show it: its ids, state, status
    message and artifacts (chunks with ``append`` continue an artifact's parts)."""

    def __init__(self, task_id: str | None = None, context_id: str | None = None) -> None:
        self.task_id = task_id
        self.context_id = context_id
        self.state: str | None = None
        self.note: dict[str, Any] | None = None
        self.artifacts: dict[str, list[dict[str, Any]]] = {}
        self.message: dict[str, Any] | None = None

    def take(self, result: Any) -> None:
        """One result: ``{"task"}``, ``{"statusUpdate"}``, ``{"artifactUpdate"}`` or
        ``{"message"}``.

        Raises:
            PeerError: none of them (the caller names the peer).
        """
        if not isinstance(result, dict):
            raise PeerError("a result that is not an object")
        if isinstance(result.get("task"), dict):
            task = result["task"]
            self._ids(task.get("id"), task.get("contextId"))
            self._status(task.get("status"))
            for artifact in task.get("artifacts") or []:
                self._artifact(artifact, append=False)
        elif isinstance(result.get("statusUpdate"), dict):
            update = result["statusUpdate"]
            self._ids(update.get("taskId"), update.get("contextId"))
            self._status(update.get("status"))
        elif isinstance(result.get("artifactUpdate"), dict):
            update = result["artifactUpdate"]
            self._ids(update.get("taskId"), update.get("contextId"))
            self._artifact(update.get("artifact"), append=update.get("append") is True)
        elif isinstance(result.get("message"), dict):
            self.message = result["message"]
        else:
            raise PeerError("a result that is none of task, statusUpdate, artifactUpdate, message")

    @property
    def resting(self) -> bool:
        return self.message is not None or self.state in RESTING

    def _ids(self, task_id: Any, context_id: Any) -> None:
        if isinstance(task_id, str) and task_id and self.task_id is None:
            self.task_id = task_id
        if isinstance(context_id, str) and context_id:
            self.context_id = context_id

    def _status(self, status: Any) -> None:
        if not isinstance(status, dict) or not isinstance(status.get("state"), str):
            raise PeerError("a task status without a state")
        self.state = status["state"]
        note = status.get("message")
        self.note = note if isinstance(note, dict) else None

    def _artifact(self, artifact: Any, *, append: bool) -> None:
        if not isinstance(artifact, dict):
            raise PeerError("an artifact update without its artifact")
        parts = [part for part in artifact.get("parts") or [] if isinstance(part, dict)]
        key = str(artifact.get("artifactId", ""))
        self.artifacts[key] = [*self.artifacts.get(key, []), *parts] if append else parts

    def outcome(self, peer: Peer) -> Outcome:
        """The teammate's outcome from the state the task rests in."""
        note_parts = _parts(self.note)
        if self.message is not None:
            return Outcome("done", shapes.text_of(_parts(self.message)))
        if self.state == shapes.COMPLETED:
            answer = "".join(shapes.text_of(parts) for parts in self.artifacts.values())
            if not answer:  # no text: the status message's, else what the artifacts hold (data as JSON)
                parts = [part for each in self.artifacts.values() for part in each]
                answer = shapes.text_of(note_parts) or shapes.prompt_of(parts)
            return Outcome("done", answer)
        if self.state in shapes.INTERRUPTED:
            _, value = shapes.first_data(note_parts)
            data = {"taskId": self.task_id, "contextId": self.context_id, "url": peer.url, "data": value}
            prompt = shapes.text_of(note_parts) or f"the remote agent at {peer.where} asks for input"
            return Outcome("pending", prompt, make_request("a2a", prompt, data=data))
        said = shapes.text_of(note_parts)
        ended = f"a2a peer {peer.where}: task {self.task_id} ended {self.state}"
        return Outcome("error", f"{ended}: {said}" if said else ended)


def _parts(message: dict[str, Any] | None) -> list[dict[str, Any]]:
    parts = message.get("parts") if isinstance(message, dict) else None
    return [part for part in parts if isinstance(part, dict)] if isinstance(parts, list) else []


class RemoteTask:
    """The exchanges of one turn with one remote task (see the module's docstring).

    ``note(task_id, context_id)`` is told the task as soon as it is known; ``check()``
    says whether the turn was interrupted or taken over by another process (``None``: it
    is still this one's).
    """

    def __init__(
        self,
        peer: Peer,
        card: Card,
        scope: CancelScope,
        *,
        note: Callable[[str, str], None],
        check: Callable[[], str | None],
        task_id: str | None = None,
        context_id: str | None = None,
    ) -> None:
        self.peer = peer
        self.card = card
        self._scope = scope
        self._note = note
        self._check = check
        self._link = Link(peer, card.endpoint, scope)
        self.tracker = Tracker(task_id, context_id)
        self._noted = task_id is not None

    def start(self, prompt: str, message_id: str) -> Outcome:
        """Send the prompt as a new task and follow it until it rests."""
        message = shapes.message(message_id, shapes.USER, [shapes.text_part(prompt)])
        return self._send(message)

    def answer(self, request: Request, answer: Answer, message_id: str) -> Outcome:
        """Send ``answer`` on the task ``request`` is about, and follow it until it rests."""
        data = request.data or {}
        self.tracker = Tracker(data.get("taskId"), data.get("contextId"))
        self._noted = True
        self.tracker.state = None
        message = shapes.message(
            message_id, shapes.USER, answer_parts(answer), task_id=self.tracker.task_id,
            context_id=self.tracker.context_id,
        )
        return self._send(message)

    def follow(self) -> Outcome:
        """Follow the known task from where it is now (a turn continued after a crash)."""
        return self._guarded(self._rest)

    def cancel(self) -> None:
        """``CancelTask`` for the task, if it is known (best effort: an ended task, or a
        peer that cannot be reached, is only logged)."""
        task_id = self.tracker.task_id
        if task_id is None:
            return
        try:
            Link(self.peer, self.card.endpoint, None, timeout=CANCEL_TIMEOUT_S).call("CancelTask", {"id": task_id})
        except PeerError as exc:
            log.info("a2a: the remote task %s was not canceled: %s", task_id, exc)

    def _send(self, message: dict[str, Any]) -> Outcome:
        def exchange() -> Outcome:
            if self.card.streaming:
                self._take_all(self._link.stream("SendStreamingMessage", {"message": message, "configuration": {}}))
            else:
                self._take_all(iter([self._link.call("SendMessage", {"message": message})]))
            return self._rest()

        return self._guarded(exchange)

    def _guarded(self, exchange: Callable[[], Outcome]) -> Outcome:
        """An exchange whose failures are an error outcome naming the peer, and whose
        interrupt cancels the remote task."""
        try:
            return exchange()
        except PeerError as exc:
            self._stop_if_interrupted()
            text = str(exc)
            return Outcome("error", text if text.startswith("a2a peer ") else f"a2a peer {self.peer.where}: {text}")

    def _take_all(self, results: Iterator[Any]) -> None:
        for result in results:
            self._stop_if_interrupted()
            self.tracker.take(result)
            tracker = self.tracker
            if not self._noted and tracker.task_id is not None:
                self._noted = True
                self._note(tracker.task_id, tracker.context_id or "")
        self._stop_if_interrupted()

    def _rest(self) -> Outcome:
        """The outcome once the task rests, following it again when its stream ended
        before."""
        tracker = self.tracker
        for _ in range(FOLLOW_AGAIN):
            if tracker.resting:
                break
            if tracker.task_id is None:
                raise PeerError("the reply ended before it named its task")
            self._read(tracker.task_id)
            if not tracker.resting:
                if not self.card.streaming:
                    raise PeerError(f"task {tracker.task_id} is still {tracker.state}; try again later")
                self._subscribe(tracker.task_id)
        if not tracker.resting and tracker.task_id is not None:
            self._read(tracker.task_id)  # the last stream may have ended as the task did
        if not tracker.resting:
            raise PeerError(f"task {tracker.task_id} did not rest: its streams ended while it was {tracker.state}")
        return tracker.outcome(self.peer)

    def _read(self, task_id: str) -> None:
        self._take_all(iter([{"task": self._link.call("GetTask", {"id": task_id})}]))

    def _subscribe(self, task_id: str) -> None:
        """Follow the task's stream; one that ended since it was read (``-32004``) is read
        again by the caller."""
        try:
            self._take_all(self._link.stream("SubscribeToTask", {"id": task_id}))
        except PeerError as exc:
            if exc.code != rpc.UNSUPPORTED_OPERATION:
                raise

    def _stop_if_interrupted(self) -> None:
        """An interrupt, of this process's or another's (``check`` says so): cancel the
        remote task and stop. Taken over by another process, or the scope cancelled while
        the turn is still this process's (its runtime lets go of a state): stop, leaving
        the task to whoever continues the turn."""
        why = self._check()
        if why is None and self._scope.cancelled:
            why = LET_GO
        if why is None:
            return
        if why == INTERRUPTED:
            self.cancel()
        raise Cancelled(f"a remote task of {self.peer.where} was {why}")


def run(
    peer: Peer,
    cards: Cards,
    scope: CancelScope,
    *,
    prompt: str,
    message_id: str,
    resume: tuple[Request, Answer] | None,
    known: tuple[str, str] | None,
    note: Callable[[str, str], None],
    check: Callable[[], str | None],
    wait_for: Callable[[Request], Answer] | None = None,
    rounds: int = 1,
) -> Outcome:
    """One turn of a remote teammate: answer its task (``resume``), follow the task it
    started before (``known``: continued after a crash), or start one on ``prompt``; while
    it asks and ``wait_for`` is given, answer it (at most ``rounds`` exchanges in all).

    Raises:
        Cancelled: the turn was interrupted (the remote task is canceled) or taken over.
    """
    try:
        card = cards.get(peer, scope)
    except PeerError as exc:
        if scope.cancelled:
            raise Cancelled(f"interrupted while reading the card of {peer.where}") from None
        return Outcome("error", str(exc))
    task = RemoteTask(peer, card, scope, note=note, check=check, **_ids(known))
    if resume is not None:
        outcome = task.answer(*resume, message_id)
    elif known is not None:
        outcome = task.follow()
    else:
        outcome = task.start(prompt, message_id)
    for round_ in range(1, rounds):
        if outcome.status != "pending" or wait_for is None or outcome.request is None:
            break
        outcome = task.answer(outcome.request, _asked(wait_for, outcome.request), f"{message_id}.{round_}")
    return outcome


def _ids(known: tuple[str, str] | None) -> dict[str, str]:
    return {} if known is None else {"task_id": known[0], "context_id": known[1]}


def _asked(wait_for: Callable[[Request], Answer], request: Request) -> Answer:
    """``wait_for``'s answer; one that fails or is not an ``Answer`` declines."""
    try:
        answer = wait_for(request)
    except Exception:
        log.warning("a2a: wait_for raised on request %s; declined", request.id, exc_info=True)
        return Answer(id=request.id, ok=False, reason="declined")
    return answer if isinstance(answer, Answer) else Answer(id=request.id, ok=False, reason="declined")
