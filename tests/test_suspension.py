"""Suspension with and without ``wait_for``, and ``Client.resume`` (CONTRACT §10, edition item 4)."""

from __future__ import annotations

import collections
import copy
import json
import threading

import pytest

from _helpers import Script, call, calls, make_client, text
from toolnexus import Answer, Client, InMemoryStore, Tool, Toolkit, UnknownRequest, make_answer, make_request, suspend

SCHEMA = {"type": "object", "properties": {"x": {"type": "string"}}}


class Approval:
    """A tool that suspends until answered; records every execution and each request it made."""

    def __init__(self, name="approve", prompt="approve {x}?", stages=1):
        self.name = name
        self.prompt = prompt
        self.stages = stages  # how many answers it needs before it completes
        self.lock = threading.Lock()
        self.runs = []  # (args, answer)
        self.requests = []

    def execute(self, args, ctx):
        with self.lock:
            self.runs.append((dict(args), ctx.answer))
            answered = sum(1 for _, a in self.runs if a is not None)
            if ctx.answer is None or answered < self.stages:
                request = make_request("approval", self.prompt.format(x=args.get("x", "")))
                self.requests.append(request)
                return suspend(request)
        return f"approved {args.get('x')} with {ctx.answer.data}"

    def tool(self):
        return Tool(self.name, "Needs approval.", SCHEMA, self.execute)


class Counter:
    def __init__(self, name="echo"):
        self.name = name
        self.lock = threading.Lock()
        self.runs = []

    def execute(self, args, ctx):
        with self.lock:
            self.runs.append(dict(args))
        return f"{self.name}:{args.get('x')}"

    def tool(self):
        return Tool(self.name, "Echo.", SCHEMA, self.execute)


def one_approval(**options):
    """An ``Approval(**options)``, a toolkit of just its tool, and a script that calls it once
    (``c1``, x="a"), then says "fin": ``(approval, kit, script)``."""
    approval = Approval(**options)
    return approval, Toolkit([approval.tool()]), Script(calls(call("c1", "approve", {"x": "a"})), text("fin"))


def tool_results(messages):
    """(tool_call_id, content) for every tool result in an openai transcript."""
    return [(m["tool_call_id"], m["content"]) for m in messages if m["role"] == "tool"]


