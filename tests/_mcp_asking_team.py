"""A team whose teammate calls the SDK's MCP server over stdio, for the tests of a server's
question answered later, from another process (CONTRACT §18b "MRTR ⇒ suspension").

lead delegates to releaser; releaser calls the server's ``confirm`` tool, which asks the
client to approve; every model answers with the last tool result it sees. Usable from the
tests and as a script in a second process::

    python _mcp_asking_team.py resume STATE HANDLE REQUEST_ID yes|no|cancel [DATA_JSON]

prints one JSON line, ``{"status": ..., "text": ...}``.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _mcp import sdk_stdio_command  # noqa: E402
from _mcp_served_app import model  # noqa: E402
from toolnexus import AgentDef, Answer, Runtime  # noqa: E402
from toolnexus import mcp  # noqa: E402


def runtime(state: str) -> Runtime:
    """The team on ``state``, its MCP server a fresh process of the SDK's stdio server."""
    server = mcp.stdio(sdk_stdio_command(), timeout=60)
    releaser = AgentDef("releaser", "releases with approval", model="m-releaser", tools=server.tools())
    lead = AgentDef("lead", "delegates releases", model="m-lead", team=("releaser",))
    asking = model({"name": "confirm", "arguments": {"action": "release v2"}})
    return Runtime({"lead": lead, "releaser": releaser}, generate=asking, state=state)


def resume(state: str, handle: str, request_id: str, decision: str, data: Any = None) -> dict[str, Any]:
    with runtime(state) as rt:
        if decision == "yes":
            answer = Answer(id=request_id, ok=True, data=data)
        else:
            answer = Answer(id=request_id, ok=False, reason="declined" if decision == "no" else "cancelled")
        rt.resume(answer)
        result = rt.wait(handle, timeout=60)
        return {"status": result.status, "text": result.text}


if __name__ == "__main__":
    command, *rest = sys.argv[1:]
    assert command == "resume"
    state, handle, request_id, decision, *data = rest
    print(json.dumps(resume(state, handle, request_id, decision, json.loads(data[0]) if data else None)))
