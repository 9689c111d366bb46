"""Seed (C#) example 2: two parallel calls to the same agent+prompt reattach, not duplicate.

One coordinator turn issues TWO ``task`` calls with the same ``(agent, prompt)`` key. The
calls of one turn run concurrently, and the identical key reattaches the second call to
the child the first one spawned: exactly one child, and the researcher model runs once.
The model is a local scripted OpenAI-compatible HTTP server answering per model name.
"""

from __future__ import annotations

import json
import threading

from toolnexus import AgentDef, Runtime
from toolnexus.testing import ScriptedLLMServer, completion

ASK = {"agent": "researcher", "prompt": "what is the answer?"}


def text(body, content):
    reply = completion(body, {"role": "assistant", "content": content}, "stop")
    return {**reply, "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}}


def tool_calls(body, *calls):
    wire = [{"id": i, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}} for i, name, args in calls]
    return completion(body, {"role": "assistant", "content": None, "tool_calls": wire}, "tool_calls")


def main() -> None:
    child_runs = 0
    lock = threading.Lock()

    def respond(body):
        nonlocal child_runs
        if body["model"] == "researcher-model":
            with lock:
                child_runs += 1
            return text(body, "42")
        if any(m["role"] == "tool" for m in body["messages"]):
            return text(body, "got two answers back")
        # ONE turn issues TWO parallel task calls for the SAME agent+prompt.
        return tool_calls(body, ("c1", "task", ASK), ("c2", "task", ASK))

    registry = {
        "coordinator": AgentDef("coordinator", "asks twice, by accident", team=["researcher"]),
        "researcher": AgentDef("researcher", "researches an answer", model="researcher-model"),
    }
    with ScriptedLLMServer(respond) as server:
        rt = Runtime(registry, base_url=server.base_url, api_key="test-key", style="openai", model="coordinator-model")
        h = rt.spawn(rt.root, "coordinator")
        rt.wake(h, "ask the researcher, twice")
        result = rt.wait(h)

        assert result.status == "done", result.status
        # Reattachment by task key (agent+prompt) is the only idempotency mechanism.
        children = rt.inspect(h).children
        assert len(children) == 1, f"expected 1 reattached child, got {len(children)}"
        assert child_runs == 1, f"expected the researcher model to run exactly once, ran {child_runs} time(s)"

        rt.close(rt.root)
    print(f"ok: {result.text} (1 child spawned for 2 identical task calls, ran {child_runs} time)")


if __name__ == "__main__":
    main()
