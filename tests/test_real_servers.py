"""What real servers send and accept (CONTRACT §13 "Real servers", "Delegation helps small
models"): transcripts stay valid to send back, usage is counted as servers report it, a
cut-short answer is reported, and delegation works for small models."""

from __future__ import annotations

import copy
import logging
import threading

import pytest

from conftest import run_in_thread
from toolnexus import (
    AgentDef,
    Client,
    ConfigError,
    HookFunctions,
    InMemoryStore,
    Runtime,
    Tool,
    Toolkit,
    make_answer,
    make_request,
    suspend,
)
from toolnexus._model.styles import anthropic as anthropic_style
from toolnexus._model.styles import openai as openai_style
from toolnexus.cli.teamfile import TeamFileError, load_team
from toolnexus.testing import ScriptedModel

OPENAI_BASE = "https://llm.test/v1"
OPENAI_URL = OPENAI_BASE + "/chat/completions"
ANTHROPIC_BASE = "https://anth.test"
ANTHROPIC_URL = ANTHROPIC_BASE + "/v1/messages"
ECHO_SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}}
USAGE = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}


def echo_tool() -> Tool:
    return Tool("echo", "Echo text back.", ECHO_SCHEMA, lambda args, ctx: f"echo:{args.get('text')}")


def openai_client(**options) -> Client:
    return Client(base_url=OPENAI_BASE, model="m", api_key="k", retry_base=0.001, **options)


def anthropic_client(**options) -> Client:
    return Client(base_url=ANTHROPIC_BASE, model="c", style="anthropic", api_key="k", retry_base=0.001, **options)


def oa_reply(message: dict, *, finish: str | None = "stop", usage: dict | None = USAGE, **extra) -> dict:
    choice = {"index": 0, "message": {"role": "assistant", **message}}
    if finish is not None:
        choice["finish_reason"] = finish
    reply = {"choices": [choice], **extra}
    if usage is not None:
        reply["usage"] = usage
    return reply


def an_reply(blocks: list, *, stop: str = "end_turn", usage: dict | None = None) -> dict:
    return {"content": blocks, "stop_reason": stop, "usage": usage or {"input_tokens": 1, "output_tokens": 1}}


def sent_bodies(route) -> list[dict]:
    return [request.json() for request in route.requests]


def assistant_messages(body: dict) -> list[dict]:
    return [m for m in body["messages"] if m["role"] == "assistant"]


# --- echoed assistant messages -------------------------------------------------------------------


def test_tool_call_only_assistant_message_is_sent_back_with_empty_string_content(scripted):
    call = {"id": "c1", "type": "function", "function": {"name": "echo", "arguments": '{"text": "a"}'}}
    scripted.add(json=oa_reply({"content": None, "tool_calls": [call]}, finish="tool_calls"))
    scripted.add(json=oa_reply({"content": "done"}))
    with openai_client() as client:
        result = client.run("go", Toolkit([echo_tool()]))
    assert result.status == "done"
    [echoed] = assistant_messages(sent_bodies(scripted)[1])
    assert echoed["content"] == ""
    assert echoed["tool_calls"] == [call]


def test_tool_call_without_id_gets_one_used_alike_in_the_echo_and_its_result(scripted):
    call = {"type": "function", "function": {"name": "echo", "arguments": '{"text": "a"}'}}
    scripted.add(json=oa_reply({"content": None, "tool_calls": [call]}, finish="tool_calls"))
    scripted.add(json=oa_reply({"content": "done"}))
    with openai_client() as client:
        client.run("go", Toolkit([echo_tool()]))
    messages = sent_bodies(scripted)[1]["messages"]
    [echoed] = assistant_messages(sent_bodies(scripted)[1])
    made_up = echoed["tool_calls"][0]["id"]
    assert isinstance(made_up, str) and made_up
    assert [m["tool_call_id"] for m in messages if m["role"] == "tool"] == [made_up]


def test_made_up_call_ids_are_derived_from_the_reply_not_from_chance():
    reply = oa_reply({"content": None, "tool_calls": [{"function": {"name": "echo", "arguments": "{}"}}]})
    first, second = openai_style.parse_reply(copy.deepcopy(reply)), openai_style.parse_reply(copy.deepcopy(reply))
    assert first.tool_calls[0].id == second.tool_calls[0].id
    assert openai_style.tool_calls_of(first.message) == first.tool_calls
    other = oa_reply({"content": None, "tool_calls": [{"function": {"name": "echo", "arguments": '{"text": "b"}'}}]})
    assert openai_style.parse_reply(other).tool_calls[0].id != first.tool_calls[0].id


