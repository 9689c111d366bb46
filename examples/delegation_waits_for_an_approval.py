"""A delegation that waits for an approval, and ``agent_tool`` used standalone.

The boss delegates to ``worker``, whose own ``approve`` tool suspends on an approval
request. The child presents to the boss as an ordinary pending tool result: ``wait``
returns ``status="pending"`` with the boss and the child both suspended, and the host
answers with ``rt.resume(make_answer(...))``, which resumes both levels. Then the
``worker`` agent is dropped into a plain ``Toolkit`` as a single tool via ``agent_tool``.
The model is a local scripted HTTP server that answers per model name.
"""

from __future__ import annotations

from toolnexus import AgentDef, Budget, Runtime, Tool, Toolkit, make_answer, make_request, success, suspend
from toolnexus.testing import ScriptedLLMServer, responder_by_model

# Past the end of a model's script the reply is the text "done".
SCRIPT = {
    "bm": [{"calls": [{"id": "c1", "name": "task", "args": {"agent": "worker", "prompt": "risky"}}]}],
    "wm": [{"calls": [{"id": "w1", "name": "approve", "args": {}}]}],
}


def approve(args, ctx):
    """Suspends on an approval request; succeeds on the retry that carries the Answer."""
    if ctx.answer is None:
        return suspend(make_request("approval", "Approve the impossible"))
    return success("approved")


approve_tool = Tool("approve", "needs approval", {"type": "object", "properties": {}}, approve)


def main() -> None:
    registry = {
        "boss": AgentDef("boss", "coordinates", model="bm", team=["worker"], budget=Budget(max_depth=5)),
        "worker": AgentDef("worker", "does the risky part", model="wm", tools=[approve_tool]),
    }
    with ScriptedLLMServer(responder_by_model(SCRIPT)) as server, Runtime(registry, base_url=server.base_url, model="default") as rt:
        # A delegated child whose own tool suspends presents to the boss (and the boss's
        # caller) as an ordinary pending tool result.
        h = rt.spawn(rt.root, "boss")
        rt.wake(h, "go")
        r = rt.wait(h)
        assert r.status == "pending", r  # not an error; both boss and the child are suspended
        assert rt.inspect(h).state == "suspended"
        assert rt.inspect(f"{h.id}/worker.1").state == "suspended"
        # The host answers with the matching Answer id, and the cascade resumes both levels.
        rt.resume(make_answer(r.pending.id, True))
        assert rt.wait(h).status == "done"

        # agent_tool: drop ONE named agent into a toolkit as a plain callable, outside any team.
        # A caller sees a tool named "worker" taking {prompt}; it is run_agent under the hood.
        worker_as_tool = rt.agent_tool("worker")
        toolkit = Toolkit([worker_as_tool])
        assert toolkit.tool_names() == ["worker"]
    print("OK")


if __name__ == "__main__":
    main()
