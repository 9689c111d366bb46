"""Teams for the streaming tests, usable in this process and from a child process
(``python tests/_stream_team.py run STATE RUNTIME_ID`` runs ``slow`` there: it prints
``{"entered": true}`` when its tool starts, waits for a line on its standard input, then
prints its result as one JSON line).

lead delegates two subtasks to ``worker`` in one step, then answers with their texts
joined; ``asker``'s ``approve`` tool suspends until answered; ``slow``'s ``wait_gate``
tool blocks until a gate (a line on standard input, or an event) opens.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from toolnexus import AgentDef, Runtime, Tool, make_request, suspend  # noqa: E402
from toolnexus.testing import ScriptedModel, last_user_text, tool_messages  # noqa: E402
from toolnexus.wire import to_wire  # noqa: E402

USAGE = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}


def stdin_gate() -> None:
    """Say on standard output that the tool has started, then wait for the test's line."""
    print(json.dumps({"entered": True}), flush=True)
    sys.stdin.readline()


def registry(gate: Callable[[], None] | None = None) -> dict[str, AgentDef]:
    def approve(args: dict[str, Any], ctx: Any) -> Any:
        if ctx.answer is None:
            return suspend(make_request("approval", "ship it?"))
        return "approved"

    def wait_gate(args: dict[str, Any], ctx: Any) -> Any:
        if gate is not None:
            gate()
        return "gate open"

    return {
        "lead": AgentDef("lead", "delegates two subtasks", model="m-lead", team=("worker",)),
        "worker": AgentDef("worker", "answers a subtask", model="m-worker"),
        "boss": AgentDef("boss", "delegates to asker", model="m-boss", team=("asker",)),
        "asker": AgentDef("asker", "asks for approval", model="m-asker", tools=[Tool("approve", "ask", None, approve)]),
        "slow": AgentDef("slow", "waits for a gate", model="m-slow", tools=[Tool("wait_gate", "wait", None, wait_gate)]),
    }


def lead(request: dict[str, Any]) -> dict[str, Any]:
    results = tool_messages(request)
    if results:
        return {"content": "final: " + " | ".join(results)}
    calls = [{"id": f"t{n}", "name": "task", "arguments": {"agent": "worker", "prompt": p}} for n, p in ((1, "alpha"), (2, "beta"))]
    return {"tool_calls": calls}


def worker(request: dict[str, Any]) -> dict[str, Any]:
    return {"content": f"did {last_user_text(request)}"}


def boss(request: dict[str, Any]) -> dict[str, Any]:
    results = tool_messages(request)
    if results and "ship it?" not in results[-1]:
        return {"content": f"boss: {results[-1]}"}
    return {"tool_calls": [{"id": "b1", "name": "task", "arguments": {"agent": "asker", "prompt": "ship"}}]}


def asker(request: dict[str, Any]) -> dict[str, Any]:
    results = tool_messages(request)
    if results:
        return {"content": f"asker: {results[-1]}"}
    return {"tool_calls": [{"id": "a1", "name": "approve", "arguments": {}}]}


def slow(request: dict[str, Any]) -> dict[str, Any]:
    if tool_messages(request):
        return {"content": "slow done"}
    return {"tool_calls": [{"id": "s1", "name": "wait_gate", "arguments": {}}]}


def model() -> ScriptedModel:
    return ScriptedModel({"m-lead": lead, "m-worker": worker, "m-boss": boss, "m-asker": asker, "m-slow": slow}, usage=USAGE)


def running_slow(cleanup: Any, hang: float) -> tuple[Runtime, Any, threading.Event]:
    """A runtime whose ``slow`` handle is running, blocked in its tool until the returned
    gate is set (``cleanup`` sets it after the test)."""
    entered, gate = threading.Event(), threading.Event()
    cleanup.events_to_set(gate)
    rt = cleanup.runtime(registry(lambda: (entered.set(), gate.wait(hang))), generate=model())
    handle = rt.spawn(rt.root, "slow")
    rt.wake(handle, "go")
    assert entered.wait(hang)  # its turn is running, in its tool
    return rt, handle, gate


#: The registry and the model as a config names them (``"_stream_team:TEAM"``).
TEAM = registry()
generate = model()


def main(argv: list[str]) -> int:
    command, state, runtime_id = argv
    assert command == "run"
    rt = Runtime(registry(stdin_gate), generate=model(), state=state, runtime_id=runtime_id)
    try:
        result = rt.run_agent("slow", "go")
        print(json.dumps(to_wire(result)), flush=True)
    finally:
        rt.release()
    return 0


if __name__ == "__main__":
    threading.current_thread().name = "stream-team"
    sys.exit(main(sys.argv[1:]))
