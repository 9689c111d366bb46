"""Two parallel ``task`` calls with the same agent and prompt share one child.

One coordinator turn issues TWO ``task`` calls with the same ``(agent, prompt)`` key. The
calls of one turn run concurrently, and the identical key reattaches the second call to
the child the first one spawned: exactly one child, and the researcher model runs once.
The model is a local scripted OpenAI-compatible HTTP server answering per model name.
"""

from __future__ import annotations

from toolnexus import AgentDef, Runtime
from toolnexus.testing import ScriptedLLMServer, responder_by_model

ASK = {"agent": "researcher", "prompt": "what is the answer?"}
# Final-text replies report 8 tokens; tool-call replies keep the default 15.
TEXT_USAGE = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}

SCRIPT = {
    # ONE turn issues TWO parallel task calls for the SAME agent+prompt, then reports.
    "coordinator-model": [
        {"calls": [("c1", "task", ASK), ("c2", "task", ASK)]},
        {"text": "got two answers back", "usage": TEXT_USAGE},
    ],
    "researcher-model": [{"text": "42", "usage": TEXT_USAGE}],
}


def main() -> None:
    registry = {
        "coordinator": AgentDef("coordinator", "asks twice, by accident", team=["researcher"]),
        "researcher": AgentDef("researcher", "researches an answer", model="researcher-model"),
    }
    respond = responder_by_model(SCRIPT)  # respond.calls counts the requests per model
    with ScriptedLLMServer(respond) as server:
        rt = Runtime(registry, base_url=server.base_url, api_key="test-key", style="openai", model="coordinator-model")
        h = rt.spawn(rt.root, "coordinator")
        rt.wake(h, "ask the researcher, twice")
        result = rt.wait(h)

        assert result.status == "done", result.status
        # Reattachment by task key (agent+prompt) is the only idempotency mechanism.
        children = rt.inspect(h).children
        assert len(children) == 1, f"expected 1 reattached child, got {len(children)}"
        child_runs = respond.calls.get("researcher-model", 0)
        assert child_runs == 1, f"expected the researcher model to run exactly once, ran {child_runs} time(s)"

        rt.close(rt.root)
    print(f"ok: {result.text} (1 child spawned for 2 identical task calls, ran {child_runs} time)")


if __name__ == "__main__":
    main()
