"""Seed (Clojure) example 1: the smallest useful call -- a boss delegating to one teammate.

The boss's model calls ``task {"agent": "writer", "prompt": "the intro"}`` inside its own
turn; the runtime spawns ``root/boss.1/writer.1``, runs it, closes it, and feeds its final
text back as one tool message. The model is a local scripted HTTP server that answers per
model name (``bm`` for the boss, ``wm`` for the writer), so the real HTTP path is used.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections import defaultdict

from toolnexus import AgentDef, Budget, Runtime
from toolnexus.testing import ScriptedLLMServer, completion

# Scripted per MODEL: the boss (bm) delegates once, then reports done; the writer (wm) just answers.
SCRIPT = {
    "bm": [{"calls": [{"id": "c1", "name": "task", "args": {"agent": "writer", "prompt": "the intro"}}]}, {"text": "shipped"}],
    "wm": [{"text": "intro written"}],
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
    registry = {
        "boss": AgentDef("boss", "coordinates", model="bm", team=["writer"], budget=Budget(max_depth=5)),
        "writer": AgentDef("writer", "writes", model="wm"),
    }
    with ScriptedLLMServer(scripted_by_model(SCRIPT)) as server, Runtime(registry, base_url=server.base_url, model="default") as rt:
        h = rt.spawn(rt.root, "boss")
        rt.wake(h, "write me a post")
        r = rt.wait(h)
        assert r.text == "shipped", r  # whatever the boss's final turn says
        assert rt.inspect(f"{h.id}/writer.1").state == "closed"
        # The writer's 15 tokens are already rolled into the boss's own 2 x 15.
        assert rt.inspect(h).tokens == 45, rt.inspect(h)
    print("OK")


if __name__ == "__main__":
    main()
