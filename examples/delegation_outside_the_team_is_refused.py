"""A ``task`` call to an agent outside the team is refused, not a silent reach.

The boss's team is ``["writer"]``; ``other`` is registered but not on the team. The boss's
model calls ``task {"agent": "other", ...}``: the refusal is a plain tool error the model
sees inline, nothing is spawned, and the boss's next turn answers "gave up". The model is a
local scripted HTTP server that answers per model name.
"""

from __future__ import annotations

from toolnexus import AgentDef, Budget, Runtime
from toolnexus.testing import ScriptedLLMServer, responder_by_model

SCRIPT = {
    "bm": [{"calls": [{"id": "c1", "name": "task", "args": {"agent": "other", "prompt": "sneak"}}]}, {"text": "gave up"}],
}


def main() -> None:
    # The boss's team is ["writer"] only -- "other" is registered but not on the team.
    registry = {
        "boss": AgentDef("boss", "coordinates", model="bm", team=["writer"], budget=Budget(max_depth=5)),
        "writer": AgentDef("writer", "writes", model="wm"),
        "other": AgentDef("other", "?", model="om"),
    }
    with ScriptedLLMServer(responder_by_model(SCRIPT)) as server, Runtime(registry, base_url=server.base_url, model="default") as rt:
        h = rt.spawn(rt.root, "boss")
        rt.wake(h, "go")  # the model's turn calls task {"agent": "other", "prompt": "sneak"}
        r = rt.wait(h)
        assert r.text == "gave up", r
        # Nothing was spawned for "other": only the boss's handle exists (handles() lists the root first).
        assert [v.id for v in rt.handles()] == ["root", h.id], rt.handles()
    print("OK")


if __name__ == "__main__":
    main()