def assert_balanced_openai(messages):
    call_ids = [c["id"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    result_ids = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert collections.Counter(result_ids) == collections.Counter(call_ids)
    assert all(n == 1 for n in collections.Counter(result_ids).values())


# --- §10.1 with wait_for ------------------------------------------------------------------------


def test_wait_for_ok_reruns_the_same_tool_with_the_answer_and_feeds_the_result_back():
    approval = Approval()
    asked = []

    def wait_for(request):
        asked.append(request)
        return make_answer(request.id, True, data="yes")

    script = Script(calls(call("c1", "approve", {"x": "deploy"})), text("done"))
    with make_client(script, wait_for=wait_for) as client:
        result = client.run("go", Toolkit([approval.tool()]))
    assert result.status == "done"
    assert asked == approval.requests and len(asked) == 1
    assert [args for args, _ in approval.runs] == [{"x": "deploy"}, {"x": "deploy"}]
    assert approval.runs[0][1] is None
    assert approval.runs[1][1] == Answer(id=asked[0].id, ok=True, data="yes")
    assert tool_results(result.messages) == [("c1", "approved deploy with yes")]
    assert result.tool_calls[0].is_error is False


def test_wait_for_ok_but_the_tool_suspends_again_feeds_back_unresolved():
    approval = Approval(stages=2)
    script = Script(calls(call("c1", "approve", {"x": "a"})), text("done"))
    with make_client(script, wait_for=lambda r: make_answer(r.id, True)) as client:
        result = client.run("go", Toolkit([approval.tool()]))
    assert result.status == "done"
    assert tool_results(result.messages) == [("c1", "unresolved: approve a?")]
    assert result.tool_calls[0].is_error is True
    assert len(approval.runs) == 2


@pytest.mark.parametrize("reason, prefix", [(None, "declined"), ("declined", "declined"), ("expired", "expired"), ("cancelled", "cancelled")])
def test_wait_for_not_ok_feeds_back_the_reason_and_the_run_goes_on(reason, prefix):
    approval = Approval()
    script = Script(calls(call("c1", "approve", {"x": "a"})), text("after"))
    with make_client(script, wait_for=lambda r: make_answer(r.id, False, reason=reason)) as client:
        result = client.run("go", Toolkit([approval.tool()]))
    assert result.status == "done"
    assert result.text == "after"
    assert tool_results(result.messages) == [("c1", f"{prefix}: approve a?")]
    assert len(approval.runs) == 1


def test_wait_for_raising_is_treated_as_declined_and_the_run_goes_on():
    def wait_for(request):
        raise RuntimeError("approver offline")

    approval = Approval()
    script = Script(calls(call("c1", "approve", {"x": "a"})), text("after"))
    with make_client(script, wait_for=wait_for) as client:
        result = client.run("go", Toolkit([approval.tool()]))
    assert result.status == "done"
    assert tool_results(result.messages) == [("c1", "declined: approve a?")]


# --- §10.2 without wait_for ------------------------------------------------------------------------


def test_without_wait_for_the_run_returns_pending_with_only_the_halted_placeholder():
    approval, echo = Approval(), Counter()
    script = Script(calls(call("c1", "echo", {"x": "1"}), call("c2", "approve", {"x": "a"}), call("c3", "echo", {"x": "3"})))
    with make_client(script) as client:
        result = client.run("go", Toolkit([echo.tool(), approval.tool()]))
    assert result.status == "pending"
    assert result.pending == approval.requests[0]
    assert result.limit is None
    assert result.messages[0] == {"role": "user", "content": "go"}
    assert result.messages[1]["role"] == "assistant"
    assert result.messages[2:] == [{"role": "tool", "tool_call_id": "c2", "content": "approve a?"}]
    assert len(script.requests) == 1


def test_with_several_suspensions_in_one_turn_the_first_in_call_order_is_returned():
    second_done = threading.Event()
    first, second = Approval("first", "first {x}?"), Approval("second", "second {x}?")

    def first_exec(args, ctx):
        assert second_done.wait(5)  # the second call finishes first
        return first.execute(args, ctx)

    def second_exec(args, ctx):
        try:
            return second.execute(args, ctx)
        finally:
            second_done.set()

    kit = Toolkit([Tool("first", "f", SCHEMA, first_exec), Tool("second", "s", SCHEMA, second_exec)])
    script = Script(calls(call("c1", "first", {"x": "a"}), call("c2", "second", {"x": "b"})))
    with make_client(script) as client:
        result = client.run("go", kit)
    assert result.status == "pending"
    assert result.pending == first.requests[0]
    assert result.messages[2:] == [{"role": "tool", "tool_call_id": "c1", "content": "first a?"}]


def test_a_suspension_is_not_a_tool_error_in_metrics():
    events = []
    script = Script(calls(call("c1", "approve", {"x": "a"})))
    with make_client(script, on_metric=events.append) as client:
        client.run("go", Toolkit([Approval().tool()]))
        rendered = client.metrics()
    assert [e["is_error"] for e in events if e["event"] == "tool"] == [False]
    assert 'toolnexus_tool_calls_total{tool="approve",source="native",is_error="false"} 1' in rendered.splitlines()


# --- Client.resume (openai / generate) ------------------------------------------------------------


def test_resume_with_a_wrong_answer_id_raises_unknown_request_and_changes_nothing():
    approval = Approval()
    script = Script(calls(call("c1", "approve", {"x": "a"})))
    store = InMemoryStore()
    with make_client(script, store=store) as client:
        kit = Toolkit([approval.tool()])
        result = client.ask("go", kit, id="conv")
        before_messages = copy.deepcopy(result.messages)
        before_store = store.get("conv")
        with pytest.raises(UnknownRequest):
            client.resume(result.pending, make_answer("req_other", True), kit, messages=result.messages)
        with pytest.raises(UnknownRequest):
            client.resume(result.pending, make_answer("req_other", True), kit, id="conv")
    assert result.messages == before_messages
    assert store.get("conv") == before_store
    assert len(approval.runs) == 1
    assert len(script.requests) == 1


def test_resume_from_messages_reruns_the_halted_call_with_the_answer_and_runs_the_others():
    approval, echo = Approval(), Counter()
    kit = Toolkit([echo.tool(), approval.tool()])
    script = Script(
        calls(call("c1", "echo", {"x": "1"}), call("c2", "approve", {"x": "a"}), call("c3", "echo", {"x": "3"})),
        text("finished"),
    )
    with make_client(script) as client:
        first = client.run("go", kit)
        answer = make_answer(first.pending.id, True, data="ok")
        result = client.resume(first.pending, answer, kit, messages=first.messages)
    assert result.status == "done"
    assert result.text == "finished"
    assert approval.runs[-1] == ({"x": "a"}, answer)
    assert tool_results(result.messages) == [("c1", "echo:1"), ("c2", "approved a with ok"), ("c3", "echo:3")]
    assert result.messages[:2] == first.messages[:2]
    resumed_request = script.requests[-1]["messages"]
    assert [m["role"] for m in resumed_request] == ["user", "assistant", "tool", "tool", "tool"]
    assert sum(1 for m in resumed_request if m["role"] == "user") == 1
    assert_balanced_openai(result.messages)


def test_resume_does_not_mutate_the_given_messages():
    approval, kit, script = one_approval()
    with make_client(script) as client:
        first = client.run("go", kit)
        snapshot = copy.deepcopy(first.messages)
        client.resume(first.pending, make_answer(first.pending.id, True), kit, messages=first.messages)
    assert first.messages == snapshot


def test_resume_from_the_store_by_id_saves_the_continued_transcript():
    approval, kit, script = one_approval()
    with make_client(script) as client:
        first = client.ask("go", kit, id="conv")
        assert client.conversation_store.get("conv") == first.messages
        result = client.resume(first.pending, make_answer(first.pending.id, True, data="d"), kit, id="conv")
        saved = client.conversation_store.get("conv")
    assert result.status == "done"
    assert saved == result.messages
    assert tool_results(saved) == [("c1", "approved a with d")]
    assert saved[-1] == {"role": "assistant", "content": "fin"}
    assert_balanced_openai(saved)


def test_resume_with_a_declined_answer_feeds_back_declined_without_rerunning():
    approval, kit, script = one_approval()
    with make_client(script) as client:
        first = client.run("go", kit)
        result = client.resume(first.pending, make_answer(first.pending.id, False, reason="expired"), kit, messages=first.messages)
    assert result.status == "done"
    assert tool_results(result.messages) == [("c1", "expired: approve a?")]
    assert len(approval.runs) == 1
    assert_balanced_openai(result.messages)


def test_resume_when_the_halted_call_suspends_again_returns_pending_again():
    approval, kit, script = one_approval(stages=2)
    with make_client(script) as client:
        first = client.run("go", kit)
        second = client.resume(first.pending, make_answer(first.pending.id, True), kit, messages=first.messages)
        assert second.status == "pending"
        assert second.pending == approval.requests[1]
        assert tool_results(second.messages) == [("c1", "approve a?")]
        assert_balanced_openai(second.messages)
        third = client.resume(second.pending, make_answer(second.pending.id, True, data="twice"), kit, messages=second.messages)
    assert third.status == "done"
    assert tool_results(third.messages) == [("c1", "approved a with twice")]
    assert len(script.requests) == 2
    assert_balanced_openai(third.messages)


def test_resume_when_another_call_suspends_returns_its_pending_and_keeps_the_answered_result():
    first_tool, second_tool = Approval("first", "first {x}?"), Approval("second", "second {x}?")
    kit = Toolkit([first_tool.tool(), second_tool.tool()])
    script = Script(calls(call("c1", "first", {"x": "a"}), call("c2", "second", {"x": "b"})), text("fin"))
    with make_client(script) as client:
        one = client.run("go", kit)
        assert one.pending == first_tool.requests[0]
        two = client.resume(one.pending, make_answer(one.pending.id, True, data="A"), kit, messages=one.messages)
        assert two.status == "pending"
        assert two.pending.prompt == "second b?"
        assert tool_results(two.messages) == [("c1", "approved a with A"), ("c2", "second b?")]
        three = client.resume(two.pending, make_answer(two.pending.id, True, data="B"), kit, messages=two.messages)
    assert three.status == "done"
    assert tool_results(three.messages) == [("c1", "approved a with A"), ("c2", "approved b with B")]
    assert sum(1 for _, a in first_tool.runs if a is not None) == 1  # answered once, never asked again
    assert_balanced_openai(three.messages)


def test_resume_without_messages_or_id_is_refused():
    with make_client(Script()) as client:
        request = make_request("approval", "x")
        with pytest.raises(Exception):
            client.resume(request, make_answer(request.id, True))


# --- Client.resume (anthropic over HTTP) ----------------------------------------------------------

ANTHROPIC_BASE = "https://anth.test"
ANTHROPIC_URL = ANTHROPIC_BASE + "/v1/messages"


def test_anthropic_pending_then_resume_gives_a_balanced_transcript(scripted):
    approval, echo = Approval(), Counter()
    kit = Toolkit([echo.tool(), approval.tool()])
    blocks = [
        {"type": "tool_use", "id": "tu1", "name": "echo", "input": {"x": "1"}},
        {"type": "tool_use", "id": "tu2", "name": "approve", "input": {"x": "a"}},
        {"type": "tool_use", "id": "tu3", "name": "echo", "input": {"x": "3"}},
    ]
    user = {"role": "user", "content": "go"}
    assistant = {"role": "assistant", "content": blocks}
    scripted.add(json={"content": blocks, "usage": {"input_tokens": 1, "output_tokens": 1}})
    with Client(base_url=ANTHROPIC_BASE, model="claude", style="anthropic", api_key="k", retry_base=0.001) as client:
        first = client.ask("go", kit, id="conv")
        assert first.status == "pending"
        assert first.pending == approval.requests[0]
        placeholder = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "tu2", "content": "approve a?", "is_error": True}]}
        assert first.messages == [user, assistant, placeholder]

        results = {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "tu1", "content": "echo:1"},
                {"type": "tool_result", "tool_use_id": "tu2", "content": "approved a with yes"},
                {"type": "tool_result", "tool_use_id": "tu3", "content": "echo:3"},
            ],
        }
        shipped = [{"type": "text", "text": "shipped"}]
        scripted.add(json={"content": shipped, "usage": {"input_tokens": 2, "output_tokens": 2}})
        answer = make_answer(first.pending.id, True, data="yes")
        result = client.resume(first.pending, answer, kit, id="conv")
        saved = client.conversation_store.get("conv")
    resumed = {"model": "claude", "max_tokens": 4096, "messages": [user, assistant, results]}
    assert scripted.requests[1].json() == {**resumed, "tools": kit.to_anthropic()}
    assert result.status == "done"
    assert result.text == "shipped"
    assert approval.runs[-1] == ({"x": "a"}, answer)
    assert result.messages == [user, assistant, results, {"role": "assistant", "content": [{"type": "text", "text": "shipped"}]}]
    assert saved == result.messages
    use_ids = [b["id"] for m in result.messages if m["role"] == "assistant" for b in m["content"] if b["type"] == "tool_use"]
    result_ids = [b["tool_use_id"] for m in result.messages if m["role"] == "user" and isinstance(m["content"], list) for b in m["content"]]
    assert sorted(result_ids) == sorted(use_ids) and len(set(result_ids)) == len(result_ids)


def test_anthropic_resume_from_messages_with_a_wrong_id_changes_nothing(scripted):
    approval = Approval()
    kit = Toolkit([approval.tool()])
    scripted.add(json={"content": [{"type": "tool_use", "id": "tu1", "name": "approve", "input": {"x": "a"}}]})
    with Client(base_url=ANTHROPIC_BASE, model="claude", style="anthropic", api_key="k") as client:
        first = client.run("go", kit)
        snapshot = json.dumps(first.messages)
        with pytest.raises(UnknownRequest):
            client.resume(first.pending, make_answer("nope", True), kit, messages=first.messages)
    assert json.dumps(first.messages) == snapshot
    assert len(scripted.requests) == 1
