"""``toolnexus.agui.events`` (CONTRACT §21): a thread's runs as AG-UI 1.0 events, every one
strictly valid against ``ag-ui-protocol`` 1.0.0, in the order a client verifies; a teammate
as a span, an approval as an interrupt and its resume, a frontend tool and its result, the
tree as a snapshot and its deltas, and a client that goes interrupting its run."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("ag_ui.core")

import _agui_team as team  # noqa: E402
from _agui_team import PICK, body, check_run, user  # noqa: E402
from toolnexus import agui  # noqa: E402
from toolnexus.data import HandleView  # noqa: E402

HANG = 10.0


def run(rt: Any, made: dict[str, Any], agent: str = "assistant", **options: Any) -> list[dict[str, Any]]:
    events = list(agui.events(rt, made, agent=agent, **options))
    check_run(events)
    return events


def kinds(events: list[dict[str, Any]]) -> list[str]:
    return [each["type"] for each in events]


def last(events: list[dict[str, Any]]) -> dict[str, Any]:
    return events[-1]


def tree_of(rt: Any, thread: str) -> dict[str, Any]:
    """The tree as the state shows it, read from the runtime."""

    def walk(handle: str) -> list[HandleView]:
        view = rt.inspect(handle)
        return [view] + [each for child in view.children for each in walk(child)]

    return {
        v.id: {"agent": v.name, "state": v.state, "parent": v.parent, "turns": v.turns, "tokens": v.tokens}
        for v in walk(thread)
    }


@pytest.fixture
def rt(cleanup: Any) -> Any:
    return cleanup.runtime(team.registry(), generate=team.model())


def approve_and_pick(rt: Any, after: Any = None) -> tuple[list[dict[str, Any]], ...]:
    """The conversation: an approval, its resume, a frontend tool's result (``after(events)``
    is called after each run)."""
    after = after or (lambda events: None)
    messages = [user("the Q3 report")]
    first = run(rt, body("t1", "run-1", messages, state={"theme": "dark"}))
    after(first)
    asked = last(first)["outcome"]["interrupts"][0]
    resume = [{"interruptId": asked["id"], "status": "resolved", "payload": {"approved": True}}]
    second = run(rt, body("t1", "run-2", messages, resume=resume))
    after(second)
    answer = {"id": "tm-1", "role": "tool", "toolCallId": "call-pick-1", "content": "blue"}
    third = run(rt, body("t1", "run-3", [*messages, answer]))
    after(third)
    return first, second, third


def test_a_conversation_is_an_interrupt_a_resume_a_frontend_tool_and_the_answer(rt: Any) -> None:
    first, second, third = approve_and_pick(rt)
    assert last(first)["outcome"]["type"] == "interrupt"
    assert last(second)["outcome"] == {"type": "success", "pendingToolCallIds": ["call-pick-1"]}
    assert "result" not in last(second)
    assert last(third) == {
        "type": "RUN_FINISHED", "threadId": "t1", "runId": "run-3", "outcome": {"type": "success"},
        "result": "Done: publisher: published Q3; colour blue.",
    }
    assert first[0] == {"type": "RUN_STARTED", "threadId": "t1", "runId": "run-1", "protocolVersion": "1.0"}


def test_a_teammate_is_a_span_between_its_task_call_and_its_result(rt: Any) -> None:
    first, second, _ = approve_and_pick(rt)
    thread = first[1]["snapshot"]["toolnexus"]["thread"]
    child = f"{thread}/publisher.1"
    order = kinds(first)
    started = next(e for e in first if e["type"] == "SUBAGENT_STARTED")
    assert started == {
        "type": "SUBAGENT_STARTED", "subagentRunId": child, "name": "publisher", "parentToolCallId": "call-task-1"
    }
    task_end = next(i for i, e in enumerate(first) if e["type"] == "TOOL_CALL_END" and e["toolCallId"] == "call-task-1")
    assert task_end < order.index("SUBAGENT_STARTED") < order.index("SUBAGENT_FINISHED")
    inside = first[order.index("SUBAGENT_STARTED") + 1 : order.index("SUBAGENT_FINISHED")]
    assert {e.get("subagentRunId") for e in inside if e["type"].startswith(("TEXT", "TOOL"))} == {child}
    asked = last(first)["outcome"]["interrupts"][0]
    finished = next(e for e in first if e["type"] == "SUBAGENT_FINISHED")
    assert finished["outcome"] == {"type": "suspended", "interruptIds": [asked["id"]]}
    # The resumed run starts the span again, and ends it before the task call's result.
    order = kinds(second)
    assert order[2] == "SUBAGENT_STARTED" and second[2]["subagentRunId"] == child
    result = next(
        i for i, e in enumerate(second) if e["type"] == "TOOL_CALL_RESULT" and e["toolCallId"] == "call-task-1"
    )
    assert order.index("SUBAGENT_FINISHED") < result
    assert second[order.index("SUBAGENT_FINISHED")]["result"] == "publisher: published Q3"
    assert second[result]["content"] == "publisher: published Q3" and "subagentRunId" not in second[result]


def test_an_approval_is_an_interrupt_naming_its_request(rt: Any) -> None:
    first = run(rt, body("t1", "run-1", [user("the Q3 report")]))
    (asked,) = last(first)["outcome"]["interrupts"]
    request = rt.open_requests()[0]
    thread = first[1]["snapshot"]["toolnexus"]["thread"]
    assert asked == {
        "id": request.id, "reason": "approval", "message": "publish Q3?", "subagentRunId": f"{thread}/publisher.1",
        "metadata": {"toolnexus": {"request": {
            "id": request.id, "kind": "approval", "prompt": "publish Q3?", "data": request.data,
        }}},
    }


@pytest.mark.parametrize(
    ("entry", "heard"),
    [
        ({"status": "cancelled"}, "cancelled: publish Q3?"),
        ({"status": "resolved", "payload": {"ok": False, "reason": "not today"}}, "not today: publish Q3?"),
        ({"status": "resolved", "payload": {"ok": False}}, "declined: publish Q3?"),
    ],
)
def test_a_cancelled_or_declined_resume_is_fed_back_without_running_the_tool(
    rt: Any, entry: dict[str, Any], heard: str
) -> None:
    first = run(rt, body("t1", "run-1", [user("the Q3 report")]))
    asked = last(first)["outcome"]["interrupts"][0]
    second = run(rt, body("t1", "run-2", [user("the Q3 report")], resume=[{"interruptId": asked["id"], **entry}]))
    results = [e["content"] for e in second if e["type"] == "TOOL_CALL_RESULT" and e["toolCallId"] == "call-publish-1"]
    assert results == [heard]


def test_text_is_one_message_per_model_step_with_ids_unique_in_the_thread(rt: Any) -> None:
    runs = approve_and_pick(rt)
    every = [e for events in runs for e in events]
    starts = [e["messageId"] for e in every if e["type"] == "TEXT_MESSAGE_START"]
    results = [e["messageId"] for e in every if e["type"] == "TOOL_CALL_RESULT"]
    calls = [e["toolCallId"] for e in every if e["type"] == "TOOL_CALL_START"]
    assert len(set(starts + results + calls)) == len(starts + results + calls)
    assert all(len(each) >= 22 for each in starts + results)  # 128 random bits
    first = runs[0]
    intro = next(e["messageId"] for e in first if e["type"] == "TEXT_MESSAGE_START")
    text = "".join(e["delta"] for e in first if e["type"] == "TEXT_MESSAGE_CONTENT" and e["messageId"] == intro)
    assert text == team.INTRO
    task = next(e for e in first if e["type"] == "TOOL_CALL_START")
    assert task == {
        "type": "TOOL_CALL_START", "toolCallId": "call-task-1", "toolCallName": "task", "parentMessageId": intro
    }


def test_the_snapshot_and_its_deltas_are_the_tree_and_keep_the_clients_state(rt: Any) -> None:
    def same_tree(events: list[dict[str, Any]]) -> None:
        state = check_run(events)
        assert state["toolnexus"]["handles"] == tree_of(rt, state["toolnexus"]["thread"])
        assert state.get("theme") == ("dark" if events[0]["runId"] == "run-1" else None)

    approve_and_pick(rt, same_tree)
    first = run(rt, body("t2", "run-1", [user("x")], state={"theme": "dark", "toolnexus": {"stale": True}}))
    assert set(first[1]["snapshot"]) == {"theme", "toolnexus"} and first[1]["snapshot"]["theme"] == "dark"
    assert "stale" not in first[1]["snapshot"]["toolnexus"]


def test_frontend_tools_are_offered_to_the_thread_agent_only(rt: Any) -> None:
    model = team.model()
    rt = type(rt)(team.registry(), generate=model)
    try:
        approve_and_pick(rt)
    finally:
        rt.close(rt.root)
    offered = {r["model"]: sorted(t["function"]["name"] for t in r.get("tools") or ()) for r in model.requests}
    assert offered == {"m-assistant": ["pick_color", "task"], "m-publisher": ["publish"]}


def test_a_frontend_tool_call_gets_no_result_until_the_client_sends_it(rt: Any) -> None:
    first, second, third = approve_and_pick(rt)
    pick = [e for e in second if e.get("toolCallId") == "call-pick-1"]
    assert kinds(pick) == ["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END"]
    assert "".join(e["delta"] for e in pick if e["type"] == "TOOL_CALL_ARGS") == '{"options": ["red", "blue"]}'
    assert [e for e in third if e["type"] == "TOOL_CALL_RESULT"] == []  # the client has it: its own message


def test_a_tool_message_with_an_error_is_an_error_result_for_the_model(cleanup: Any) -> None:
    model = team.model()
    rt = cleanup.runtime(team.registry(), generate=model)
    messages = [user("the Q3 report")]
    run(rt, body("t9", "run-1", messages))
    asked = rt.open_requests()[0]
    run(rt, body("t9", "run-2", messages, resume=[{"interruptId": asked.id, "status": "resolved"}]))
    failed = {"id": "tm-9", "role": "tool", "toolCallId": "call-pick-1", "content": ""}
    failed["error"] = "the user closed the dialog"
    third = run(rt, body("t9", "run-3", [*messages, failed]))
    assert last(third)["result"] == "Done: publisher: published Q3; colour the user closed the dialog."
    sent = [m for m in model.requests[-1]["messages"] if m.get("tool_call_id") == "call-pick-1"]
    assert sent and sent[0]["content"] == "the user closed the dialog"


def test_two_frontend_calls_of_one_step_are_answered_by_one_input(cleanup: Any) -> None:
    def two(request: dict[str, Any]) -> dict[str, Any]:
        got = team.tool_messages(request)
        if len(got) == 2:
            return {"content": " & ".join(got)}
        return {"tool_calls": [{"id": f"call-{n}", "name": "pick_color", "arguments": {}} for n in (1, 2)]}

    two_agent = team.AgentDef("two", "asks twice", model="m")
    rt = cleanup.runtime({"two": two_agent}, generate=team.ScriptedModel({"m": two}))
    first = run(rt, body("t1", "run-1", [user("go")]), agent="two")
    assert last(first)["outcome"] == {"type": "success", "pendingToolCallIds": ["call-1", "call-2"]}
    answers = [
        {"id": f"a{n}", "role": "tool", "toolCallId": f"call-{n}", "content": c} for n, c in ((1, "red"), (2, "blue"))
    ]
    with pytest.raises(agui.AGUIInputError) as refused:
        agui.events(rt, body("t1", "run-2", [user("go"), answers[0]]), agent="two")
    assert refused.value.status == 422 and "call-2" in refused.value.reason
    second = run(rt, body("t1", "run-2", [user("go"), *answers]), agent="two")
    assert last(second)["result"] == "red & blue"


def test_an_error_result_is_run_error(cleanup: Any) -> None:
    def broken(request: dict[str, Any]) -> dict[str, Any]:
        raise RuntimeError("the model is down")

    rt = cleanup.runtime({"b": team.AgentDef("b", "fails", model="m")}, generate=team.ScriptedModel({"m": broken}))
    events = run(rt, body("t1", "run-1", [user("go")]), agent="b")
    assert last(events)["type"] == "RUN_ERROR" and last(events)["code"] == "error"
    assert "the model is down" in last(events)["message"]


def test_a_client_that_goes_interrupts_the_run_and_the_thread_runs_again(cleanup: Any) -> None:
    rt, entered, gate = team.gated(cleanup, HANG)
    stream = agui.events(rt, body("t1", "run-1", [user("go")]), agent="slow")
    assert next(stream)["type"] == "RUN_STARTED"
    assert entered.wait(HANG)
    handle = rt.handles()[1].id
    assert rt.inspect(handle).state == "running"
    stream.close()  # what the server does when the client goes
    assert rt.inspect(handle).state == "idle"
    assert rt.wait(handle, timeout=HANG).status == "interrupted"
    gate.set()
    again = run(rt, body("t1", "run-2", [user("go"), user("again", id="u2")]), agent="slow")
    assert last(again)["outcome"] == {"type": "success"}


def test_an_interrupted_run_ends_cancelled(cleanup: Any) -> None:
    rt, entered, gate = team.gated(cleanup, HANG)
    stream = agui.events(rt, body("t1", "run-1", [user("go")]), agent="slow")
    seen = [next(stream)]
    assert entered.wait(HANG)
    rt.interrupt(rt.handles()[1].id)  # another request, or the app, stops the thread
    seen += list(stream)
    check_run(seen)
    assert last(seen)["outcome"] == {"type": "cancelled"}


def test_a_frontend_tool_named_like_an_own_tool_is_refused(rt: Any) -> None:
    taken = dict(PICK, name="task")
    with pytest.raises(agui.AGUIInputError) as refused:
        agui.events(rt, body("t1", "run-1", [user("go")], tools=[taken]), agent="assistant")
    assert refused.value.status == 422 and "task" in refused.value.reason
    assert len(rt.handles()) == 1  # the root alone: nothing was spawned


def test_the_models_text_streams_as_it_is_written(cleanup: Any) -> None:
    from toolnexus.testing import ScriptedLLMServer, text_completion

    bodies: list[dict[str, Any]] = []

    def respond(request: dict[str, Any]) -> dict[str, Any]:
        bodies.append(request)
        return text_completion(request, "one two three")

    with ScriptedLLMServer(respond) as server:
        rt = cleanup.runtime({"teller": team.AgentDef("teller", "tells")}, base_url=server.base_url, model="m")
        events = run(rt, body("t1", "run-1", [user("go")], tools=[]), agent="teller")
    assert bodies and all(each.get("stream") is True for each in bodies)  # watched before it was woken
    pieces = [e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT"]
    assert len(pieces) == 3 and "".join(pieces) == "one two three"


def test_an_inline_runtime_runs_the_conversation_on_the_streaming_thread(cleanup: Any) -> None:
    rt = cleanup.runtime(team.registry(), generate=team.model(), inline=True)
    third = approve_and_pick(rt)[2]
    assert last(third)["result"] == "Done: publisher: published Q3; colour blue."


def test_a_stream_that_fails_ends_with_run_error_and_stops_the_run(cleanup: Any, monkeypatch: Any) -> None:
    rt, entered, gate = team.gated(cleanup, HANG)
    stream = agui.events(rt, body("t1", "run-1", [user("go")]), agent="slow")
    assert next(stream)["type"] == "RUN_STARTED"
    assert entered.wait(HANG)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(agui._translate.Translator, "on", broken)
    gate.set()
    rest = list(stream)
    assert rest[-1] == {"type": "RUN_ERROR", "message": "the server failed (RuntimeError)", "code": "internal"}
    assert rt.wait(rt.handles()[1].id, timeout=HANG).status in ("interrupted", "done")
