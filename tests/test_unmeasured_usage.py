"""Replies without usage (CONTRACT §13 "Real servers", §16, §19): such a reply counts 0
tokens and no cost, every result says how many of its calls went unmeasured, and a cap the
user set is kept all the same, or the call is refused naming the server.

llama-cpp-python ignores ``stream_options.include_usage``: its streamed replies carry no
usage. Once a server is known to stream none, the calls a cap depends on are made plain, so
that the server measures them; a plain reply without usage to such a call is an error.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from _durable_team import files  # noqa: F401 - fixture
from conftest import run_in_thread
from toolnexus import AgentDef, Budget, Client, Event, Runtime, Tool
from toolnexus.cli.commands import main, tree_lines
from toolnexus.data import HandleView
from toolnexus.testing import (
    ScriptedLLMServer,
    responder_by_model,
    text_completion,
    tool_call_completion,
    tool_messages,
)

HANG = 10.0
#: Every measured scripted reply: 1,000 tokens in, 200 out.
USAGE = {"prompt_tokens": 1000, "completion_tokens": 200, "total_tokens": 1200}
PRICES = {"m-leaf": {"input": 1.0, "output": 4.0}, "m-lead": {"input": 1.0, "output": 4.0}}
CAPS = {
    "maxCost": Budget(max_cost=0.005, max_turns=100),  # 0.0018 a call: the plain run stops after 3
    "maxTokens": Budget(max_tokens=3000, max_turns=100),  # 1,200 a call: the plain run stops after 3
}
UNMEASURED = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0, "unmeasured": True}


class Looping:
    """A model that never finishes (one lookup per step), keeping every request body;
    ``usage=None``: its replies carry no usage at all."""

    def __init__(self, usage: dict[str, int] | None = USAGE) -> None:
        self.usage = usage
        self.bodies: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self.bodies.append(body)
        call = (f"c{len(tool_messages(body))}", "lookup", {"q": "x"})
        return without_usage_unless(self.usage, tool_call_completion(body, [call]))

    def streamed(self) -> list[bool]:
        with self._lock:
            return [body.get("stream") is True for body in self.bodies]


def without_usage_unless(usage: dict[str, int] | None, reply: dict[str, Any]) -> dict[str, Any]:
    if usage is None:
        del reply["usage"]
    else:
        reply["usage"] = dict(usage)
    return reply


def looper(budget: Budget) -> dict[str, AgentDef]:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    lookup = Tool("lookup", "look something up", schema, lambda args, ctx: "data")
    return {"looper": AgentDef("looper", "never finishes", model="m-leaf", tools=[lookup], budget=budget)}


def watch(rt: Runtime, agent: str) -> tuple[Any, list[Event]]:
    with rt.stream_agent(agent, "go") as stream:
        events = run_in_thread(lambda: list(stream), HANG)
    return stream.result, events


@pytest.mark.parametrize("limit", sorted(CAPS))
def test_a_cap_stops_a_streamed_run_without_usage_within_one_call_of_the_plain_run(limit: str) -> None:
    model = Looping()
    with ScriptedLLMServer(model, stream_usage=False) as server:
        options = {"base_url": server.base_url, "model": "m-leaf", "prices": PRICES}
        with Runtime(looper(CAPS[limit]), **options) as rt:
            plain = rt.run_agent("looper", "go", timeout=HANG)
        model.bodies.clear()
        with Runtime(looper(CAPS[limit]), **options) as rt:
            watched, events = watch(rt, "looper")
    assert (plain.status, plain.limit, plain.turns) == ("incomplete", limit, 3)
    assert (watched.status, watched.limit, watched.turns) == ("incomplete", limit, plain.turns + 1)
    # How the usage was obtained: the first streamed reply had none and counted 0; the
    # server is then known to stream none, and the capped calls went plain, measured.
    assert (plain.usage.unmeasured_calls, watched.usage.unmeasured_calls) == (0, 1)
    assert model.streamed() == [True] + [False] * (watched.turns - 1)
    assert (watched.usage.total_tokens, watched.cost) == (plain.usage.total_tokens, pytest.approx(plain.cost))
    usages = [e.data["usage"] for e in events if e.kind == "message"]
    assert usages[0] == UNMEASURED and all(usage == USAGE for usage in usages[1:])


def test_an_uncapped_stream_without_usage_keeps_streaming_and_counts_zero_tokens_and_no_cost() -> None:
    prices = {"m": {"input": 1.0, "output": 4.0}}
    words = "one two three four"
    with ScriptedLLMServer(lambda body: text_completion(body, words), stream_usage=False) as server:
        with Client(base_url=server.base_url, model="m", prices=prices) as client:

            def both() -> tuple[list[Event], list[Any]]:
                events, results = [], []
                for _ in range(2):
                    with client.stream("count to four") as stream:
                        events += list(stream)
                    results.append(stream.result)
                return events, results

            events, results = run_in_thread(both, HANG)
    texts = [e.data["delta"] for e in events if e.kind == "text"]
    assert "".join(texts) == words * 2 and len(texts) == 8  # streamed word by word, both times
    assert [e.data["usage"] for e in events if e.kind == "message"] == [UNMEASURED, UNMEASURED]
    counted = [(r.status, r.usage.total_tokens, r.usage.unmeasured_calls, r.usage.cost) for r in results]
    assert counted == [("done", 0, 1, None)] * 2


def test_a_run_whose_calls_all_went_unmeasured_reports_no_cost_anywhere() -> None:
    model = Looping()
    metrics: list[dict[str, Any]] = []
    with ScriptedLLMServer(model, stream_usage=False) as server:
        options = {"base_url": server.base_url, "model": "m-leaf", "prices": PRICES, "on_metric": metrics.append}
        with Runtime(looper(Budget(max_turns=3)), **options) as rt:
            result, _ = watch(rt, "looper")
            view = rt.inspect(result.handle_id)
            exposition = rt.metrics()
    assert model.streamed() == [True, True, True]  # no cap: the run keeps streaming
    assert (result.status, result.limit) == ("incomplete", "maxTurns")
    assert (result.usage.total_tokens, result.usage.unmeasured_calls) == (0, 3)
    assert result.cost is None and result.usage.cost is None
    assert (view.tokens, view.cost, view.unmeasured_calls) == (0, None, 3)
    llm = [event for event in metrics if event["event"] == "llm"]
    assert len(llm) == 3 and all(event["unmeasured"] is True and "cost" not in event for event in llm)
    assert not [line for line in exposition.splitlines() if line.startswith("toolnexus_cost_usd_total{")]


@pytest.mark.parametrize("limit", sorted(CAPS))
def test_a_plain_reply_without_usage_under_a_cap_fails_naming_the_server(limit: str) -> None:
    model = Looping(usage=None)
    with ScriptedLLMServer(model) as server:
        with Runtime(looper(CAPS[limit]), base_url=server.base_url, model="m-leaf", prices=PRICES) as rt:
            result = rt.run_agent("looper", "go", timeout=HANG)
    assert result.status == "error"
    assert server.base_url in result.text and "reports no usage" in result.text and "cap" in result.text
    assert len(model.bodies) == 1  # refused, never retried


def test_a_watched_capped_run_on_a_server_that_never_reports_usage_fails_after_one_unmeasured_call() -> None:
    model = Looping(usage=None)
    with ScriptedLLMServer(model, stream_usage=False) as server:
        with Runtime(looper(CAPS["maxTokens"]), base_url=server.base_url, model="m-leaf") as rt:
            result, events = watch(rt, "looper")
    assert model.streamed() == [True, False]
    assert result.status == "error" and server.base_url in result.text and "reports no usage" in result.text
    assert [e.data["usage"] for e in events if e.kind == "message"] == [UNMEASURED]


def test_an_ancestors_cap_refuses_a_teammates_reply_without_usage() -> None:
    script = {
        "m-lead": [
            {"calls": [("t1", "task", {"agent": "leaf", "prompt": "facts"})], "usage": USAGE},
            lambda body: text_completion(body, tool_messages(body)[-1]),
        ],
        "m-leaf": [lambda body: without_usage_unless(None, text_completion(body, "facts"))],
    }
    team = {
        "lead": AgentDef("lead", "leads", model="m-lead", team=("leaf",), budget=Budget(max_tokens=100_000)),
        "leaf": AgentDef("leaf", "answers", model="m-leaf"),  # under the lead's cap, carved
    }
    with ScriptedLLMServer(responder_by_model(script)) as server:
        with Runtime(team, base_url=server.base_url, model="m-lead") as rt:
            result = rt.run_agent("lead", "go", timeout=HANG)
            [leaf] = [view for view in rt.handles() if view.name == "leaf"]
            child = rt.wait(leaf.id, timeout=HANG)
    assert child.status == "error" and server.base_url in child.text and "reports no usage" in child.text
    assert "reports no usage" in result.text  # the lead read its teammate's failure


def test_a_runtime_without_caps_counts_plain_replies_without_usage_as_zero() -> None:
    model = Looping(usage=None)
    with ScriptedLLMServer(model) as server:
        with Runtime(looper(Budget(max_turns=2)), base_url=server.base_url, model="m-leaf", prices=PRICES) as rt:
            result = rt.run_agent("looper", "go", timeout=HANG)
    assert (result.status, result.limit, result.turns) == ("incomplete", "maxTurns", 2)
    assert (result.usage.total_tokens, result.usage.unmeasured_calls, result.cost) == (0, 2, None)


def test_unmeasured_calls_are_kept_in_the_durable_ledger(tmp_path: Any, files: Any) -> None:
    model = Looping(usage=None)
    with ScriptedLLMServer(model) as server:
        state = {"state": str(tmp_path / "state.db"), "runtime_id": files.runtime_id}
        options = {"base_url": server.base_url, "model": "m-leaf", "prices": PRICES, **state}
        with Runtime(looper(Budget(max_turns=2)), **options) as rt:
            result = rt.run_agent("looper", "go", timeout=HANG)
        with Runtime(looper(Budget(max_turns=2)), **options) as rt:
            kept = rt.wait(result.handle_id, timeout=HANG)
            view = rt.inspect(result.handle_id)
    assert result.usage.unmeasured_calls == kept.usage.unmeasured_calls == view.unmeasured_calls == 2
    assert kept.cost is None and view.cost is None


SOLO_TEAM = """\
entry = "solo"

