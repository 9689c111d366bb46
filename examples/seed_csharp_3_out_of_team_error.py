"""Seed (C#) example 3: a target outside the team is a loud, named error.

``rogue``'s team is ``["ally"]``; its model targets ``stranger``, which is in the registry
but not on the team. The ``task`` tool answers with an error that says "not in this
agent's team" and lists the real team; nothing is spawned. The model acknowledges the tool
result verbatim. The model is a local scripted OpenAI-compatible HTTP server.
"""

from __future__ import annotations

import json

from toolnexus import AgentDef, Runtime
from toolnexus.testing import ScriptedLLMServer, completion


def text(body, content):
    reply = completion(body, {"role": "assistant", "content": content}, "stop")
    return {**reply, "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}}


def tool_call(body, call_id, name, args):
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
    return completion(body, {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls")


def last_tool_content(body):
    return [m for m in body["messages"] if m["role"] == "tool"][-1]["content"] or ""


def respond(body):
    if any(m["role"] == "tool" for m in body["messages"]):
        return text(body, f"acknowledged: {last_tool_content(body)}")
    # Targets an agent that exists in the REGISTRY but not in THIS agent's team.
    return tool_call(body, "r1", "task", {"agent": "stranger", "prompt": "hi"})


def main() -> None:
    registry = {
        "rogue": AgentDef("rogue", "tries to go off-team", team=["ally"]),
        "ally": AgentDef("ally", "a legitimate teammate"),
        "stranger": AgentDef("stranger", "not on rogue's team"),
    }
    with ScriptedLLMServer(respond) as server:
        rt = Runtime(registry, base_url=server.base_url, api_key="test-key", style="openai", model="mock")
        h = rt.spawn(rt.root, "rogue")
        rt.wake(h, "try to reach stranger")
        result = rt.wait(h)

        assert result.status == "done", result.status
        assert "not in this agent's team" in result.text, result.text
        assert "ally" in result.text, "the error should list the actual team"
        assert rt.inspect(h).children == [], "an out-of-team target must never spawn a child"

        rt.close(rt.root)
    print(f"ok: {result.text}")


if __name__ == "__main__":
    main()
