"""The ``toolnexus demo`` team: three scripted agents on the in-process model.

A ``coordinator`` delegates two subtasks in one turn with the ``task`` tool: a
``researcher`` looks facts up, and a ``writer`` drafts a note whose ``publish`` tool needs
a person's approval. Nothing here touches the network or needs a key: the model is a
``ScriptedModel`` whose replies depend only on what each agent has seen so far, so a
replayed turn (after a resume) asks for the same things again.

Used by ``toolnexus demo``; also handy to try the runtime verbs by hand::

    from toolnexus import Runtime
    from toolnexus.demo import registry, scripted_model, PROMPT

    rt = Runtime(registry(), generate=scripted_model())
    result = rt.run_agent("coordinator", PROMPT)   # status "pending": publish needs approval
"""

from __future__ import annotations

import threading
from typing import Any

from .._team.agentdef import AgentDef
from ..data import Budget, make_request
from ..testing import ScriptedModel, tool_messages
from .._tools.tools import ToolContext, failure, success, suspend, tool

__all__ = ["PROMPT", "ENTRY", "registry", "scripted_model"]

ENTRY = "coordinator"
PROMPT = "Prepare a short launch note for the toolnexus 0.1 release."

_FACTS = {
    "toolnexus": "toolnexus runs agents on plain threads: no event loop, safe in Flask views and scripts",
    "task tool": "a coordinator delegates with one `task` tool; teammates run on fresh transcripts",
    "budgets": "budgets are carved from the parent's pool, so a team cannot overspend",
}


@tool
def search(query: str) -> str:
    """Look a topic up in the (built-in, offline) knowledge base."""
    hits = [fact for topic, fact in _FACTS.items() if topic in query.lower()] or list(_FACTS.values())
    return "; ".join(hits)


@tool
def publish(title: str, body: str, ctx: ToolContext) -> Any:
    """Publish a note on the project blog. A person must approve every publication."""
    if ctx.answer is None:
        return suspend(
            make_request("approval", f"Publish the note {title!r} on the project blog?", data={"title": title})
        )
    if not ctx.answer.ok:
        return failure(f"{ctx.answer.reason or 'declined'}: the note {title!r} was not published")
    return success(f"published {title!r} ({len(body.split())} words)", url="https://example.invalid/blog/launch")


def registry() -> dict[str, AgentDef]:
    """The demo team: a coordinator and its two teammates, each on its own scripted model."""
    return {
        "coordinator": AgentDef(
            "coordinator",
            "Plans the work and delegates it to the team",
            model="coordinator",
            soul="You coordinate a small team. Delegate research and writing, then report.",
            team=("researcher", "writer"),
            budget=Budget(max_tokens=5000, max_turns=4),
        ),
        "researcher": AgentDef(
            "researcher",
            "Finds facts with the search tool",
            model="researcher",
            soul="You research facts. Use search, then answer in one sentence.",
            tools=(search,),
            budget=Budget(max_tokens=1500),
        ),
        "writer": AgentDef(
            "writer",
            "Drafts notes and publishes them (publishing needs approval)",
            model="writer",
            soul="You write short notes and publish them with the publish tool.",
            tools=(publish,),
            budget=Budget(max_tokens=1500),
        ),
    }


def scripted_model(delay: float = 0.2) -> ScriptedModel:
    """The in-process model for the demo team; every reply takes ``delay`` seconds."""

    def pause() -> None:
        if delay > 0:
            threading.Event().wait(delay)

    def coordinator(request: dict[str, Any]) -> dict[str, Any]:
        pause()
        results = tool_messages(request)
        if not results:
            return {
                "tool_calls": [
                    {
                        "id": "call_research",
                        "name": "task",
                        "arguments": {
                            "agent": "researcher",
                            "prompt": "Find three facts about toolnexus for a launch note.",
                        },
                    },
                    {
                        "id": "call_write",
                        "name": "task",
                        "arguments": {
                            "agent": "writer",
                            "prompt": "Draft and publish a launch note titled 'toolnexus 0.1 is out'.",
                        },
                    },
                ]
            }
        research, writing = (results + ["", ""])[:2]
        return {"content": f"Launch note ready.\n  research: {research}\n  writer: {writing}"}

    def researcher(request: dict[str, Any]) -> dict[str, Any]:
        pause()
        results = tool_messages(request)
        if not results:
            return {
                "tool_calls": [
                    {"id": "call_search", "name": "search", "arguments": {"query": "toolnexus task tool budgets"}}
                ]
            }
        return {"content": f"Found: {results[-1]}."}

    def writer(request: dict[str, Any]) -> dict[str, Any]:
        pause()
        results = tool_messages(request)
        if not results:
            body = "toolnexus 0.1 brings agent teams to plain Python threads."
            return {
                "tool_calls": [
                    {
                        "id": "call_publish",
                        "name": "publish",
                        "arguments": {"title": "toolnexus 0.1 is out", "body": body},
                    }
                ]
            }
        outcome = results[-1]
        if outcome.startswith("published"):
            return {"content": f"Draft written and {outcome}."}
        return {"content": f"Draft written but not published ({outcome})."}

    usage = {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150}
    return ScriptedModel({"coordinator": coordinator, "researcher": researcher, "writer": writer}, usage=usage)
