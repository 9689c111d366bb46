"""The A2A endpoint, whatever serves it: the Agent Card and the JSON-RPC methods, as
``Reply`` values that the WSGI app, the Flask blueprint and the Django views each send in
their own way. Who asks is decided before (``_serve.access``); the body is checked here,
by the served layer's rules, then as JSON-RPC (``_a2a.rpc``).

Every answer is HTTP 200 with a JSON-RPC body, except what the served layer refuses before
a request is read as JSON-RPC (``401``/``403`` who asks, ``413`` too large, ``415`` not
JSON, ``503`` too many open streams), which gets that status and a ``-32000`` error body.
Nothing raised below reaches the server as a ``500``.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Callable, Iterable, Union

import attrs

from .._serve import Access, Held, Refused, StreamSlots
from .._serve.bodies import check_type
from .._team.runtime import Runtime
from ..errors import ConfigError, SpawnError, ToolnexusError, WireError
from ..wire import parse_json
from . import _params as params_of
from .._a2a import shapes
from ._frames import HEADERS as STREAM_HEADERS
from ._frames import streamed
from .._a2a.rpc import (
    INTERNAL_ERROR,
    PARSE_ERROR,
    REFUSED,
    UNSUPPORTED_OPERATION,
    VERSION,
    RpcError,
    check_version,
    envelope,
    error_reply,
    result_reply,
    valid_id,
)
from ._tasks import Now, Tasks

log = logging.getLogger("toolnexus")

#: Where the Agent Card is, relative to where the endpoint is mounted.
CARD_PATH = "/.well-known/agent-card.json"
#: The tag every skill of a served card carries.
TAG = "toolnexus"

RuntimeLike = Union[Runtime, Callable[[], Runtime]]


@attrs.frozen
class Reply:
    """What to answer: a status, headers, and a body (bytes, or the frames of a stream)."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes | Iterable[bytes]

    @property
    def streaming(self) -> bool:
        return not isinstance(self.body, bytes)


