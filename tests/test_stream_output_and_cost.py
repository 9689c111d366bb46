"""Streams with typed output (CONTRACT §16, §17) and money budgets (§16, §19): a streamed
run ends with the same typed result as a plain one, and its model calls, read in the
provider's streaming mode, are priced, charged and capped exactly as plain calls are."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from _durable_team import files, state  # noqa: F401 - fixtures
from conftest import run_in_thread
from toolnexus import AgentDef, Budget, Client, Event, Runtime, Tool
from toolnexus.testing import ScriptedLLMServer, text_completion, tool_call_completion, tool_messages

HANG = 10.0
#: Every scripted reply: 1,000 tokens in, 200 out.
USAGE = {"prompt_tokens": 1000, "completion_tokens": 200, "total_tokens": 1200}
PRICES = {"m-leaf": {"input": 1.0, "output": 4.0, "cached_input": 0.5}}
LEAF = 0.0018  # one call at m-leaf's price


@attrs.frozen
class Verdict:
    ok: bool
    reason: str


def judging(body: dict[str, Any]) -> dict[str, Any]:
    """A model that answers through ``final_result``: first with a misfit, then a fit."""
    offered = [tool["function"]["name"] for tool in body.get("tools", [])]
    assert "final_result" in offered
    if not tool_messages(body):
        return tool_call_completion(body, [("f1", "final_result", {"ok": "yes", "reason": "fits"})], usage=USAGE)
    return tool_call_completion(body, [("f2", "final_result", {"ok": True, "reason": "fits"})], usage=USAGE)


def lookup_tool() -> Tool:
    return Tool("lookup", "look something up", {"type": "object", "properties": {"q": {"type": "string"}}}, lambda args, ctx: f"data({args.get('q')})")


def looping(body: dict[str, Any]) -> dict[str, Any]:
    """A model that never finishes: one lookup per step."""
    return tool_call_completion(body, [(f"c{len(tool_messages(body))}", "lookup", {"q": "x"})], usage=USAGE)


def answering(usage: dict[str, Any]) -> Any:
    return lambda body: text_completion(body, "the answer", usage=usage)


def streamed(body: dict[str, Any] | None) -> bool:
    return body is not None and body.get("stream") is True and body.get("stream_options", {}).get("include_usage") is True


# --- typed output ----------------------------------------------------------------------------------


def test_a_client_stream_with_output_ends_with_the_typed_result_run_gives() -> None:
    with ScriptedLLMServer(judging) as server, Client(base_url=server.base_url, model="m") as client:
        plain = client.run("judge it", output=Verdict)

        def watch() -> tuple[list[Event], Any]:
            with client.stream("judge it", output=Verdict) as stream:
                return list(stream), stream.result

        events, result = run_in_thread(watch, HANG)
        assert streamed(server.last_body)
    assert isinstance(result.output, Verdict) and result.output == plain.output == Verdict(ok=True, reason="fits")
    assert (result.status, result.text, result.turns) == (plain.status, plain.text, plain.turns) == ("done", plain.text, 2)
    assert [e.kind for e in events].count("message") == 2  # the misfit was corrected within the stream
    assert events[-1].kind == "result" and events[-1].data["status"] == "done"


def test_a_typed_agent_s_stream_ends_with_its_value() -> None:
    registry = {"judge": AgentDef("judge", "Judges", output=Verdict)}
    with ScriptedLLMServer(judging) as server, Runtime(registry, base_url=server.base_url, model="m") as rt:
        with rt.stream_agent("judge", "judge it") as stream:
            run_in_thread(lambda: list(stream), HANG)
        assert streamed(server.last_body)
    assert stream.result.status == "done" and stream.result.output == Verdict(ok=True, reason="fits")


# --- money -----------------------------------------------------------------------------------------


def test_a_streamed_reply_s_final_usage_chunk_is_priced_and_charged() -> None:
    usage = {**USAGE, "prompt_tokens_details": {"cached_tokens": 600}}
    registry = {"leaf": AgentDef("leaf", "answers", model="m-leaf")}
    with ScriptedLLMServer(answering(usage)) as server, Runtime(registry, base_url=server.base_url, model="m-leaf", prices=PRICES) as rt:
        with rt.stream_agent("leaf", "go") as stream:
            events = run_in_thread(lambda: list(stream), HANG)
        assert streamed(server.last_body)
        root_cost = rt.inspect(rt.root).cost
        metrics = rt.metrics()
    expected = (400 * 1.0 + 600 * 0.5 + 200 * 4.0) / 1e6
    assert stream.result.cost == pytest.approx(expected)
    assert root_cost == pytest.approx(expected)
    assert 'toolnexus_cost_usd_total{agent="leaf",model="m-leaf"}' in metrics
    [message] = [e for e in events if e.kind == "message"]
    assert message.data["usage"] == {"prompt_tokens": 1000, "completion_tokens": 200, "total_tokens": 1200}


def test_a_client_stream_costs_what_its_run_costs() -> None:
    with ScriptedLLMServer(answering(USAGE)) as server, Client(base_url=server.base_url, model="m-leaf", prices=PRICES) as client:
        plain = client.run("go")
        with client.stream("go") as stream:
            run_in_thread(lambda: list(stream), HANG)
        assert streamed(server.last_body)
    assert stream.result.usage.cost == pytest.approx(plain.usage.cost) == pytest.approx(LEAF)


def test_a_cost_cap_ends_a_streamed_run_incomplete_past_it_by_at_most_one_call() -> None:
    registry = {"looper": AgentDef("looper", "never finishes", model="m-leaf", tools=[lookup_tool()], budget=Budget(max_cost=0.005, max_turns=100))}
    with ScriptedLLMServer(looping) as server, Runtime(registry, base_url=server.base_url, model="m-leaf", prices=PRICES) as rt:
        with rt.stream_agent("looper", "go") as stream:
            events = run_in_thread(lambda: list(stream), HANG)
        assert streamed(server.last_body)
    result = stream.result
    assert (result.status, result.limit, result.turns) == ("incomplete", "maxCost", 3)
    assert result.cost == pytest.approx(3 * LEAF)
    assert events[-1].kind == "result" and events[-1].data["status"] == "incomplete"


def test_a_streamed_run_s_cost_is_in_the_durable_ledger(state: str, files: Any) -> None:
    registry = {"leaf": AgentDef("leaf", "answers", model="m-leaf")}
    with ScriptedLLMServer(answering(USAGE)) as server:
        options = {"base_url": server.base_url, "model": "m-leaf", "prices": PRICES, "state": state, "runtime_id": files.runtime_id}
        with Runtime(registry, **options) as rt:
            with rt.stream_agent("leaf", "go") as stream:
                run_in_thread(lambda: list(stream), HANG)
            assert streamed(server.last_body)
        with Runtime(registry, **options) as rt:
            assert rt.inspect(stream.result.handle_id).cost == pytest.approx(LEAF)
            assert rt.inspect(rt.root).cost == pytest.approx(LEAF)
    assert stream.result.cost == pytest.approx(LEAF)


def test_a_streamed_anthropic_reply_s_usage_is_priced_with_its_cache_reads() -> None:
    usage = {"input_tokens": 100, "cache_read_input_tokens": 700, "cache_creation_input_tokens": 200, "output_tokens": 50}
    reply = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x", "content": [{"type": "text", "text": "one two three"}], "stop_reason": "end_turn", "usage": usage}
    prices = {"claude-x": {"input": 3.0, "output": 15.0, "cached_input": 0.3}}
    with ScriptedLLMServer(lambda body: reply) as server, Client(base_url=server.base_url, model="claude-x", style="anthropic", api_key="k", prices=prices) as client:
        plain = client.run("hi")
        with client.stream("hi") as stream:
            events = run_in_thread(lambda: list(stream), HANG)
        assert server.last_body is not None and server.last_body.get("stream") is True
    assert [e.data["delta"] for e in events if e.kind == "text"] == ["one ", "two ", "three"]
    assert stream.result.text == plain.text == "one two three"
    assert stream.result.usage == plain.usage
    assert stream.result.usage.cost == pytest.approx(((100 + 200) * 3.0 + 700 * 0.3 + 50 * 15.0) / 1e6)


def test_a_streamed_anthropic_tool_use_gives_a_typed_value() -> None:
    def respond(body: dict[str, Any]) -> dict[str, Any]:
        usage = {"input_tokens": 10, "output_tokens": 5}
        block = {"type": "tool_use", "id": "tu_1", "name": "final_result", "input": {"ok": True, "reason": "fits"}}
        return {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x", "content": [block], "stop_reason": "tool_use", "usage": usage}

    with ScriptedLLMServer(respond) as server, Client(base_url=server.base_url, model="claude-x", style="anthropic", api_key="k") as client:
        with client.stream("judge it", output=Verdict) as stream:
            run_in_thread(lambda: list(stream), HANG)
        assert server.last_body is not None and server.last_body.get("stream") is True
    assert stream.result.status == "done" and stream.result.output == Verdict(ok=True, reason="fits")
