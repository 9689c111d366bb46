"""Traces: turns, model calls and tool calls as OpenTelemetry spans (CONTRACT §14)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from _helpers import HANG, Asker, call, calls, task, text
from conftest import run_in_thread
from toolnexus import AgentDef, Budget, Client, LLMError, Tool, Toolkit, make_answer
from toolnexus.testing import ScriptedLLMServer, ScriptedModel, text_completion, tool_call_completion, tool_messages

USAGE = {"prompt_tokens": 30, "completion_tokens": 10, "total_tokens": 40}
ROOT = Path(__file__).resolve().parent.parent

_exporter = InMemorySpanExporter()


def _install_provider() -> None:
    """One SDK provider for the whole test process (the global provider is set once)."""
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_exporter))
        trace.set_tracer_provider(provider)


@pytest.fixture
def spans():
    _install_provider()
    _exporter.clear()
    yield _exporter
    _exporter.clear()


def named(finished, name):
    found = [s for s in finished if s.name == name]
    assert found, f"no span {name!r} among {[s.name for s in finished]}"
    return found


def one(finished, name, **attributes):
    found = [s for s in named(finished, name) if all(s.attributes.get(k) == v for k, v in attributes.items())]
    assert len(found) == 1, f"{len(found)} spans {name!r} with {attributes}"
    return found[0]


def parent_of(finished, span):
    by_id = {s.context.span_id: s for s in finished}
    return by_id.get(span.parent.span_id) if span.parent is not None else None


def children_of(finished, span):
    return [s for s in finished if s.parent is not None and s.parent.span_id == span.context.span_id]


def lookup_tool(name):
    return Tool(name, f"The {name} tool.", {"type": "object", "properties": {"q": {"type": "string"}}}, lambda args, ctx: f"{name}({args.get('q')})")


def worker_step(tool_name):
    """Call ``tool_name`` once, then answer with what it returned."""

    def step(request):
        found = tool_messages(request)
        return text("found " + found[-1]) if found else calls(call(f"{tool_name}-call", tool_name, {"q": "x"}))

    return step


def lead_step(request):
    """Delegate to both teammates at once, then sum up."""
    found = tool_messages(request)
    return text("both: " + "; ".join(found)) if found else calls(task("t-alpha", "alpha", "look it up"), task("t-beta", "beta", "fetch it"))


TEAM = {
    "lead": AgentDef("lead", "Leads.", model="m-lead", team=("alpha", "beta")),
    "alpha": AgentDef("alpha", "Looks up.", model="m-alpha", tools=[lookup_tool("lookup")]),
    "beta": AgentDef("beta", "Fetches.", model="m-beta", tools=[lookup_tool("fetch")]),
}


def team_model():
    return ScriptedModel({"m-lead": lead_step, "m-alpha": worker_step("lookup"), "m-beta": worker_step("fetch")}, usage=USAGE)


# --- the span tree of a team run -------------------------------------------------------------------


def test_a_team_run_is_one_trace_nested_as_the_handle_tree(spans, cleanup):
    rt = cleanup.runtime(TEAM, generate=team_model())
    result = run_in_thread(lambda: rt.run_agent("lead", "go"))
    assert result.status == "done"
    finished = spans.get_finished_spans()

    lead = one(finished, "invoke_agent lead")
    assert parent_of(finished, lead) is None
    assert lead.attributes["toolnexus.handle.id"] == "root/lead.1"
    assert lead.attributes["toolnexus.turn.status"] == "done"
    assert lead.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert lead.attributes["gen_ai.agent.name"] == "lead"
    assert {s.context.trace_id for s in finished} == {lead.context.trace_id}

    for agent_name, call_id, tool_name, number in (("alpha", "t-alpha", "lookup", 1), ("beta", "t-beta", "fetch", 2)):
        delegation = one(finished, "execute_tool task", **{"gen_ai.tool.call.id": call_id})
        assert parent_of(finished, delegation) is lead
        child = one(finished, f"invoke_agent {agent_name}")
        assert parent_of(finished, child) is delegation  # across the worker pool
        assert child.attributes["toolnexus.handle.id"] == f"root/lead.1/{agent_name}.{number}"
        assert child.attributes["toolnexus.turn.status"] == "done"
        tool = one(finished, f"execute_tool {tool_name}")
        assert parent_of(finished, tool) is child
        assert tool.attributes["gen_ai.tool.call.id"] == f"{tool_name}-call"
        assert tool.attributes["gen_ai.tool.name"] == tool_name
        chats = named(finished, f"chat m-{agent_name}")
        assert [parent_of(finished, c) for c in chats] == [child, child]
        assert sorted(tuple(c.attributes["gen_ai.response.finish_reasons"]) for c in chats) == [("stop",), ("tool_calls",)]

    lead_chats = named(finished, "chat m-lead")
    assert len(lead_chats) == 2 and all(parent_of(finished, c) is lead for c in lead_chats)
    for chat in named(finished, "chat m-lead") + named(finished, "chat m-alpha") + named(finished, "chat m-beta"):
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.request.model"] == chat.name.split(" ", 1)[1]
        assert chat.attributes["gen_ai.usage.input_tokens"] == 30
        assert chat.attributes["gen_ai.usage.output_tokens"] == 10
        assert chat.kind == trace.SpanKind.CLIENT
    assert sorted(s.name for s in children_of(finished, lead)) == ["chat m-lead", "chat m-lead", "execute_tool task", "execute_tool task"]


def test_a_turn_run_by_its_waiter_nests_under_the_waiters_tool_call(spans, cleanup):
    # The only worker is held by another agent, so the lead's turn and then its teammate's
    # turn run on the waiting thread itself (nobody else can start them).
    gate = cleanup.gate(text("blocker done"))
    seen_on = []

    def lookup(args, ctx):
        seen_on.append(threading.current_thread().name)
        return "found"

    def lead(request):
        return text("ok") if tool_messages(request) else calls(task("t-1", "alpha", "look"))

    registry = {
        "lead": AgentDef("lead", "Leads.", model="m-lead", team=("alpha",)),
        "alpha": AgentDef("alpha", "Looks up.", model="m-alpha", tools=[Tool("lookup", "Looks up.", {"type": "object", "properties": {}}, lookup)]),
        "blocker": AgentDef("blocker", "Holds the worker.", model="m-blocker"),
    }
    model = ScriptedModel({"m-lead": lead, "m-alpha": worker_step("lookup"), "m-blocker": gate}, usage=USAGE)
    rt = cleanup.runtime(registry, generate=model, max_workers=1)
    rt.wake(rt.spawn(rt.root, "blocker"), "hold")
    assert gate.entered.wait(HANG)
    assert run_in_thread(lambda: rt.run_agent("lead", "go")).status == "done"
    assert seen_on == ["test-scenario"]
    gate.release.set()
    finished = spans.get_finished_spans()
    assert parent_of(finished, one(finished, "invoke_agent alpha")) is one(finished, "execute_tool task")
    assert parent_of(finished, one(finished, "execute_tool task")) is one(finished, "invoke_agent lead")


def test_a_queued_wake_nests_where_it_was_woken(spans, cleanup):
    gate = cleanup.gate(text("slow done"))
    registry = {
        "boss": AgentDef("boss", "Runs one at a time.", model="m-boss", budget=Budget(max_concurrent=1)),
        "slow": AgentDef("slow", "Slow.", model="m-slow"),
        "quick": AgentDef("quick", "Quick.", model="m-quick"),
    }
    rt = cleanup.runtime(registry, generate=ScriptedModel({"m-slow": gate, "m-quick": text("quick done")}, usage=USAGE))
    boss = rt.spawn(rt.root, "boss")
    slow, quick = rt.spawn(boss, "slow"), rt.spawn(boss, "quick")
    tracer = trace.get_tracer("host")
    with tracer.start_as_current_span("first wake"):
        rt.wake(slow, "a")
    assert gate.entered.wait(HANG)
    with tracer.start_as_current_span("second wake"):
        rt.wake(quick, "b")  # queued behind slow: boss runs one child at a time
    assert rt.inspect(quick).state == "idle"
    gate.release.set()
    assert rt.wait(quick, timeout=HANG).status == "done"
    finished = spans.get_finished_spans()
    assert parent_of(finished, one(finished, "invoke_agent quick")) is one(finished, "second wake")
    assert parent_of(finished, one(finished, "invoke_agent slow")) is one(finished, "first wake")


# --- suspension and resume -------------------------------------------------------------------------


def test_a_suspended_run_shows_the_suspended_event_and_the_resumed_turns(spans, cleanup):
    asker = Asker()
    registry = {
        "boss": AgentDef("boss", "Delegates.", model="m-boss", team=("asker",)),
        "asker": AgentDef("asker", "Asks.", model="m-asker", tools=[asker.tool()]),
    }

    def boss(request):
        found = tool_messages(request)
        return text("boss saw " + found[-1]) if found else calls(task("t-ask", "asker", "ask them"))

    def asker_step(request):
        found = tool_messages(request)
        return text("finished:" + ",".join(found)) if found else calls(call("c-ask", "ask"))

    rt = cleanup.runtime(registry, generate=ScriptedModel({"m-boss": boss, "m-asker": asker_step}, usage=USAGE))
    first = run_in_thread(lambda: rt.run_agent("boss", "go"))
    assert first.status == "pending"
    request_id = first.pending.id
    suspended = spans.get_finished_spans()

    ask = one(suspended, "execute_tool ask")
    assert [(e.name, e.attributes["toolnexus.request.id"]) for e in ask.events] == [("suspended", request_id)]
    delegation = one(suspended, "execute_tool task")
    assert [(e.name, e.attributes["toolnexus.request.id"]) for e in delegation.events] == [("suspended", request_id)]
    assert delegation.status.status_code != StatusCode.ERROR  # a suspension is no failure
    first_turns = {}
    for name in ("invoke_agent boss", "invoke_agent asker"):
        turn = first_turns[name] = one(suspended, name)
        assert turn.attributes["toolnexus.turn.status"] == "pending"
        assert turn.attributes["toolnexus.request.id"] == request_id

    spans.clear()
    with trace.get_tracer("host").start_as_current_span("answer") as host:
        rt.resume(make_answer(request_id, True, data="yes"))
    assert rt.wait(first.handle_id, timeout=HANG).status == "done"
    resumed = spans.get_finished_spans()
    for name, handle_id in (("invoke_agent boss", "root/boss.1"), ("invoke_agent asker", "root/boss.1/asker.1")):
        turn = one(resumed, name)
        assert turn.attributes["toolnexus.handle.id"] == handle_id
        assert turn.attributes["toolnexus.turn.status"] == "done"
        assert turn.parent.span_id == host.get_span_context().span_id  # nests where the answer came in
        assert turn.attributes["toolnexus.turn.resumed"] is True
        assert [link.context.span_id for link in turn.links] == [first_turns[name].context.span_id]
    again = one(resumed, "execute_tool ask")
    assert parent_of(resumed, again) is one(resumed, "invoke_agent asker")
    assert again.events == ()


def test_wait_for_marks_the_suspension_on_the_tool_span_and_finishes_in_it(spans):
    asker = Asker()
    script = ScriptedModel({"m": [calls(call("c1", "ask")), text("done")]}, usage=USAGE)
    with Client(model="m", generate=script, wait_for=lambda request: make_answer(request.id, True, data="ok")) as client:
        result = client.run("go", Toolkit([asker.tool()]))
    assert result.status == "done"
    ask = one(spans.get_finished_spans(), "execute_tool ask")
    assert [e.name for e in ask.events] == ["suspended"]
    assert ask.status.status_code != StatusCode.ERROR


# --- a bare client run -----------------------------------------------------------------------------


def test_a_client_run_is_one_invoke_agent_span_with_its_model_and_tool_calls(spans):
    script = ScriptedModel({"m": [calls(call("c1", "lookup", {"q": "a"})), text("done")]}, usage=USAGE)
    with Client(model="m", generate=script) as client:
        client.run("go", Toolkit([lookup_tool("lookup")]))
    finished = spans.get_finished_spans()
    run = one(finished, "invoke_agent")
    assert parent_of(finished, run) is None
    assert run.attributes["toolnexus.turn.status"] == "done"
    assert [s.name for s in sorted(children_of(finished, run), key=lambda s: s.start_time)] == ["chat m", "execute_tool lookup", "chat m"]


# --- failures --------------------------------------------------------------------------------------


def test_an_llm_error_marks_the_chat_span_and_the_run(spans):
    def broken(request):
        raise RuntimeError("model fell over: SECRET-DETAIL")

    with Client(model="m", generate=broken) as client, pytest.raises(LLMError):
        client.run("go")
    finished = spans.get_finished_spans()
    chat = one(finished, "chat m")
    assert chat.status.status_code == StatusCode.ERROR
    assert chat.attributes["error.type"] == "LLMError"
    assert "SECRET-DETAIL" not in (chat.status.description or "")
    run = one(finished, "invoke_agent")
    assert run.status.status_code == StatusCode.ERROR
    assert run.attributes["toolnexus.turn.status"] == "error"


def test_an_http_error_status_goes_on_the_chat_span(spans):
    def respond(body):
        raise ValueError("no")  # the scripted server answers 500

    with ScriptedLLMServer(respond) as server, Client(base_url=server.base_url, model="m", retries=0, api_key="sk-x") as client:
        with pytest.raises(LLMError):
            client.run("go")
    chat = one(spans.get_finished_spans(), "chat m")
    assert chat.status.status_code == StatusCode.ERROR
    assert chat.attributes["http.response.status_code"] == 500
    assert chat.attributes["gen_ai.provider.name"] == "openai"


def test_a_failed_turn_ends_its_span_as_an_error(spans, cleanup):
    def broken(request):
        raise RuntimeError("down")

    rt = cleanup.runtime({"solo": AgentDef("solo", "Alone.", model="m")}, generate=broken)
    assert run_in_thread(lambda: rt.run_agent("solo", "go")).status == "error"
    finished = spans.get_finished_spans()
    turn = one(finished, "invoke_agent solo")
    assert turn.status.status_code == StatusCode.ERROR
    assert turn.attributes["toolnexus.turn.status"] == "error"
    assert one(finished, "chat m").status.status_code == StatusCode.ERROR


def test_a_tool_error_result_marks_its_span(spans):
    failing = Tool("fails", "Fails.", {"type": "object", "properties": {}}, lambda args, ctx: 1 / 0)
    script = ScriptedModel({"m": [calls(call("c1", "fails")), text("done")]}, usage=USAGE)
    with Client(model="m", generate=script) as client:
        client.run("go", Toolkit([failing]))
    tool = one(spans.get_finished_spans(), "execute_tool fails")
    assert tool.status.status_code == StatusCode.ERROR
    assert tool.attributes["error.type"] == "tool_error"


# --- content ---------------------------------------------------------------------------------------

MARKERS = ("PROMPT-MARK", "SOUL-MARK", "ARG-MARK", "RESULT-MARK", "REPLY-MARK")
API_KEY = "sk-KEY-MARK-never-traced"


def _marked_team_run(cleanup, **options):
    tool = Tool("lookup", "Looks up.", {"type": "object", "properties": {"q": {"type": "string"}}}, lambda args, ctx: "RESULT-MARK " + args["q"])

    def lead(request):
        found = tool_messages(request)
        return text("REPLY-MARK " + found[-1]) if found else calls(task("t1", "alpha", "PROMPT-MARK for alpha"))

    def alpha(request):
        found = tool_messages(request)
        return text("REPLY-MARK " + found[-1]) if found else calls(call("c1", "lookup", {"q": "ARG-MARK"}))

    registry = {
        "lead": AgentDef("lead", "Leads.", model="m-lead", soul="SOUL-MARK", team=("alpha",)),
        "alpha": AgentDef("alpha", "Looks up.", model="m-alpha", soul="SOUL-MARK", tools=[tool]),
    }
    rt = cleanup.runtime(registry, generate=ScriptedModel({"m-lead": lead, "m-alpha": alpha}, usage=USAGE), **options)
    assert run_in_thread(lambda: rt.run_agent("lead", "PROMPT-MARK")).status == "done"


def _marked_client_run(**options):
    def respond(body):
        found = tool_messages(body)
        if found:
            return text_completion(body, "REPLY-MARK " + found[-1])
        return tool_call_completion(body, [("c1", "lookup", {"q": "ARG-MARK"})])

    tool = Tool("lookup", "Looks up.", {"type": "object", "properties": {"q": {"type": "string"}}}, lambda args, ctx: "RESULT-MARK")
    with ScriptedLLMServer(respond) as server, Client(base_url=server.base_url, model="m", api_key=API_KEY, system_prompt="SOUL-MARK", **options) as client:
        assert client.run("PROMPT-MARK", Toolkit([tool])).status == "done"


def everything_recorded(finished):
    """Every string a span carries: names, attributes, events, status descriptions."""
    parts = []
    for s in finished:
        parts.append(s.name)
        parts.append(json.dumps({k: list(v) if isinstance(v, tuple) else v for k, v in s.attributes.items()}))
        for event in s.events:
            parts.append(event.name + json.dumps(dict(event.attributes)))
        parts.append(s.status.description or "")
    return "\n".join(parts)


def test_no_span_carries_text_by_default(spans, cleanup):
    _marked_team_run(cleanup)
    _marked_client_run()
    recorded = everything_recorded(spans.get_finished_spans())
    assert len(spans.get_finished_spans()) >= 10
    for marker in (*MARKERS, "KEY-MARK"):
        assert marker not in recorded


def test_trace_content_records_prompts_completions_and_tool_text_but_never_the_key(spans, cleanup):
    _marked_team_run(cleanup, trace_content=True)
    _marked_client_run(trace_content=True)
    finished = spans.get_finished_spans()
    recorded = everything_recorded(finished)
    for marker in MARKERS:
        assert marker in recorded
    assert "KEY-MARK" not in recorded
    tool = one(finished, "execute_tool lookup", **{"gen_ai.tool.call.id": "c1", "gen_ai.tool.call.result": "RESULT-MARK"})
    assert json.loads(tool.attributes["gen_ai.tool.call.arguments"]) == {"q": "ARG-MARK"}
    chat = named(finished, "chat m-alpha")[0]
    assert "PROMPT-MARK for alpha" in chat.attributes["gen_ai.input.messages"]


def test_agent_run_takes_trace_content(spans):
    from toolnexus import agent

    solo = agent("solo", does="Alone.", model="m")
    solo.run("PROMPT-MARK", generate=ScriptedModel({"m": text("REPLY-MARK")}), trace_content=True)
    chat = one(spans.get_finished_spans(), "chat m")
    assert "PROMPT-MARK" in chat.attributes["gen_ai.input.messages"]
    assert "REPLY-MARK" in chat.attributes["gen_ai.output.messages"]


# --- without opentelemetry -------------------------------------------------------------------------

_BLOCKED_RUN = textwrap.dedent(
    """
    import sys

    class Block:
        def find_spec(self, name, path=None, target=None):
            if name == "opentelemetry" or name.startswith("opentelemetry."):
                raise ImportError("opentelemetry is not installed here")
            return None

    sys.meta_path.insert(0, Block())

    from toolnexus import AgentDef, Client, Runtime, Tool, Toolkit
    from toolnexus.testing import ScriptedModel

    tool = Tool("lookup", "Looks up.", {"type": "object", "properties": {}}, lambda args, ctx: "found")
    steps = [{"tool_calls": [{"id": "c1", "name": "lookup", "arguments": {}}]}, {"content": "done"}]
    with Client(model="m", generate=ScriptedModel({"m": steps}), trace_content=True) as client:
        assert client.run("go", Toolkit([tool])).status == "done"

    def lead(request):
        if any(m["role"] == "tool" for m in request["messages"]):
            return {"content": "lead done"}
        return {"tool_calls": [{"id": "t1", "name": "task", "arguments": {"agent": "helper", "prompt": "help"}}]}

    registry = {
        "lead": AgentDef("lead", "Leads.", model="m-lead", team=("helper",)),
        "helper": AgentDef("helper", "Helps.", model="m-helper", tools=[tool]),
    }
    model = ScriptedModel({"m-lead": lead, "m-helper": steps})
    with Runtime(registry, generate=model) as rt:
        assert rt.run_agent("lead", "go").status == "done"

    loaded = sorted(name for name in sys.modules if name.startswith("opentelemetry"))
    assert not loaded, loaded
    print("ok")
    """
)


def test_without_opentelemetry_nothing_of_it_is_imported():
    done = subprocess.run([sys.executable, "-c", _BLOCKED_RUN], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_the_trace_context_of_a_queued_turn_is_plain_text_headers(spans):
    from toolnexus._run import tracing

    assert tracing.capture() == {}  # no active span: the turn would start its own trace
    with trace.get_tracer("host").start_as_current_span("host") as host:
        carrier = tracing.capture()
    assert json.loads(json.dumps(carrier)) == carrier
    assert carrier["traceparent"].split("-")[2] == format(host.get_span_context().span_id, "016x")
    done = threading.Event()
    result = {}

    def elsewhere():  # a thread (or a process) that only has the headers
        with tracing.Tracer().agent("remote", model="m", parent=carrier) as traced:
            traced.done("done")
        result["ok"] = True
        done.set()

    threading.Thread(target=elsewhere).start()
    assert done.wait(HANG) and result["ok"]
    remote = one(spans.get_finished_spans(), "invoke_agent remote")
    assert remote.parent.span_id == host.get_span_context().span_id


def test_an_interrupted_turn_ends_its_span_as_interrupted_not_failed(spans, cleanup):
    gate = cleanup.gate(text("too late"))
    rt = cleanup.runtime({"slow": AgentDef("slow", "Slow.", model="m-slow")}, generate=ScriptedModel({"m-slow": gate}))
    handle = rt.spawn(rt.root, "slow")
    rt.wake(handle, "go")
    assert gate.entered.wait(HANG)
    rt.interrupt(handle)
    gate.release.set()
    run_in_thread(lambda: rt.close(rt.root))  # returns once the turn's thread has ended
    turn = one(spans.get_finished_spans(), "invoke_agent slow")
    assert turn.attributes["toolnexus.turn.status"] == "interrupted"
    assert turn.status.status_code != StatusCode.ERROR


def test_finish_reasons_come_from_the_wire():
    from toolnexus._model.styles import anthropic
    from toolnexus._model.styles import openai

    reply = openai.parse_reply({"choices": [{"message": {"role": "assistant", "content": "cut"}, "finish_reason": "length"}]})
    assert reply.finish_reason == "length"
    reply = anthropic.parse_reply({"content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn"})
    assert reply.finish_reason == "end_turn"
    assert openai.parse_generated({"content": "hi"}).finish_reason == "stop"
    assert openai.parse_generated({"tool_calls": [{"name": "x"}]}).finish_reason == "tool_calls"