[connection]
base_url = "{base_url}"
model = "m-leaf"

[prices.m-leaf]
input = 1.0
output = 4.0

[agents.solo]
does = "Answers"
"""


def test_the_command_line_says_how_many_calls_went_unmeasured_and_prints_no_cost(tmp_path: Any, capsys: Any) -> None:
    path = tmp_path / "team.toml"
    with ScriptedLLMServer(lambda body: without_usage_unless(None, text_completion(body, "hi"))) as server:
        path.write_text(SOLO_TEAM.format(base_url=server.base_url))
        assert main(["run", str(path), "hello", "--no-tree"]) == 0
    out = capsys.readouterr().out
    assert "total tokens: 0" in out and "model calls without usage (counted 0): 1" in out
    assert "total cost" not in out


def test_the_tree_shows_no_cost_for_a_handle_never_priced_beside_one_that_was() -> None:
    shape = {"state": "idle", "children": [], "turns": 1, "tool_calls": 0, "inbox": 0}
    views = [
        HandleView(id="root/lead.1", name="lead", parent="root", tokens=1200, cost=0.0018, **shape),
        HandleView(id="root/lead.1/leaf.1", name="leaf", parent="root/lead.1", tokens=0, unmeasured_calls=1, **shape),
    ]
    lead, leaf = tree_lines(views)
    assert lead.split()[-2:] == ["cost", "$0.001800"] and leaf.split()[-2:] == ["cost", "-"]