def test_resume_finds_a_suspended_call_that_came_without_an_id(scripted):
    request = make_request("approve", "Pay 5?")

    def pay(args, ctx):
        return "paid" if ctx.answer is not None else suspend(request)

    call = {"type": "function", "function": {"name": "pay", "arguments": "{}"}}
    scripted.add(json=oa_reply({"content": None, "tool_calls": [call]}, finish="tool_calls"))
    scripted.add(json=oa_reply({"content": "all paid"}))
    kit = Toolkit([Tool("pay", "Pay.", None, pay)])
    with openai_client(store=InMemoryStore()) as client:
        first = client.ask("pay", kit, id="conv")
        assert first.status == "pending"
        resumed = client.resume(first.pending, make_answer(request.id, True), kit, id="conv")
    assert resumed.status == "done"
    assert [r.output for r in resumed.tool_calls] == ["paid"]


def test_tool_call_missing_type_or_with_object_arguments_is_echoed_in_the_spec_shape(scripted):
    call = {"id": "c1", "function": {"name": "echo", "arguments": {"text": "a"}}}
    scripted.add(json=oa_reply({"content": None, "tool_calls": [call]}, finish="tool_calls"))
    scripted.add(json=oa_reply({"content": "done"}))
    with openai_client() as client:
        result = client.run("go", Toolkit([echo_tool()]))
    [echoed] = assistant_messages(sent_bodies(scripted)[1])
    assert echoed["tool_calls"] == [{"id": "c1", "type": "function", "function": {"name": "echo", "arguments": '{"text": "a"}'}}]
    assert result.tool_calls[0].output == "echo:a"


def test_refusal_text_is_kept_as_the_text_and_never_sent_back_as_null(scripted):
    scripted.add(json=oa_reply({"content": None, "refusal": "I can't help with that."}, finish="stop"))
    scripted.add(json=oa_reply({"content": "ok"}))
    with openai_client(store=InMemoryStore()) as client:
        first = client.ask("do it", id="conv")
        client.ask("again", id="conv")
    assert first.text == "I can't help with that."
    assert first.messages[-1] == {"role": "assistant", "content": "I can't help with that."}
    assert all(isinstance(m["content"], str) for m in sent_bodies(scripted)[1]["messages"])


def test_a_null_only_reply_is_not_kept_in_the_transcript(scripted):
    scripted.add(json=oa_reply({"content": None}, finish="content_filter"))
    scripted.add(json=oa_reply({"content": "ok"}))
    with openai_client(store=InMemoryStore()) as client:
        first = client.ask("x", id="conv")
        client.ask("y", id="conv")
    assert (first.status, first.text, first.finish_reason) == ("done", "", "content_filter")
    assert [m["role"] for m in sent_bodies(scripted)[1]["messages"]] == ["user", "user"]


def test_an_empty_anthropic_reply_is_not_stored_or_sent_back(scripted):
    scripted.add(json=an_reply([]))
    scripted.add(json=an_reply([{"type": "text", "text": "ok"}]))
    with anthropic_client(store=InMemoryStore()) as client:
        first = client.ask("x", id="conv")
        client.ask("y", id="conv")
    assert first.status == "done" and first.text == ""
    assert all(m["content"] for m in sent_bodies(scripted)[1]["messages"])
    assert [m["role"] for m in sent_bodies(scripted)[1]["messages"]] == ["user", "user"]


def test_an_anthropic_tool_use_without_id_gets_one_and_empty_text_blocks_are_dropped():
    reply = anthropic_style.parse_reply(an_reply([{"type": "text", "text": ""}, {"type": "tool_use", "name": "echo", "input": {"text": "a"}}], stop="tool_use"))
    [block] = reply.message["content"]
    assert block["type"] == "tool_use" and block["id"] == reply.tool_calls[0].id
    assert reply.tool_calls[0].arguments == {"text": "a"}


# --- every tool call with exactly one result -------------------------------------------------------


