"""What the command line tells while a team works: each delegation, tool call, result and
line of text, as it happens (``toolnexus.cli.activity``)."""

from __future__ import annotations

import threading
from typing import Any

from _console import Piped
from toolnexus import AgentDef, Event, Runtime, Tool
from toolnexus.cli.activity import Narrator, call_text
from toolnexus.cli.console import LiveTree

WAIT_S = 10


def event(kind: str, handle: str, **data: Any) -> Event:
    return Event(kind=kind, handle=handle, id="1", data=data)


def told(events: list[Event], top: str | None = "root/lead.1") -> list[str]:
    narrator = Narrator(lambda: top)
    return [line for each in events for line in narrator.lines(each)]


def test_a_delegation_reads_as_a_task_call_with_its_agent_and_prompt() -> None:
    arguments = '{"agent": "writer", "prompt": "Draft it"}'
    call = event("tool_call", "root/lead.1", id="c1", name="task", arguments=arguments)
    assert told([call]) == ['lead.1: task(agent="writer", prompt="Draft it")']


def test_a_teammate_is_indented_below_its_lead_and_a_result_says_what_came_back() -> None:
    lines = told([
        event("tool_call", "root/lead.1/writer.2", id="c2", name="publish", arguments='{"title": "Out"}'),
        event("tool_result", "root/lead.1/writer.2", id="c2", name="publish", output="published\nfine", is_error=False),
        event("tool_result", "root/lead.1/writer.2", id="c3", name="search", output="no index", is_error=True),
    ])
    assert lines == [
        '  writer.2: publish(title="Out")',
        "  writer.2: publish -> published fine",
        "  writer.2: search failed: no index",
    ]


def test_streamed_text_is_told_a_line_as_soon_as_it_is_complete() -> None:
    narrator = Narrator(lambda: "root/lead.1")
    pieces = ["The plan", " is simple.\nFirst", " research,", " then write.\n", "Done"]
    said = [narrator.lines(event("text", "root/lead.1", delta=piece)) for piece in pieces]
    assert said == [[], ["lead.1 > The plan is simple."], [], ["lead.1 > First research, then write."], []]
    assert narrator.lines(event("message", "root/lead.1", text="".join(pieces), tool_calls=[])) == ["lead.1 > Done"]


def test_a_reply_that_came_whole_is_told_whole_and_a_long_result_is_cut() -> None:
    lines = told([
        event("message", "root/lead.1", text="One.\nTwo.", tool_calls=[]),
        event("tool_result", "root/lead.1", id="c1", name="search", output="x" * 500, is_error=False),
    ])
    assert lines[:2] == ["lead.1 > One.", "lead.1 > Two."]
    assert lines[2].startswith("lead.1: search -> xxx") and lines[2].endswith("...") and len(lines[2]) < 130


def test_a_retried_model_call_drops_the_text_of_the_failed_attempt() -> None:
    lines = told([
        event("text", "root/lead.1", delta="Half a sent"),
        event("retry", "root/lead.1", attempt=2, cause="stream cut short"),
        event("message", "root/lead.1", text="A whole answer.", tool_calls=[]),
    ])
    assert lines == ["lead.1: the model call failed (stream cut short); retry 2", "lead.1 > A whole answer."]


def test_a_question_is_told_once_though_every_handle_up_the_path_waits_on_it() -> None:
    request = {"id": "req_1", "kind": "approval", "prompt": "Deploy api?"}
    lines = told([event("pending", handle, request=request) for handle in ("root/lead.1/ops.1", "root/lead.1")])
    assert lines == ["  ops.1: waits for an answer (approval): Deploy api?"]


def test_events_of_another_run_and_bookkeeping_events_are_not_told() -> None:
    lines = told([
        event("tool_call", "root/other.2", id="c1", name="search", arguments="{}"),
        event("state", "root/lead.1", **{"from": "idle", "to": "running"}),
        event("spawn", "root/lead.1", child="root/lead.1/a.1", agent="a", prompt="p"),
        event("result", "root/lead.1", status="done", text="ok", total_tokens=3),
    ])
    assert lines == []


def test_arguments_that_are_not_a_json_object_are_shown_as_they_came() -> None:
    assert call_text("search", "not json") == "search(not json)"
    assert call_text("search", {"query": "x" * 200}).endswith('...)')


def test_a_tool_call_is_printed_while_the_tool_still_runs_and_the_reply_after_it() -> None:
    gate = threading.Event()

    def model(request: dict[str, Any]) -> dict[str, Any]:
        if any(m.get("role") == "tool" for m in request["messages"]):
            return {"content": "all done"}
        call = {"id": "c1", "name": "lookup", "arguments": {"what": "news"}}
        return {"content": "Let me look.", "tool_calls": [call]}

    lookup = Tool("lookup", "looks up", None, lambda args, ctx: "found" if gate.wait(WAIT_S) else "late")
    rt = Runtime({"a": AgentDef("a", "does a", tools=[lookup])}, generate=model)
    out = Piped()
    try:
        with LiveTree(rt, out, tty=False, enabled=False, one_run=True) as tree:
            handle = rt.spawn(rt.root, "a")
            tree.follow(handle.id)
            rt.wake(handle, "go")
            assert out.wait_for('a.1: lookup(what="news")', timeout=WAIT_S), out.getvalue()
            assert "lookup ->" not in out.getvalue()  # the tool has not returned yet
            gate.set()
            result = rt.wait(handle, timeout=WAIT_S)
            tree.caught_up(result)
    finally:
        gate.set()
        rt.close(rt.root)
    lines = out.getvalue().splitlines()
    assert lines == ["a.1 > Let me look.", 'a.1: lookup(what="news")', "a.1: lookup -> found", "a.1 > all done"]
