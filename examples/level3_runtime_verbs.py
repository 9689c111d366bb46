"""Level 3: the ``Runtime`` and its verbs — agents as handles in a tree.

spawn / post / wake / wait / inspect, a team run that stops ``pending`` on an approval
and is resumed later (``resume``), and ``interrupt`` cancelling a pending request.
Runs offline on a scripted in-process model.

    python examples/level3_runtime_verbs.py
"""

from __future__ import annotations

from toolnexus import AgentDef, Runtime, ToolContext, UnknownRequest, make_answer, make_request, suspend, tool
from toolnexus.testing import ScriptedModel, last_user_text, tool_messages


@tool
def deploy(service: str, ctx: ToolContext):
    """Deploy a service to production (a person must approve)."""
    if ctx.answer is None:
        return suspend(make_request("approval", f"Deploy {service} to production?"))
    return f"{service} deployed"


REGISTRY = {
    "triage": AgentDef("triage", "Reads its inbox and says what needs doing"),
    "lead": AgentDef("lead", "Plans releases and delegates the deploy", team=("deployer",)),
    "deployer": AgentDef("deployer", "Deploys services", tools=(deploy,)),
}


def model(request: dict) -> dict:
    tools = {t["function"]["name"] for t in request["tools"]}
    results = tool_messages(request)
    if results:
        return {"content": f"release finished ({results[-1]})" if "task" in tools else results[-1]}
    if "task" in tools:
        return {"tool_calls": [{"name": "task", "arguments": {"agent": "deployer", "prompt": "Deploy api v2"}}]}
    if "deploy" in tools:
        return {"tool_calls": [{"name": "deploy", "arguments": {"service": "api-v2"}}]}
    items = [line for line in last_user_text(request).splitlines() if line[:1].isdigit()]
    return {"content": f"{len(items)} inbox items; the disk alert comes first"}


def main() -> None:
    usage = {"prompt_tokens": 40, "completion_tokens": 10, "total_tokens": 50}
    with Runtime(REGISTRY, generate=ScriptedModel({"default": model}, usage=usage)) as rt:
        # spawn a handle, leave it messages, wake it: one turn takes the whole inbox.
        triage = rt.spawn(rt.root, "triage")
        rt.post(triage, "disk 91% on db-2", sender="monitoring", channel="alerts")
        rt.post(triage, "weekly report is due")
        rt.wake(triage, "What needs doing?")
        result = rt.wait(triage)
        view = rt.inspect(triage)
        print(f"{triage.id}: {result.text} | state={view.state} turns={view.turns} tokens={view.tokens}")
        print(f"  transitions: {rt.transitions(triage)}")
        assert result.text.startswith("2 inbox items")

        # A team run that needs an approval stops pending; every handle on the path is
        # suspended and uses no tokens until the answer arrives — a minute or a day later.
        pending = rt.run_agent("lead", "Ship api v2")
        assert pending.status == "pending"
        print(f"pending: {pending.pending.prompt} (path {pending.pending.data['path']})")
        for v in rt.handles():
            print(f"  {v.id:<26} {v.state:<9} turns={v.turns} tokens={v.tokens}")
        rt.resume(make_answer(pending.pending.id, True))
        final = rt.wait(pending.handle_id)
        rt.close(pending.handle_id)
        print(f"resumed -> {final.status}: {final.text}")
        assert final.status == "done" and "api-v2 deployed" in final.text

        # interrupt on a suspended handle cancels its request: the answer is refused.
        again = rt.run_agent("lead", "Ship api v2")
        rt.interrupt(again.handle_id)
        try:
            rt.resume(make_answer(again.pending.id, True))
            raise AssertionError("a cancelled request must not resume")
        except UnknownRequest as exc:
            print(f"after interrupt: {rt.inspect(again.handle_id).state}; resume refused ({exc})")

        kinds = sorted({event["event"] for event in rt.events()})
        print(f"events seen: {kinds}; root tokens={rt.inspect(rt.root).tokens}")
    print("OK level 3: spawn/post/wake/wait, pending and resume, interrupt")


if __name__ == "__main__":
    main()