def test_ask_after_a_pending_run_with_several_calls_gives_every_call_a_result():
    request = make_request("approve", "Go?")
    kit = Toolkit([Tool("ask", "Asks.", None, lambda args, ctx: suspend(request)), echo_tool()])
    replies = [
        {"tool_calls": [{"id": "a1", "name": "ask", "arguments": {}}, {"id": "e1", "name": "echo", "arguments": {"text": "x"}}, {"id": "e2", "name": "echo", "arguments": {"text": "y"}}]},
        {"content": "fine"},
    ]
    seen = []

    def model(request):
        seen.append(copy.deepcopy(request))
        return replies.pop(0)

    with Client(model="m", generate=model) as client:
        assert client.ask("first", kit, id="conv").status == "pending"
        assert client.ask("something else", kit, id="conv").status == "done"
    messages = seen[1]["messages"]
    results = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert sorted(results) == ["a1", "e1", "e2"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool", "tool", "user"]


def test_anthropic_transcript_missing_results_gets_them_in_the_answering_user_message():
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "a", "input": {}}, {"type": "tool_use", "id": "t2", "name": "b", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "waiting"}]},
    ]
    from toolnexus._run.loop import NOT_RUN

    fixed = anthropic_style.answer_every_call(messages, NOT_RUN)
    assert len(fixed) == 3
    assert [b["tool_use_id"] for b in fixed[2]["content"]] == ["t1", "t2"]
    assert fixed[2]["content"][1]["is_error"] is True


def test_tool_choice_is_dropped_from_a_request_without_tools(scripted):
    scripted.add(json=oa_reply({"content": "hi"}))
    with openai_client(request_params={"tool_choice": "required", "parallel_tool_calls": False, "max_tokens": 50}) as client:
        client.run("x")
    body = sent_bodies(scripted)[0]
    assert "tool_choice" not in body and "parallel_tool_calls" not in body and "tools" not in body
    assert body["max_tokens"] == 50


def test_anthropic_tool_choice_is_dropped_without_tools_and_kept_with_them():
    params = {"tool_choice": {"type": "any"}}
    assert "tool_choice" not in anthropic_style.build_body("c", [], [], None, params)
    assert anthropic_style.build_body("c", [], [{"name": "t"}], None, params)["tool_choice"] == {"type": "any"}


# --- usage -----------------------------------------------------------------------------------------


def test_anthropic_prompt_tokens_include_cache_reads_and_writes():
    usage = anthropic_style.usage_of({"input_tokens": 1, "cache_read_input_tokens": 318, "cache_creation_input_tokens": 10, "output_tokens": 5})
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (329, 5, 334)


def test_a_reply_without_usage_counts_zero_and_warns_once_per_client(scripted, caplog):
    for _ in range(3):
        scripted.add(json=oa_reply({"content": "hi"}, usage=None))
    caplog.set_level(logging.WARNING, logger="toolnexus")
    with openai_client() as client:
        results = [client.run("x") for _ in range(2)]
    with openai_client() as other:
        other.run("x")
    assert [r.usage.total_tokens for r in results] == [0, 0]
    assert [r.usage.unmeasured_calls for r in results] == [1, 1]
    warnings = [r for r in caplog.records if "no usage" in r.getMessage()]
    assert len(warnings) == 2  # one per client


# --- replies cut short -----------------------------------------------------------------------------


def test_finish_reason_length_ends_the_run_incomplete_with_the_text_kept(scripted):
    scripted.add(json=oa_reply({"content": "The borrow checker is"}, finish="length"))
    with openai_client() as client:
        result = client.run("x")
    assert (result.status, result.limit, result.text, result.finish_reason) == ("incomplete", "maxOutputTokens", "The borrow checker is", "length")


def test_anthropic_stop_reason_max_tokens_ends_the_run_incomplete(scripted):
    scripted.add(json=an_reply([{"type": "text", "text": "Half a"}], stop="max_tokens"))
    with anthropic_client() as client:
        result = client.run("x")
    assert (result.status, result.limit, result.text, result.finish_reason) == ("incomplete", "maxOutputTokens", "Half a", "max_tokens")


