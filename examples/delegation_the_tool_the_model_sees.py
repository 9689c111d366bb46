"""The ``task`` tool the model sees, described by its team, and team scoping.

Level-1 ``agent()`` definitions with an in-process model (``generate=``), no provider.
``rogue`` has ``explorer`` on its team and tries to delegate to a stranger: the ``task``
tool refuses with a text that names the real team, and the model (which echoes the tool
result back verbatim) proves it. The model saw exactly one ``task`` tool, described by
its team ("explorer: read-only research"). A teamless agent's registry holds only itself.
"""

from __future__ import annotations

import threading

from toolnexus import agent


def main() -> None:
    explorer = agent("explorer", does="read-only research", model="m-explorer")
    rogue = agent("rogue", does="tries to delegate outside its team", model="m-rogue", team=[explorer])

    # A def with NO team declared gets no task tool at all.
    solo = agent("solo", does="works alone", model="m-solo")
    assert len(solo.registry) == 1, "a teamless agent's registry holds only itself"

    seen_tools: list[dict] = []
    lock = threading.Lock()

    def generate(request):
        """The rogue model tries to delegate to a stranger, then echoes the tool result back
        verbatim so the final answer proves what the task tool returned."""
        tool_results = [m["content"] for m in request["messages"] if m["role"] == "tool"]
        if request["model"] == "m-rogue" and not tool_results:
            with lock:
                seen_tools[:] = request["tools"]
            return {"tool_calls": [{"id": "c1", "name": "task", "arguments": {"agent": "stranger", "prompt": "hi"}}]}
        return {"content": tool_results[-1] if tool_results else ""}

    r = rogue.run("delegate to a stranger", generate=generate)
    assert "not in this agent's team" in r.text and "explorer" in r.text, (
        f"expected an out-of-team refusal naming the real team, got {r.text!r}"
    )

    # The model saw exactly one task tool, described by its team.
    with lock:
        tasks = [t for t in seen_tools if t["function"]["name"] == "task"]
    assert len(tasks) == 1, "a task tool"
    assert "explorer: read-only research" in tasks[0]["function"]["description"]

    print(f"ok: {r.text}")


if __name__ == "__main__":
    main()
