"""The team, the app and the checks of the AG-UI tests (usable in this process, from a
child process and as a gunicorn app: ``_agui_team:app('/path/state.db')``).

``assistant`` (the thread's agent) says what it does and hands the report to its teammate
``publisher``, whose ``publish`` tool waits for an approval; then it asks the front end to
pick a colour (the frontend tool ``pick_color``) and answers with both. Every model reply
is a pure function of the request, so any worker process answers a thread alike, and
every tool call id is unique within a thread (a client keys its history by them).

``check_event`` is the strict check of one event against ``ag-ui-protocol`` 1.0.0: its
models are lax (unknown keys are kept, ``null`` passes for an optional field, snake_case
keys fill camelCase ones), so an event must also come back from the model exactly as sent.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Callable, Iterable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from toolnexus import AgentDef, Runtime, Tool, make_request, suspend  # noqa: E402
from toolnexus.testing import ScriptedModel, last_user_text, tool_messages  # noqa: E402

USAGE = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
PICK = {
    "name": "pick_color",
    "description": "Ask the user to pick a colour",
    "parameters": {"type": "object", "properties": {"options": {"type": "array", "items": {"type": "string"}}}},
}
INTRO = "Let me get the report published."


def registry(gate: Callable[[], None] | None = None) -> dict[str, AgentDef]:
    """The team; ``gate`` (if given) runs inside the ``wait`` tool of the ``slow`` agent."""

    def publish(args: dict[str, Any], ctx: Any) -> Any:
        if ctx.answer is None:
            return suspend(make_request("approval", f"publish {args.get('title')}?"))
        return f"published {args.get('title')}"

    def wait(args: dict[str, Any], ctx: Any) -> Any:
        if gate is not None:
            gate()
        return "waited"

    return {
        "assistant": AgentDef("assistant", "answers the user", model="m-assistant", team=("publisher",)),
        "publisher": AgentDef(
            "publisher", "publishes reports", model="m-publisher", tools=[Tool("publish", "publish", None, publish)]
        ),
        "slow": AgentDef("slow", "waits on a gate", model="m-slow", tools=[Tool("wait", "wait", None, wait)]),
        "chatty": AgentDef("chatty", "answers at once", model="m-chatty"),
    }


def assistant(request: dict[str, Any]) -> dict[str, Any]:
    results = tool_messages(request)
    if not results:
        task = {"agent": "publisher", "prompt": f"publish: {last_user_text(request)}"}
        return {"content": INTRO, "tool_calls": [{"id": "call-task-1", "name": "task", "arguments": task}]}
    if len(results) == 1:
        pick = {"id": "call-pick-1", "name": "pick_color", "arguments": {"options": ["red", "blue"]}}
        return {"content": "Now a colour.", "tool_calls": [pick]}
    return {"content": f"Done: {results[0]}; colour {results[1]}."}


def publisher(request: dict[str, Any]) -> dict[str, Any]:
    results = tool_messages(request)
    if results:
        return {"content": f"publisher: {results[-1]}"}
    publish = {"id": "call-publish-1", "name": "publish", "arguments": {"title": "Q3"}}
    return {"content": "Publishing.", "tool_calls": [publish]}


def slow(request: dict[str, Any]) -> dict[str, Any]:
    if tool_messages(request):
        return {"content": "slow done"}
    return {"tool_calls": [{"id": "call-wait-1", "name": "wait", "arguments": {}}]}


def chatty(request: dict[str, Any]) -> dict[str, Any]:
    return {"content": f"you said: {last_user_text(request)}"}


def model() -> ScriptedModel:
    scripts = {"m-assistant": assistant, "m-publisher": publisher, "m-slow": slow, "m-chatty": chatty}
    return ScriptedModel(scripts, usage=USAGE)  # type: ignore[arg-type]


def runtime(state: str | None = None, **options: Any) -> Runtime:
    return Runtime(registry(options.pop("gate", None)), generate=model(), state=state, **options)


def gated(cleanup: Any, hang: float = 10.0) -> tuple[Runtime, Any, Any]:
    """A runtime whose ``slow`` agent blocks in its tool until ``gate`` is set (``entered``
    is set when it gets there; ``cleanup`` sets the gate after the test):
    ``(runtime, entered, gate)``."""
    entered, gate = cleanup.event(), cleanup.event()
    return cleanup.runtime(registry(lambda: (entered.set(), gate.wait(hang))), generate=model()), entered, gate


def body(thread: str, run: str, messages: list[dict[str, Any]], **more: Any) -> dict[str, Any]:
    """A ``RunAgentInput`` as ``HttpAgent`` sends one."""
    return {"threadId": thread, "runId": run, "state": {}, "messages": messages, "tools": [PICK], "context": [], **more}


def user(text: str, id: str = "u1") -> dict[str, Any]:
    return {"id": id, "role": "user", "content": text}


# --- the strict check ---------------------------------------------------------------------------


def check_event(event: dict[str, Any]) -> Any:
    """``event`` validated by its ``type`` against ``ag-ui-protocol`` 1.0.0, with no key the
    model does not know (at any depth) and exactly as the model writes it back."""
    from pydantic import BaseModel, TypeAdapter
    from ag_ui.core import Event

    model = TypeAdapter(Event).validate_python(event)

    def unknown(value: Any, path: str) -> Iterable[str]:
        if isinstance(value, BaseModel):
            yield from (f"{path}.{key}" for key in value.model_extra or {})
            for name in type(value).model_fields:
                yield from unknown(getattr(value, name), f"{path}.{name}")
        elif isinstance(value, (list, tuple)):
            for index, item in enumerate(value):
                yield from unknown(item, f"{path}[{index}]")

    extra = list(unknown(model, "$"))
    assert not extra, f"keys ag-ui-protocol does not know: {extra} in {event}"
    again = model.model_dump(by_alias=True, mode="json")
    assert again == event, f"not 1.0 JSON as the model writes it:\n sent {event}\n back {again}"
    return model


def sse_events(raw: bytes) -> list[dict[str, Any]]:
    """The events of an SSE body as a client parses it: frames split on a blank line (LF
    only), comments dropped, the ``data:`` line parsed."""
    found = []
    assert b"\r" not in raw, "frames are LF only"
    for block in raw.split(b"\n\n"):
        lines = [line for line in block.split(b"\n") if line and not line.startswith(b":")]
        if not lines:
            continue
        data = [line[5:].lstrip(b" ") for line in lines if line.startswith(b"data:")]
        assert len(data) == 1, block
        found.append(json.loads(data[0]))
    return found


# --- the app --------------------------------------------------------------------------------------


def bearer(request: Any) -> str | None:
    """``Authorization: Bearer <name>`` names the caller (a test's stand-in for a login)."""
    scheme, _, name = (request.headers.get("Authorization") or "").partition(" ")
    return name or None if scheme == "Bearer" else None


def app(state: str, heartbeat_s: float = 15.0) -> Any:
    """A Flask app with the AG-UI endpoint at ``/agui`` for ``assistant``, its runtime (one
    per worker process) on the SQLite ``state``."""
    import flask

    from toolnexus import agui

    made = flask.Flask("agui-test")
    endpoint = agui.blueprint(lambda: runtime(state), agent="assistant", authorize=bearer, heartbeat_s=heartbeat_s)
    made.register_blueprint(endpoint)
    return made


def teller_app(base_url: str, state: str, heartbeat_s: float = 15.0) -> Any:
    """A Flask app with the AG-UI endpoint at ``/agui`` for ``teller``, whose model is the
    streaming server at ``base_url``, its runtime (one per worker process) on ``state``."""
    import flask

    from toolnexus import agui

    def build() -> Runtime:
        teller = {"teller": AgentDef("teller", "tells")}
        return Runtime(teller, base_url=base_url, model="m", api_key="test", state=state)

    made = flask.Flask("agui-teller")
    made.register_blueprint(agui.blueprint(build, agent="teller", authorize=bearer, heartbeat_s=heartbeat_s))
    return made


def main(argv: list[str]) -> int:
    """``python _agui_team.py first STATE RUNTIME_ID THREAD``: the thread's first run in this
    process, its events printed as one JSON list; the runtime then lets go of the tree."""
    from toolnexus import agui

    command, state, runtime_id, thread = argv
    assert command == "first"
    rt = runtime(state, runtime_id=runtime_id)
    try:
        print(json.dumps(list(agui.events(rt, body(thread, "run-1", [user("the Q3 report")]), agent="assistant"))))
    finally:
        rt.release()
    return 0


def apply_patch(document: Any, ops: list[dict[str, Any]]) -> Any:
    """RFC 6902 ``add``/``replace``/``remove`` as a client applies them with validation: a
    parent that is missing, or a replaced or removed key that is, fails the test."""
    document = json.loads(json.dumps(document))
    for op in ops:
        keys = [part.replace("~1", "/").replace("~0", "~") for part in op["path"].split("/")[1:]]
        parent = document
        for key in keys[:-1]:
            assert isinstance(parent, dict) and key in parent, f"no {key!r} on the way to {op['path']}"
            parent = parent[key]
        last = keys[-1]
        if op["op"] == "add":
            parent[last] = op["value"]
        elif op["op"] == "replace":
            assert last in parent, f"replace of a missing {op['path']}"
            parent[last] = op["value"]
        else:
            assert op["op"] == "remove" and last in parent, op
            del parent[last]
    return document


def check_run(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Every event strictly valid, and the order a client verifies: ``RUN_STARTED`` then
    ``STATE_SNAPSHOT`` first, one ``RUN_FINISHED``/``RUN_ERROR`` last, text and tool calls
    opened before they are continued, spans started once and closed, each span's events
    tagged. Returns the state the snapshot and its deltas make."""
    for each in events:
        check_event(each)
    kinds = [each["type"] for each in events]
    assert kinds[:2] == ["RUN_STARTED", "STATE_SNAPSHOT"], kinds
    ends = ("RUN_FINISHED", "RUN_ERROR")
    assert kinds[-1] in ends and sum(kind in ends for kind in kinds) == 1, kinds
    texts: dict[str, str | None] = {}
    calls: set[str] = set()
    started: set[str] = set()
    open_spans: list[str] = []
    state = events[1]["snapshot"]
    for each in events[2:-1]:
        kind, tag = each["type"], each.get("subagentRunId")
        if tag is not None and kind not in ("SUBAGENT_STARTED", "SUBAGENT_FINISHED", "SUBAGENT_ERROR"):
            assert tag in started, f"{kind} tagged with a span not started: {each}"
        if kind == "TEXT_MESSAGE_START":
            assert each["messageId"] not in texts, each
            texts[each["messageId"]] = tag
        elif kind in ("TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_END"):
            assert texts.get(each["messageId"], "?") == tag, each
        elif kind == "TOOL_CALL_START":
            calls.add(each["toolCallId"])
        elif kind in ("TOOL_CALL_ARGS", "TOOL_CALL_END"):
            assert each["toolCallId"] in calls, each
        elif kind == "SUBAGENT_STARTED":
            assert each["subagentRunId"] not in started, each
            parent = each.get("parentSubagentRunId")
            assert parent is None or parent in started, each
            started.add(each["subagentRunId"])
            open_spans.append(each["subagentRunId"])
        elif kind in ("SUBAGENT_FINISHED", "SUBAGENT_ERROR"):
            open_spans.remove(each["subagentRunId"])
        elif kind == "STATE_DELTA":
            state = apply_patch(state, each["delta"])
    if kinds[-1] == "RUN_FINISHED":
        assert not open_spans, open_spans
    return state


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
