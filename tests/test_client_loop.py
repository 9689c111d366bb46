"""The client loop with the in-process model (CONTRACT §8, edition item 5)."""

from __future__ import annotations

import asyncio
import copy
import json
import threading

import pytest

from _helpers import Script, call, calls, make_client, text
from toolnexus import LLMError, Tool, ToolResult, Toolkit, make_request, suspend

SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}}


def echo_tool(seen=None):
    def execute(args, ctx):
        if seen is not None:
            seen.append(args)
        return f"echo:{args.get('text')}"

    return Tool("echo", "Echo.", SCHEMA, execute)


def tool_messages(result):
    return [m for m in result.messages if m["role"] == "tool"]


# --- the loop ----------------------------------------------------------------------------------


def test_generate_receives_model_messages_and_openai_tools():
    kit = Toolkit([echo_tool()])
    script = Script(text("hi"))
    with make_client(script, system_prompt="sys") as client:
        client.run("hello", kit)
    assert script.requests == [
        {"model": "m", "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hello"}], "tools": kit.to_openai()}
    ]


def test_generate_receives_an_empty_tool_list_without_a_toolkit():
    script = Script(text("hi"))
    with make_client(script) as client:
        result = client.run("hello")
    assert script.requests[0]["tools"] == []
    assert result.status == "done"
    assert result.turns == 1
    assert result.messages[-1] == {"role": "assistant", "content": "hi"}


def test_history_comes_between_system_and_prompt():
    script = Script(text("ok"))
    history = [{"role": "user", "content": "earlier"}, {"role": "assistant", "content": "reply"}]
    with make_client(script, system_prompt="sys") as client:
        client.run("now", history=history)
    assert script.requests[0]["messages"] == [{"role": "system", "content": "sys"}, *history, {"role": "user", "content": "now"}]


def test_run_stops_at_max_turns_with_status_incomplete():
    script = Script(*[calls(call(f"c{i}", "echo", {"text": str(i)})) for i in range(5)])
    with make_client(script, max_turns=2) as client:
        result = client.run("loop", Toolkit([echo_tool()]))
    assert result.status == "incomplete"
    assert result.limit == "maxTurns"
    assert result.turns == 2
    assert len(script.requests) == 2
    assert result.messages[-1] == {"role": "tool", "tool_call_id": "c1", "content": "echo:1"}


def test_usage_from_generate_is_summed_across_turns():
    u = {"prompt_tokens": 2, "completion_tokens": 3, "total_tokens": 5}
    script = Script(calls(call("c1", "echo", {"text": "a"}), usage=u), text("done", usage=u))
    with make_client(script) as client:
        result = client.run("x", Toolkit([echo_tool()]))
    assert (result.usage.prompt_tokens, result.usage.completion_tokens, result.usage.total_tokens) == (4, 6, 10)
    assert result.model == "m"


def test_tool_calls_of_one_turn_run_concurrently():
    barrier = threading.Barrier(2, timeout=5)

    def waits(label):
        def execute(args, ctx):
            barrier.wait()  # only returns once both tools are running at the same time
            return label

        return execute

    kit = Toolkit([Tool("left", "l", None, waits("L")), Tool("right", "r", None, waits("R"))])
    script = Script(calls(call("c1", "left"), call("c2", "right")), text("done"))
    with make_client(script) as client:
        result = client.run("x", kit)
    assert [m["content"] for m in tool_messages(result)] == ["L", "R"]
    assert not any(r.is_error for r in result.tool_calls)


def test_tool_results_are_appended_in_call_order_not_finish_order():
    first_may_finish = threading.Event()

    def slow(args, ctx):
        assert first_may_finish.wait(5)
        return "slow"

    def fast(args, ctx):
        first_may_finish.set()
        return "fast"

    kit = Toolkit([Tool("slow", "s", None, slow), Tool("fast", "f", None, fast)])
    script = Script(calls(call("c1", "slow"), call("c2", "fast")), text("done"))
    with make_client(script) as client:
        result = client.run("x", kit)
    assert [(m["tool_call_id"], m["content"]) for m in tool_messages(result)] == [("c1", "slow"), ("c2", "fast")]
    assert [r.id for r in result.tool_calls] == ["c1", "c2"]


def test_unknown_tool_gives_an_error_result_naming_known_tools_and_the_run_continues():
    script = Script(calls(call("c1", "nosuch")), text("recovered"))
    with make_client(script) as client:
        result = client.run("x", Toolkit([echo_tool()]))
    assert result.status == "done"
    assert result.text == "recovered"
    message = tool_messages(result)[0]["content"]
    assert "nosuch" in message and "echo" in message
    assert result.tool_calls[0].is_error is True