def test_run_result_carries_the_last_finish_reason():
    replies = [{"tool_calls": [{"id": "c1", "name": "echo", "arguments": {}}], "finish_reason": "tool_calls"}, {"content": "ok", "finish_reason": "stop"}]
    with Client(model="m", generate=lambda request: replies.pop(0)) as client:
        result = client.run("x", Toolkit([echo_tool()]))
    assert (result.status, result.finish_reason) == ("done", "stop")


def test_agent_result_carries_the_finish_reason_and_a_cut_answer_is_incomplete():
    rt = Runtime({"w": AgentDef("w", "writes")}, generate=lambda request: {"content": "cut", "finish_reason": "length"})
    try:
        result = run_in_thread(lambda: rt.run_agent("w", "write"))
    finally:
        rt.close(rt.root)
    assert (result.status, result.limit, result.text, result.finish_reason) == ("incomplete", "maxOutputTokens", "cut", "length")


# --- turns on every outcome ------------------------------------------------------------------------


def test_agent_result_turns_counts_the_model_calls_of_a_failed_turn():
    replies = [{"tool_calls": [{"id": "c1", "name": "echo", "arguments": {}}]}]

    def model(request):
        if replies:
            return replies.pop(0)
        raise RuntimeError("the endpoint went away")

    rt = Runtime({"w": AgentDef("w", "works", tools=[echo_tool()])}, generate=model)
    try:
        handle = rt.spawn(rt.root, "w")
        rt.wake(handle, "go")
        result = run_in_thread(lambda: rt.wait(handle))
        view = rt.inspect(handle)
    finally:
        rt.close(rt.root)
    assert result.status == "error"
    assert result.turns == view.turns == 1


def slow_tool(entered: threading.Event, release: threading.Event) -> Tool:
    """A tool that says it started, then blocks until ``release``."""

    def slow(args, ctx):
        entered.set()
        release.wait(10)
        return "late"

    return Tool("slow", "Slow.", None, slow)


def test_agent_result_turns_counts_the_model_calls_of_an_interrupted_turn(cleanup):
    entered, release = threading.Event(), cleanup.event()
    rt = cleanup.runtime({"w": AgentDef("w", "works", tools=[slow_tool(entered, release)])}, generate=lambda request: {"tool_calls": [{"id": "s1", "name": "slow", "arguments": {}}]})
    handle = rt.spawn(rt.root, "w")
    rt.wake(handle, "go")
    assert entered.wait(10)
    rt.interrupt(handle)
    result = run_in_thread(lambda: rt.wait(handle))
    assert (result.status, result.turns) == ("interrupted", 1)


# --- delegation for small models ---------------------------------------------------------------------


class Recorder(ScriptedModel):
    def __call__(self, request):
        return super().__call__(copy.deepcopy(request))


def test_task_tool_lists_the_team_as_an_enum_of_the_agent_property():
    model = Recorder({"m-lead": {"content": "ok"}})
    registry = {
        "lead": AgentDef("lead", "leads", model="m-lead", team=["writer", "researcher"]),
        "writer": AgentDef("writer", "writes"),
        "researcher": AgentDef("researcher", "researches"),
    }
    rt = Runtime(registry, generate=model)
    try:
        run_in_thread(lambda: rt.run_agent("lead", "go"))
    finally:
        rt.close(rt.root)
    [task] = [t["function"] for t in model.requests[0]["tools"] if t["function"]["name"] == "task"]
    assert task["parameters"]["properties"]["agent"] == {"type": "string", "description": "Team agent to delegate to", "enum": ["researcher", "writer"]}


def lead_repeating(times: int):
    """A lead that makes the same task call ``times`` times in one turn, one call per model call."""

    def step(request):
        asked = sum(1 for m in request["messages"] if m["role"] == "tool")
        if asked < times:
            return {"tool_calls": [{"id": f"t{asked}", "name": "task", "arguments": {"agent": "w", "prompt": "same"}}]}
        return {"content": " | ".join(m["content"] for m in request["messages"] if m["role"] == "tool")}

    return step


