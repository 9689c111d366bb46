"""A team whose lead delegates to a remote teammate over A2A, for the calling tests.

``boss`` hands its whole prompt to ``remote`` (the agent at the peer's URL) with one
``task`` call and answers ``boss: <what came back>``. Run as a script,
``python tests/_a2a_caller.py answer STATE URL REQUEST_ID yes|no`` answers a request
parked in the SQLite ``STATE`` from this other process and prints the lead's result as
one JSON line.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from toolnexus import AgentDef, Answer, Request, Runtime  # noqa: E402
from toolnexus.testing import ScriptedModel, last_user_text, tool_messages  # noqa: E402
from toolnexus.wire import to_wire  # noqa: E402


def registry(url: str, wait_for: Callable[[Request], Answer] | None = None) -> dict[str, AgentDef]:
    return {
        "boss": AgentDef("boss", "hands work to the remote agent", model="m-boss", team=("remote",), wait_for=wait_for),
        "remote": AgentDef("remote", "a remote agent over A2A", a2a=url),
    }


def boss(request: dict[str, Any]) -> dict[str, Any]:
    results = tool_messages(request)
    if results:
        return {"content": f"boss: {results[-1]}"}
    call = {"id": "c1", "name": "task", "arguments": {"agent": "remote", "prompt": last_user_text(request)}}
    return {"tool_calls": [call]}


def model() -> ScriptedModel:
    return ScriptedModel({"m-boss": boss})


def main(argv: list[str]) -> int:
    command, state, url, request_id, verdict = argv
    assert command == "answer"
    with Runtime(registry(url), generate=model(), state=state) as rt:
        handle = next(view.id for view in rt.handles() if view.pending is not None and view.pending.id == request_id)
        rt.resume(Answer(id=request_id, ok=verdict == "yes", data={"text": verdict}))
        result = rt.wait(handle, timeout=30)
        print(json.dumps({**to_wire(result), "pid": os.getpid()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
