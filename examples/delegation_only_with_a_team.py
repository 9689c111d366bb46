"""Only an agent with a team gets the ``task`` tool: the model delegates, once.

``coordinator`` has a non-empty team, so the runtime gives it a ``task`` tool. Its model
delegates "find the treasure" to ``explorer`` and, once a tool result is in the
transcript, answers "coordinator says: <the last tool result>". The model is a local
scripted OpenAI-compatible HTTP server, so the real HTTP path is used.
"""

from __future__ import annotations

from toolnexus import AgentDef, Runtime
from toolnexus.testing import ScriptedLLMServer, text_completion, tool_call_completion, tool_messages

# Final-text replies report 8 tokens; tool-call replies keep the default 15.
TEXT_USAGE = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}


def respond(body):
    # One responder for every agent: the explorer gets it too, so its own stray
    # `task` call (it has no team, hence no such tool) comes back as a tool error it reports.
    results = tool_messages(body)
    if results:
        return text_completion(body, f"coordinator says: {results[-1]}", TEXT_USAGE)
    return tool_call_completion(body, [("t1", "task", {"agent": "explorer", "prompt": "find the treasure"})])


def main() -> None:
    registry = {
        # A non-empty team => the runtime registers `task` for this agent.
        "coordinator": AgentDef("coordinator", "delegates exploration", team=["explorer"]),
        "explorer": AgentDef("explorer", "explores and reports back"),
    }
    with ScriptedLLMServer(respond) as server:
        rt = Runtime(registry, base_url=server.base_url, api_key="test-key", style="openai", model="mock")
        h = rt.spawn(rt.root, "coordinator")
        rt.wake(h, "find the treasure via the team")
        result = rt.wait(h)

        assert result.status == "done", result.status
        assert "coordinator says:" in result.text, result.text

        rt.close(rt.root)
    print(f"ok: {result.text}")


if __name__ == "__main__":
    main()
