"""A three-level team with an approval, for the replay and fork tests (also run in a
subprocess: ``python tests/_replay_team.py STATE RUNTIME_ID RUN [TOOLS]`` replays RUN offline and
prints the report as JSON)."""

from __future__ import annotations

import json
import sys

from toolnexus import AgentDef, Runtime, Tool, make_request, suspend
from toolnexus.testing import ScriptedModel, tool_messages

EMPTY = {"type": "object", "properties": {}}
LOOKUP_SCHEMA = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}


def lookup(args, ctx):
    return f"found:{args['q']}"


def approve(args, ctx):
    if ctx.answer is None:
        return suspend(make_request("approval", "ship it?"))
    return f"approved:{ctx.answer.data}"


#: The team's tools as a team file names them (``_replay_team:LOOKUP``).
LOOKUP = Tool("lookup", "Looks a thing up.", LOOKUP_SCHEMA, lookup)
APPROVE = Tool("approve", "Asks a person.", EMPTY, approve)


def registry(*, lead_soul="You lead.", lookup_description="Looks a thing up.", lookup_fn=lookup, lead_budget=None):
    """lead delegates to mid, which looks something up and delegates to leaf, which asks."""
    return {
        "lead": AgentDef("lead", "leads", soul=lead_soul, model="m-lead", team=["mid"], budget=lead_budget),
        "mid": AgentDef(
            "mid", "researches", soul="You research.", model="m-mid", team=["leaf"],
            tools=[Tool("lookup", lookup_description, LOOKUP_SCHEMA, lookup_fn)],
        ),
        "leaf": AgentDef("leaf", "ships", soul="You ship.", model="m-leaf",
                         tools=[APPROVE]),
    }


def _call(cid, name, arguments=None):
    return {"id": cid, "name": name, "arguments": arguments or {}}


def _lead(request):
    found = tool_messages(request)
    return {"content": f"lead: {found[-1]}"} if found else {
        "tool_calls": [_call("l1", "task", {"agent": "mid", "prompt": "research x"})]}


def _mid(request):
    found = tool_messages(request)
    if found:
        return {"content": "mid: " + " | ".join(found)}
    return {"tool_calls": [_call("m1", "lookup", {"q": "x"}), _call("m2", "task", {"agent": "leaf", "prompt": "ship"})]}


def _leaf(request):
    found = tool_messages(request)
    return {"content": f"leaf: {found[-1]}"} if found else {"tool_calls": [_call("f1", "approve")]}


def model():
    """The team's scripted model: each agent's reply follows from its transcript."""
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    return ScriptedModel({"m-lead": _lead, "m-mid": _mid, "m-leaf": _leaf}, usage=usage)


if __name__ == "__main__":
    state, runtime_id, run = sys.argv[1:4]
    tools = sys.argv[4] if len(sys.argv) > 4 else "recorded"
    with Runtime(registry(), state=state, runtime_id=runtime_id) as rt:  # no model options: it asks none
        report = rt.replay(run, tools=tools)
        print(json.dumps({"same": report.same, "steps": report.steps, "text": report.result.text,
                          "status": report.result.status, "tokens": report.tokens}))