@pytest.mark.parametrize("arguments", ["{not json", "[1, 2]", '"a string"', [1, 2]])
def test_invalid_arguments_give_an_error_and_the_tool_is_not_called(arguments):
    seen = []
    script = Script(calls(call("c1", "echo", arguments)), text("ok"))
    with make_client(script) as client:
        result = client.run("x", Toolkit([echo_tool(seen)]))
    assert seen == []
    assert "invalid arguments" in tool_messages(result)[0]["content"]
    assert result.tool_calls[0].is_error is True
    assert result.status == "done"


def test_json_string_arguments_are_decoded():
    seen = []
    script = Script(calls(call("c1", "echo", '{"text": "s"}')), text("ok"))
    with make_client(script) as client:
        client.run("x", Toolkit([echo_tool(seen)]))
    assert seen == [{"text": "s"}]


def test_raising_tool_gives_an_error_result_with_its_message():
    def bad(args, ctx):
        raise ValueError("disk on fire")

    script = Script(calls(call("c1", "bad")), text("ok"))
    with make_client(script) as client:
        result = client.run("x", Toolkit([Tool("bad", "b", None, bad)]))
    assert "disk on fire" in tool_messages(result)[0]["content"]
    assert result.tool_calls[0].is_error is True
    assert result.status == "done"


def test_generate_failure_raises_llm_error_and_is_not_retried():
    attempts = []

    def generate(request):
        attempts.append(1)
        raise RuntimeError("model crashed")

    with make_client(generate, retries=3) as client:
        with pytest.raises(LLMError) as info:
            client.run("x")
    assert len(attempts) == 1
    assert info.value.status is None
    assert "model crashed" in str(info.value)


# --- hooks -------------------------------------------------------------------------------------


def test_before_llm_can_replace_messages_and_tools():
    script = Script(text("ok"))
    replaced = [{"role": "user", "content": "rewritten"}]
    seen = {}

    def before_llm(messages, tools, model, turn):
        seen.update(messages=copy.deepcopy(messages), tools=tools, model=model, turn=turn)
        return {"messages": replaced, "tools": []}

    with make_client(script, hooks={"before_llm": before_llm}) as client:
        result = client.run("original", Toolkit([echo_tool()]))
    assert seen["messages"] == [{"role": "user", "content": "original"}]
    assert seen["model"] == "m" and seen["turn"] == 1
    assert seen["tools"][0]["function"]["name"] == "echo"
    assert script.requests[0]["messages"] == replaced
    assert script.requests[0]["tools"] == []
    assert result.messages == [*replaced, {"role": "assistant", "content": "ok"}]


def test_after_llm_observes_each_reply():
    seen = []
    script = Script(calls(call("c1", "echo", {"text": "a"})), text("ok"))

    class Hooks:
        def after_llm(self, response, model, turn):
            seen.append((copy.deepcopy(response), model, turn))

    with make_client(script, hooks=Hooks()) as client:
        client.run("x", Toolkit([echo_tool()]))
    assert [t for _, _, t in seen] == [1, 2]
    assert seen[0][0]["tool_calls"][0]["id"] == "c1"
    assert seen[1][0] == {"role": "assistant", "content": "ok"}
    assert all(m == "m" for _, m, _ in seen)


def test_before_tool_can_short_circuit_with_a_result():
    seen = []
    script = Script(calls(call("c1", "echo", {"text": "a"})), text("ok"))

    def before_tool(name, args, id, turn):
        assert (name, args, id, turn) == ("echo", {"text": "a"}, "c1", 1)
        return {"result": ToolResult("from hook")}

    with make_client(script, hooks={"before_tool": before_tool}) as client:
        result = client.run("x", Toolkit([echo_tool(seen)]))
    assert seen == []
    assert tool_messages(result)[0]["content"] == "from hook"


def test_before_tool_can_rewrite_args():
    seen = []
    script = Script(calls(call("c1", "echo", {"text": "a"})), text("ok"))

    class Hooks:
        def before_tool(self, name, args, id, turn):
            return {"args": {"text": "rewritten"}}

    with make_client(script, hooks=Hooks()) as client:
        result = client.run("x", Toolkit([echo_tool(seen)]))
    assert seen == [{"text": "rewritten"}]
    assert tool_messages(result)[0]["content"] == "echo:rewritten"