def json_reply(body: Any, status: int = 200, headers: Iterable[tuple[str, str]] = ()) -> Reply:
    data = json.dumps(body, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")
    return Reply(status, [("Content-Type", "application/json"), *headers], data)


class Service:
    """One served agent: its card and its tasks (see the module's docstring)."""

    def __init__(
        self,
        runtime: RuntimeLike,
        *,
        agent: str,
        access: Access,
        version: str,
        url: str | None,
        max_body: int,
        max_streams: int,
        heartbeat_s: float,
    ) -> None:
        if not isinstance(agent, str) or not agent:
            raise ConfigError("a2a: agent= names the agent that serves the tasks")
        if not isinstance(runtime, Runtime) and not callable(runtime):
            raise ConfigError("a2a: runtime must be a Runtime or a function that returns one")
        self._runtime = runtime
        self.agent = agent
        self.access = access
        self.version = version
        self.url = url
        self.max_body = max_body
        self.slots = StreamSlots(max_streams)
        self.heartbeat_s = heartbeat_s
        if isinstance(runtime, Runtime):
            self.runtime()  # a runtime at hand: an unknown agent fails now, not at the first call

    def runtime(self) -> Runtime:
        """The runtime that runs the tasks (asked of a factory on every use).

        Raises:
            ConfigError: the runtime's registry has no such agent.
        """
        rt = self._runtime if isinstance(self._runtime, Runtime) else self._runtime()
        try:
            rt.definition(self.agent)
        except SpawnError:
            raise ConfigError(f"a2a: the runtime's registry has no agent {self.agent!r}") from None
        return rt

    # --- the Agent Card ----------------------------------------------------------------------

    def card(self, endpoint: str) -> Reply:
        """The Agent Card; ``endpoint`` is the absolute URL of the JSON-RPC endpoint as the
        request reached it (``url=`` wins)."""
        try:
            rt = self.runtime()
        except ToolnexusError as exc:
            log.error("a2a: the Agent Card cannot be made: %s", exc)
            return json_reply({"error": "the agent is not available"}, 503)
        lead = rt.definition(self.agent)
        skills = [_skill(lead.name, lead.does)]
        for name in lead.team_names:
            try:
                skills.append(_skill(name, rt.definition(name).does))
            except SpawnError:
                continue  # a teammate missing from the registry is no skill
        card = {
            "name": self.agent,
            "description": lead.does or self.agent,
            "supportedInterfaces": [
                {"url": self.url or endpoint, "protocolBinding": "JSONRPC", "protocolVersion": VERSION}
            ],
            "version": self.version,
            "capabilities": {"streaming": True},
            "defaultInputModes": list(shapes.MODES),
            "defaultOutputModes": list(shapes.MODES),
            "skills": skills,
        }
        return json_reply(card)

    # --- JSON-RPC ------------------------------------------------------------------------------

    def refusal(self, refused: Refused) -> Reply:
        """A request the served layer turned away: its status, a JSON-RPC error body."""
        return json_reply(error_reply(None, REFUSED, refused.reason), refused.status, refused.headers.items())

    def call(
        self, principal: str, *, content_type: str | None, body: Callable[[int], bytes], version: str | None
    ) -> Reply:
        """Answer one JSON-RPC request of ``principal`` (already admitted): ``body(limit)``
        reads the request's body, at most ``limit`` bytes (``Refused(413)`` past them);
        ``version`` is its ``A2A-Version``."""
        try:
            check_type(content_type)
            raw = body(self.max_body)
        except Refused as refused:
            return self.refusal(refused)
        request_id: Any = None
        try:
            try:
                parsed = parse_json(raw, what="the request")
            except WireError as exc:
                raise RpcError(PARSE_ERROR, str(exc)) from None
            request_id = valid_id(parsed)
            request_id, method, params = envelope(parsed)
            check_version(version)
            return self._method(method)(Tasks(self.runtime(), self.agent, principal), request_id, params)
        except RpcError as exc:
            return json_reply(error_reply(request_id, exc.code, exc.message))
        except Refused as refused:
            return self.refusal(refused)
        except ToolnexusError as exc:
            return json_reply(error_reply(request_id, INTERNAL_ERROR, str(exc)))
        except Exception:
            log.exception("a2a: a request failed")
            return json_reply(error_reply(request_id, INTERNAL_ERROR, "internal error"))

    def _method(self, name: str) -> Callable[[Tasks, Any, Any], Reply]:
        return {
            "SendMessage": self._send,
            "SendStreamingMessage": self._send_streaming,
            "GetTask": self._get,
            "CancelTask": self._cancel,
            "SubscribeToTask": self._subscribe,
        }[name]

    def _send(self, tasks: Tasks, request_id: Any, params: Any) -> Reply:
        """``SendMessage``: a new task (or the answer on one), once its run rests; at once
        with ``returnImmediately`` (inline runtimes run it to rest in the request)."""
        sent = params_of.sent(params)
        if sent.task_id is not None:
            binding = tasks.answer(tasks.find(sent.task_id), sent)
        else:
            binding = tasks.start(sent)
        if sent.return_immediately and not tasks.rt.inline:
            binding, now = tasks.current(binding)
        else:
            binding, now = tasks.settled(binding)
        return json_reply(result_reply(request_id, {"task": tasks.task(binding, now, sent.history_length)}))

    def _send_streaming(self, tasks: Tasks, request_id: Any, params: Any) -> Reply:
        """``SendStreamingMessage``: as ``SendMessage``, its frames until the run rests."""
        sent = params_of.sent(params)
        binding = tasks.find(sent.task_id) if sent.task_id is not None else None
        slot = self.slots.take()  # 503 at once, before anything starts
        try:
            if binding is None:
                binding, now = tasks.start(sent), Now(shapes.SUBMITTED)
            else:  # answered: its run goes on (its updates follow, even if it rests already)
                binding, now = tasks.answer(binding, sent), Now(shapes.WORKING)
            frames = streamed(
                tasks, binding, now, request_id, history_length=sent.history_length, heartbeat_s=self.heartbeat_s
            )
            return Reply(200, list(STREAM_HEADERS), Held(frames, slot))
        except BaseException:
            slot.release()
            raise

    def _get(self, tasks: Tasks, request_id: Any, params: Any) -> Reply:
        named = params_of.named(params)
        binding, now = tasks.current(tasks.find(named.id))
        return json_reply(result_reply(request_id, tasks.task(binding, now, named.history_length)))

    def _cancel(self, tasks: Tasks, request_id: Any, params: Any) -> Reply:
        named = params_of.named(params)
        binding, now = tasks.cancel(tasks.find(named.id))
        return json_reply(result_reply(request_id, tasks.task(binding, now, named.history_length)))

    def _subscribe(self, tasks: Tasks, request_id: Any, params: Any) -> Reply:
        named = params_of.named(params)
        binding, now = tasks.current(tasks.find(named.id))
        if now.terminal:
            raise RpcError(UNSUPPORTED_OPERATION, f"Task {binding.id} is in terminal state: {now.state}")
        slot = self.slots.take()
        try:
            frames = streamed(tasks, binding, now, request_id, history_length=None, heartbeat_s=self.heartbeat_s)
            return Reply(200, list(STREAM_HEADERS), Held(frames, slot))
        except BaseException:
            slot.release()
            raise


def _skill(name: str, does: str) -> dict[str, Any]:
    return {"id": name, "name": name, "description": does or name, "tags": [TAG]}
