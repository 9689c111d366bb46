"""Level 1: ``agent()`` with a team — the model delegates with the ``task`` tool.

An ``editor`` has a team of two; because its team is non-empty it gets one extra tool,
``task``, and the model decides what to delegate. Both subtasks of one turn run in
parallel; each teammate runs on a fresh transcript with its own soul, tools and budget.
The ``fact_checker``'s tool needs an approval, answered inline by its ``wait_for``.

Runs offline on a scripted in-process model; for a real endpoint pass
``base_url=...`` and ``model=...`` to ``run`` instead of ``generate=``.

    python examples/level1_agent_team.py
"""

from __future__ import annotations

from toolnexus import Budget, ToolContext, agent, make_answer, make_request, suspend, tool
from toolnexus.testing import ScriptedModel, tool_messages


@tool
def lookup(claim: str, ctx: ToolContext):
    """Check a claim against the (paid) archive; every lookup needs approval."""
    if ctx.answer is None:
        return suspend(make_request("approval", f"Spend one archive credit to check {claim!r}?"))
    return f"confirmed: {claim}"


def auto_approve(request):
    """The fact checker's own interpreter: approve, and say so."""
    print(f"  (approving: {request.prompt})")
    return make_answer(request.id, True)


summarizer = agent("summarizer", does="Summarizes a text in one sentence", budget=Budget(max_tokens=2000))
fact_checker = agent("fact_checker", does="Checks one claim", tools=[lookup], wait_for=auto_approve)
editor = agent(
    "editor",
    does="Edits articles with help from the team",
    soul="You edit. Delegate summarizing and fact checking, then report.",
    team=[summarizer, fact_checker],
    budget=Budget(max_tokens=10_000, max_turns=4),
)


def model(request: dict) -> dict:
    """One scripted model for the whole team; it tells the agents apart by their tools."""
    tools = {t["function"]["name"] for t in request["tools"]}
    results = tool_messages(request)
    if "task" in tools and not results:
        return {
            "tool_calls": [
                {"name": "task", "arguments": {"agent": "summarizer", "prompt": "Summarize: threads beat event loops for scripts."}},
                {"name": "task", "arguments": {"agent": "fact_checker", "prompt": "Check: Python has had threads since 1.5"}},
            ]
        }
    if "lookup" in tools and not results:
        return {"tool_calls": [{"name": "lookup", "arguments": {"claim": "Python has had threads since 1.5"}}]}
    if results:
        return {"content": " / ".join(results)}
    return {"content": "Threads keep simple programs simple."}


def main() -> None:
    print(f"registry (the editor and its team): {sorted(editor.registry)}")
    result = editor.run("Edit today's article.", generate=ScriptedModel({"default": model}, usage={"prompt_tokens": 80, "completion_tokens": 20, "total_tokens": 100}))
    print(result.text)
    print(f"status={result.status} turns={result.turns} tokens={result.total_tokens}")
    assert result.status == "done" and result.total_tokens == 500  # 2 editor turns + 3 teammate turns
    assert "Threads keep simple programs simple." in result.text and "confirmed:" in result.text
    print("OK level 1: agent() team delegated two subtasks with the task tool")


if __name__ == "__main__":
    main()
