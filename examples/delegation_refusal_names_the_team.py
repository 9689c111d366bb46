"""A ``task`` target outside the team is a loud error that names the real team.

``rogue``'s team is ``["ally"]``; its model targets ``stranger``, which is in the registry
but not on the team. The ``task`` tool answers with an error that says "not in this
agent's team" and lists the real team; nothing is spawned. The model acknowledges the tool
result verbatim. The model is a local scripted OpenAI-compatible HTTP server.
"""

from __future__ import annotations

from toolnexus import AgentDef, Runtime
from toolnexus.testing import ScriptedLLMServer, text_completion, tool_call_completion, tool_messages

# Final-text replies report 8 tokens; tool-call replies keep the default 15.
TEXT_USAGE = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}


def respond(body):
    results = tool_messages(body)
    if results:
        return text_completion(body, f"acknowledged: {results[-1]}", TEXT_USAGE)
    # Targets an agent that exists in the REGISTRY but not in THIS agent's team.
    return tool_call_completion(body, [("r1", "task", {"agent": "stranger", "prompt": "hi"})])


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