def test_after_tool_can_replace_the_result():
    script = Script(calls(call("c1", "echo", {"text": "a"})), text("ok"))
    seen = []

    def after_tool(name, args, result, id, turn):
        seen.append((name, args, result.output, id, turn))
        return {"result": ToolResult("replaced", is_error=True)}

    with make_client(script, hooks={"after_tool": after_tool}) as client:
        result = client.run("x", Toolkit([echo_tool()]))
    assert seen == [("echo", {"text": "a"}, "echo:a", "c1", 1)]
    assert tool_messages(result)[0]["content"] == "replaced"
    assert result.tool_calls[0].is_error is True


def test_hooks_returning_none_change_nothing():
    script = Script(calls(call("c1", "echo", {"text": "a"})), text("ok"))
    hooks = {name: (lambda **kw: None) for name in ("before_llm", "after_llm", "before_tool", "after_tool")}
    with make_client(script, hooks=hooks) as client:
        result = client.run("x", Toolkit([echo_tool()]))
    assert tool_messages(result)[0]["content"] == "echo:a"
    assert result.text == "ok"


# --- metrics -----------------------------------------------------------------------------------


def test_on_metric_receives_llm_tool_and_run_events():
    events = []
    u = {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
    script = Script(calls(call("c1", "echo", {"text": "a"}), usage=u), text("ok", usage=u))
    with make_client(script, on_metric=events.append) as client:
        client.run("x", Toolkit([echo_tool()]))
    assert [e["event"] for e in events] == ["llm", "tool", "llm", "run"]
    llm = events[0]
    assert set(llm) == {"event", "model", "status", "ms", "prompt_tokens", "completion_tokens"}
    assert (llm["model"], llm["status"], llm["prompt_tokens"], llm["completion_tokens"]) == ("m", "ok", 3, 4)
    tool_event = events[1]
    assert set(tool_event) == {"event", "tool", "source", "is_error", "ms"}
    assert (tool_event["tool"], tool_event["source"], tool_event["is_error"]) == ("echo", "native", False)
    run = events[3]
    assert set(run) == {"event", "model", "turns", "tool_calls", "total_tokens", "ms"}
    assert (run["model"], run["turns"], run["tool_calls"], run["total_tokens"]) == ("m", 2, 1, 14)
    assert all(isinstance(e["ms"], (int, float)) and e["ms"] >= 0 for e in events)


def test_on_metric_run_event_carries_error_when_the_run_fails():
    events = []

    def generate(request):
        raise RuntimeError("x")

    with make_client(generate, on_metric=events.append) as client:
        with pytest.raises(LLMError):
            client.run("x")
    assert events[0]["event"] == "llm" and events[0]["status"] == "error"
    assert events[-1]["event"] == "run" and "error" in events[-1]


def test_a_suspension_tool_event_is_not_an_error_and_is_pending():
    events = []
    request = make_request("approval", "may I?")
    script = Script(calls(call("c1", "ask")))
    with make_client(script, on_metric=events.append) as client:
        result = client.run("x", Toolkit([Tool("ask", "a", None, lambda a, c: suspend(request))]))
    assert result.status == "pending"
    tool_event = next(e for e in events if e["event"] == "tool")
    assert tool_event["is_error"] is False
    assert tool_event["pending"] is True
    assert 'is_error="true"' not in client.metrics()


def test_a_raising_on_metric_does_not_break_the_run():
    def on_metric(event):
        raise RuntimeError("metrics backend down")

    with make_client(Script(text("ok")), on_metric=on_metric) as client:
        assert client.run("x").text == "ok"


def test_metrics_renders_prometheus_text():
    u = {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
    script = Script(calls(call("c1", "echo", {"text": "a"}), call("c2", "nosuch"), usage=u), text("ok", usage=u))
    with make_client(script) as client:
        client.run("x", Toolkit([echo_tool()]))
        out = client.metrics()
    assert out.endswith("\n") and not out.endswith("\n\n")
    families = [
        ("toolnexus_llm_requests_total", "counter"),
        ("toolnexus_llm_tokens_total", "counter"),
        ("toolnexus_llm_request_duration_seconds", "histogram"),
        ("toolnexus_tool_calls_total", "counter"),
        ("toolnexus_tool_duration_seconds", "histogram"),
        ("toolnexus_run_errors_total", "counter"),
        ("toolnexus_cost_usd_total", "counter"),
    ]
    type_lines = [line for line in out.splitlines() if line.startswith("# TYPE")]
    assert type_lines == [f"# TYPE {name} {kind}" for name, kind in families]
    help_names = [line.split()[2] for line in out.splitlines() if line.startswith("# HELP")]
    assert help_names == [name for name, _ in families]
    lines = out.splitlines()
    assert 'toolnexus_llm_requests_total{model="m",status="ok"} 2' in lines
    assert 'toolnexus_llm_tokens_total{type="completion"} 8' in lines
    assert 'toolnexus_llm_tokens_total{type="prompt"} 6' in lines
    assert 'toolnexus_tool_calls_total{tool="echo",source="native",is_error="false"} 1' in lines
    assert 'toolnexus_tool_calls_total{tool="nosuch",source="unknown",is_error="true"} 1' in lines
    buckets = [line.split('le="')[1].split('"')[0] for line in lines if line.startswith('toolnexus_llm_request_duration_seconds_bucket{model="m"')]
    assert buckets == ["0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "30", "60", "+Inf"]
    assert 'toolnexus_llm_request_duration_seconds_count{model="m"} 2' in lines
    assert 'toolnexus_llm_request_duration_seconds_bucket{model="m",le="+Inf"} 2' in lines
    tool_series = [line for line in lines if line.startswith("toolnexus_tool_calls_total{")]
    assert tool_series == sorted(tool_series)


def test_metrics_counts_run_errors():
    def generate(request):
        raise RuntimeError("x")

    with make_client(generate) as client:
        with pytest.raises(LLMError):
            client.run("x")
        lines = client.metrics().splitlines()
    assert 'toolnexus_run_errors_total{model="m"} 1' in lines
    assert 'toolnexus_llm_requests_total{model="m",status="error"} 1' in lines


# --- threads and event loops ---------------------------------------------------------------------


def doubling_model(request):
    """Stateless: ask for double(n) once, then answer with the tool's result."""
    messages = request["messages"]
    if messages[-1]["role"] == "tool":
        return {"content": f"answer={messages[-1]['content']}"}
    n = int(messages[-1]["content"])
    return {"tool_calls": [{"name": "double", "arguments": {"n": n}}]}


def double_tool():
    return Tool("double", "Double n.", {"type": "object", "properties": {"n": {"type": "integer"}}}, lambda a, c: str(a["n"] * 2))


def test_one_client_shared_by_16_threads_gives_independent_results():
    kit = Toolkit([double_tool()])
    start = threading.Barrier(16, timeout=5)
    results = {}
    errors = []

    with make_client(doubling_model) as client:

        def worker(n):
            try:
                start.wait()
                results[n] = client.run(str(n), kit)
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=10)
        assert not any(t.is_alive() for t in threads)
    assert errors == []
    for n in range(16):
        result = results[n]
        assert result.text == f"answer={n * 2}"
        assert result.messages[0] == {"role": "user", "content": str(n)}
        assert len(result.messages) == 4
        assert result.tool_calls[0].args == {"n": n}


def test_client_run_works_from_a_plain_thread():
    box = {}

    def worker():
        with make_client(doubling_model) as client:
            box["result"] = client.run("4", Toolkit([double_tool()]))

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert box["result"].text == "answer=8"


def test_client_run_works_from_inside_a_tool():
    inner = make_client(doubling_model)

    def nested(args, ctx):
        return inner.run(str(args["n"]), Toolkit([double_tool()])).text

    outer_kit = Toolkit([Tool("nested", "n", {"type": "object", "properties": {"n": {"type": "integer"}}}, nested)])
    script = Script(calls(call("c1", "nested", {"n": 5}), call("c2", "nested", {"n": 6})), text("outer done"))
    with inner, make_client(script) as outer:
        result = outer.run("x", outer_kit)
    assert [m["content"] for m in tool_messages(result)] == ["answer=10", "answer=12"]
    assert result.text == "outer done"


def test_client_run_works_inside_a_running_asyncio_loop():
    async def main():
        assert asyncio.get_running_loop() is not None
        with make_client(doubling_model) as client:
            return client.run("21", Toolkit([double_tool()]))

    result = asyncio.run(main())
    assert result.text == "answer=42"


def test_tools_see_a_context_with_the_call_id():
    seen = []

    def execute(args, ctx):
        seen.append((ctx.call_id, ctx.answer, ctx.cancelled.is_set()))
        return "ok"

    script = Script(calls(call("c9", "t")), text("done"))
    with make_client(script) as client:
        client.run("x", Toolkit([Tool("t", "t", None, execute)]))
    assert seen == [("c9", None, False)]


def test_assistant_tool_call_ids_are_generated_when_missing_and_match_results():
    script = Script({"tool_calls": [{"name": "echo", "arguments": json.dumps({"text": "a"})}]}, text("ok"))
    with make_client(script) as client:
        result = client.run("x", Toolkit([echo_tool()]))
    assistant = result.messages[1]
    cid = assistant["tool_calls"][0]["id"]
    assert cid
    assert result.messages[2] == {"role": "tool", "tool_call_id": cid, "content": "echo:a"}
