"""The smallest useful call: a boss delegates to one teammate with the ``task`` tool.

The boss's model calls ``task {"agent": "writer", "prompt": "the intro"}`` inside its own
turn; the runtime spawns ``root/boss.1/writer.1``, runs it, closes it, and feeds its final
text back as one tool message. The model is a local scripted HTTP server that answers per
model name (``bm`` for the boss, ``wm`` for the writer), so the real HTTP path is used.
"""

from __future__ import annotations

from toolnexus import AgentDef, Budget, Runtime
from toolnexus.testing import ScriptedLLMServer, responder_by_model

# Scripted per MODEL: the boss (bm) delegates once, then reports done; the writer (wm) just answers.
SCRIPT = {
    "bm": [{"calls": [{"id": "c1", "name": "task", "args": {"agent": "writer", "prompt": "the intro"}}]}, {"text": "shipped"}],
    "wm": [{"text": "intro written"}],
}


def main() -> None:
    registry = {
        "boss": AgentDef("boss", "coordinates", model="bm", team=["writer"], budget=Budget(max_depth=5)),
        "writer": AgentDef("writer", "writes", model="wm"),
    }
    with ScriptedLLMServer(responder_by_model(SCRIPT)) as server, Runtime(registry, base_url=server.base_url, model="default") as rt:
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
