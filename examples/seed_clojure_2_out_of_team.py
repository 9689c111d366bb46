"""Seed (Clojure) example 2: an out-of-team target is refused, not a silent reach.

The boss's team is ``["writer"]``; ``other`` is registered but not on the team. The boss's
model calls ``task {"agent": "other", ...}``: the refusal is a plain tool error the model
sees inline, nothing is spawned, and the boss's next turn answers "gave up". The model is a
local scripted HTTP server that answers per model name.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections import defaultdict

from toolnexus import AgentDef, Budget, Runtime
from toolnexus.testing import ScriptedLLMServer, completion

SCRIPT = {
    "bm": [{"calls": [{"id": "c1", "name": "task", "args": {"agent": "other", "prompt": "sneak"}}]}, {"text": "gave up"}],
}


def scripted_by_model(script):
    """A responder that answers the n-th request of each model with that model's n-th step."""
    counts: defaultdict[str, itertools.count] = defaultdict(lambda: itertools.count())
    lock = threading.Lock()

    def respond(body):
        with lock:
            n = next(counts[body["model"]])
        steps = script.get(body["model"], [])
        spec = steps[n] if n < len(steps) else {"text": "done"}
        if spec.get("calls"):
            calls = [
                {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": json.dumps(c.get("args") or {})}}
                for c in spec["calls"]
            ]
            return completion(body, {"role": "assistant", "content": None, "tool_calls": calls}, "tool_calls")
        return completion(body, {"role": "assistant", "content": spec["text"]}, "stop")

    return respond


def main() -> None:
    # The boss's team is ["writer"] only -- "other" is registered but not on the team.
    registry = {
        "boss": AgentDef("boss", "coordinates", model="bm", team=["writer"], budget=Budget(max_depth=5)),
        "writer": AgentDef("writer", "writes", model="wm"),
        "other": AgentDef("other", "?", model="om"),
    }
    with ScriptedLLMServer(scripted_by_model(SCRIPT)) as server, Runtime(registry, base_url=server.base_url, model="default") as rt:
        h = rt.spawn(rt.root, "boss")
        rt.wake(h, "go")  # the model's turn calls task {"agent": "other", "prompt": "sneak"}
        r = rt.wait(h)
        assert r.text == "gave up", r
        # Nothing was spawned for "other": only the boss's handle exists (handles() lists the root first).
        assert [v.id for v in rt.handles()] == ["root", h.id], rt.handles()
    print("OK")


if __name__ == "__main__":
    main()