def test_a_repeated_task_call_whose_child_failed_runs_a_fresh_child():
    outcomes = ["fail", "works"]

    def worker(request):
        if outcomes.pop(0) == "fail":
            raise RuntimeError("transient outage")
        return {"content": "done by the second child"}

    registry = {"lead": AgentDef("lead", "leads", model="m-lead", team=["w"]), "w": AgentDef("w", "works", model="m-w")}
    rt = Runtime(registry, generate=ScriptedModel({"m-lead": lead_repeating(2), "m-w": worker}))
    try:
        handle = rt.spawn(rt.root, "lead")
        rt.wake(handle, "go")
        result = run_in_thread(lambda: rt.wait(handle))
        children = rt.inspect(handle).children
        index = dict(handle.record.task_keys)
    finally:
        rt.close(rt.root)
    assert result.status == "done"
    assert result.text.startswith("[error]") and result.text.endswith("done by the second child")
    assert children == ["root/lead.1/w.1", "root/lead.1/w.2"]
    assert index[("w", "same")].child == "root/lead.1/w.2"


def test_a_repeated_task_call_whose_child_finished_done_reattaches():
    registry = {"lead": AgentDef("lead", "leads", model="m-lead", team=["w"]), "w": AgentDef("w", "works", model="m-w")}
    model = ScriptedModel({"m-lead": lead_repeating(2), "m-w": {"content": "once"}})
    rt = Runtime(registry, generate=model)
    try:
        handle = rt.spawn(rt.root, "lead")
        rt.wake(handle, "go")
        result = run_in_thread(lambda: rt.wait(handle))
        children = rt.inspect(handle).children
    finally:
        rt.close(rt.root)
    assert result.text == "once | once"
    assert children == ["root/lead.1/w.1"]
    assert model.calls["m-w"] == 1


# --- definitions -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["", "x" * 65, "a" * 70 + "!"])
def test_a_tool_name_empty_or_longer_than_64_characters_is_a_config_error(name):
    with pytest.raises(ConfigError):
        Tool(name, "d", None, lambda args, ctx: "")


def test_a_tool_name_of_64_characters_after_sanitising_is_accepted():
    assert Tool("a.b" + "c" * 61, "d", None, lambda args, ctx: "").name == "a_b" + "c" * 61


def test_team_file_sets_request_params(tmp_path):
    path = tmp_path / "team.toml"
    path.write_text('[connection]\nmodel = "m"\n[connection.request_params]\nmax_tokens = 256\ntool_choice = "required"\n[agents.a]\ndoes = "does a"\n')
    assert load_team(str(path)).connection["request_params"] == {"max_tokens": 256, "tool_choice": "required"}


@pytest.mark.parametrize(
    ("table", "problem"),
    [("request_params = 5", "must be a table"), ("[connection.request_params]\nstream = true", "may not set stream"), ("[connection.request_params]\ntemperature = nan", "JSON")],
)
def test_team_file_request_params_that_cannot_be_sent_are_refused(tmp_path, table, problem):
    path = tmp_path / "team.toml"
    path.write_text(f'[connection]\nmodel = "m"\n{table}\n[agents.a]\ndoes = "does a"\n')
    with pytest.raises(TeamFileError, match=problem):
        load_team(str(path))


def test_hooks_accept_a_typed_dict_of_the_four_hooks():
    seen = []
    hooks: HookFunctions = {"after_llm": lambda *, response, model, turn: seen.append(turn)}
    with Client(model="m", generate=lambda request: {"content": "ok"}, hooks=hooks) as client:
        client.run("x")
    assert seen == [1]


def test_agent_result_turns_on_a_wait_timeout_counts_the_running_turns_model_calls(cleanup):
    entered, release = threading.Event(), cleanup.event()
    replies = [{"tool_calls": [{"id": "s1", "name": "slow", "arguments": {}}]}, {"content": "second turn"}, {"tool_calls": [{"id": "s2", "name": "slow", "arguments": {}}]}]
    rt = cleanup.runtime({"w": AgentDef("w", "works", tools=[slow_tool(entered, release)])}, generate=lambda request: replies.pop(0))
    handle = rt.spawn(rt.root, "w")
    release.set()
    rt.wake(handle, "first")
    assert run_in_thread(lambda: rt.wait(handle)).turns == 2
    release.clear()
    entered.clear()
    rt.wake(handle, "again")
    assert entered.wait(10)
    result = rt.wait(handle, timeout=0.01)
    assert (result.status, result.turns) == ("timeout", 1)
    assert rt.inspect(handle).turns == 3
