"""Replies without usage (CONTRACT §13 "Real servers", §16, §19): a cap the user set keeps
holding when a server reports no usage, and every result says how its usage was obtained.

llama-cpp-python ignores ``stream_options.include_usage``: its streamed replies carry no
usage. Such a reply is counted by the library's estimate (``Usage.estimated_calls``), and
once a server is known to stream no usage, the calls a cap depends on are made plain, so
that their usage is the server's own count.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from _durable_team import files  # noqa: F401 - fixture
from conftest import run_in_thread
from toolnexus import AgentDef, Budget, Client, Event, Runtime, Tool
from toolnexus.testing import ScriptedLLMServer, text_completion, tool_call_completion, tool_messages

HANG = 10.0
#: Every plain scripted reply: 1,000 tokens in, 200 out.
USAGE = {"prompt_tokens": 1000, "completion_tokens": 200, "total_tokens": 1200}
PRICES = {"m-leaf": {"input": 1.0, "output": 4.0}}
CAPS = {
    "maxCost": Budget(max_cost=0.005, max_turns=100),  # 0.0018 a call: the plain run stops after 3
    "maxTokens": Budget(max_tokens=3000, max_turns=100),  # 1,200 a call: the plain run stops after 3
}


class Looping:
    """A model that never finishes (one lookup per step), keeping every request body."""

    def __init__(self, usage: dict[str, int] | None = USAGE) -> None:
        self.usage = usage
        self.bodies: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def __call__(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self.bodies.append(body)
        reply = tool_call_completion(body, [(f"c{len(tool_messages(body))}", "lookup", {"q": "x"})], usage=self.usage)
        if self.usage is None:
            del reply["usage"]
        return reply

    def streamed(self) -> list[bool]:
        with self._lock:
            return [body.get("stream") is True for body in self.bodies]


def looper(budget: Budget) -> dict[str, AgentDef]:
    lookup = Tool("lookup", "look something up", {"type": "object", "properties": {"q": {"type": "string"}}}, lambda args, ctx: "data")
    return {"looper": AgentDef("looper", "never finishes", model="m-leaf", tools=[lookup], budget=budget)}


@pytest.mark.parametrize("limit", sorted(CAPS))
def test_a_cap_stops_a_streamed_run_without_usage_within_one_call_of_the_plain_run(limit: str) -> None:
    model = Looping()
    with ScriptedLLMServer(model, stream_usage=False) as server:
        options = {"base_url": server.base_url, "model": "m-leaf", "prices": PRICES}
        with Runtime(looper(CAPS[limit]), **options) as rt:
            plain = rt.run_agent("looper", "go", timeout=HANG)
        model.bodies.clear()
        with Runtime(looper(CAPS[limit]), **options) as rt:
            with rt.stream_agent("looper", "go") as stream:
                events = run_in_thread(lambda: list(stream), HANG)
    watched = stream.result
    assert (plain.status, plain.limit, plain.turns) == ("incomplete", limit, 3)
    assert (watched.status, watched.limit) == ("incomplete", limit) and watched.turns - plain.turns in (0, 1)
    # How the usage was obtained: the first streamed reply had none and was estimated; the
    # server is then known to stream none, and the capped calls went plain, measured.
    assert plain.usage.estimated_calls == 0 and watched.usage.estimated_calls == 1
    assert model.streamed() == [True] + [False] * (watched.turns - 1)
    estimated = [e.data["usage"] for e in events if e.kind == "message"]
    assert estimated[0]["estimated"] is True and estimated[0]["total_tokens"] > 0
    assert all("estimated" not in usage and usage["total_tokens"] == 1200 for usage in estimated[1:])


def test_an_uncapped_stream_without_usage_keeps_streaming_and_counts_estimates() -> None:
    prices = {"m": {"input": 1.0, "output": 4.0}}
    words = "one two three four"
    with ScriptedLLMServer(lambda body: text_completion(body, words), stream_usage=False) as server:
        with Client(base_url=server.base_url, model="m", prices=prices) as client:

            def watch() -> list[Event]:
                with client.stream("count to four") as stream:
                    events = list(stream)
                with client.stream("count to four") as again:
                    events += list(again)
                return events

            events = run_in_thread(watch, HANG)
    texts = [e.data["delta"] for e in events if e.kind == "text"]
    assert "".join(texts) == words * 2 and len(texts) == 8  # streamed word by word, both times
    usage = events[-1].data if events[-1].kind == "result" else {}
    assert usage.get("status") == "done"
    [first, second] = [e.data["usage"] for e in events if e.kind == "message"]
    assert first == second and first["estimated"] is True and first["prompt_tokens"] > 0 and first["completion_tokens"] > 0


def test_a_client_stream_result_says_its_usage_is_an_estimate_and_prices_it() -> None:
    prices = {"m": {"input": 1.0, "output": 4.0}}
    with ScriptedLLMServer(lambda body: text_completion(body, "the answer"), stream_usage=False) as server:
        with Client(base_url=server.base_url, model="m", prices=prices) as client:
            plain = client.run("go")
            with client.stream("go") as stream:
                run_in_thread(lambda: list(stream), HANG)
    measured, guessed = plain.usage, stream.result.usage
    assert (measured.estimated_calls, measured.total_tokens) == (0, 15)
    assert guessed.estimated_calls == 1 and guessed.total_tokens > 0
    assert guessed.cost == pytest.approx((guessed.prompt_tokens * 1.0 + guessed.completion_tokens * 4.0) / 1e6) and guessed.cost > 0


@pytest.mark.parametrize("limit", sorted(CAPS))
def test_plain_replies_without_usage_are_estimated_and_a_cap_still_stops_the_run(limit: str) -> None:
    model = Looping(usage=None)
    with ScriptedLLMServer(model) as server, Runtime(looper(CAPS[limit]), base_url=server.base_url, model="m-leaf", prices=PRICES) as rt:
        result = rt.run_agent("looper", "go", timeout=HANG)
    assert (result.status, result.limit) == ("incomplete", limit)
    assert result.usage.estimated_calls == result.turns > 1 and result.cost is not None and result.cost > 0


def test_estimated_calls_are_kept_in_the_durable_ledger(tmp_path: Any, files: Any) -> None:
    model = Looping(usage=None)
    with ScriptedLLMServer(model) as server:
        options = {"base_url": server.base_url, "model": "m-leaf", "state": str(tmp_path / "state.db"), "runtime_id": files.runtime_id}
        with Runtime(looper(Budget(max_turns=2)), **options) as rt:
            result = rt.run_agent("looper", "go", timeout=HANG)
        with Runtime(looper(Budget(max_turns=2)), **options) as rt:
            kept = rt.wait(result.handle_id, timeout=HANG)
    assert result.usage.estimated_calls == kept.usage.estimated_calls == 2
