"""Money budgets (CONTRACT §19): prices, what each call and handle cost, and caps in US dollars."""

from __future__ import annotations

import json
import math
import re
import threading
import time
from pathlib import Path

import pytest

from _durable_team import files, state  # noqa: F401 - fixtures
from conftest import HANG_TIMEOUT, run_in_thread
from toolnexus import AgentDef, Budget, Client, ConfigError, Runtime, SpawnError, Tool, Toolkit, agent
from toolnexus._model.cancel import CancelScope
from toolnexus.cli.commands import TeamFileError, load_team, main, tree_lines
from toolnexus.data import HandleView, Usage
from toolnexus.errors import Cancelled
from toolnexus._run.spending import Cap, Spending
from toolnexus._model.styles import anthropic
from toolnexus._model.styles import openai
from toolnexus.testing import ScriptedLLMServer, ScriptedModel, text_completion, tool_call_completion, tool_messages

#: Every scripted call: 1,000 tokens in, 200 out.
USAGE = {"prompt_tokens": 1000, "completion_tokens": 200, "total_tokens": 1200}
PRICES = {
    "m-lead": {"input": 3.0, "output": 15.0},  # 0.006 a call
    "m-mid": {"input": 2.0, "output": 10.0},  # 0.004 a call
    "m-leaf": {"input": 1.0, "output": 4.0, "cached_input": 0.5},  # 0.0018 a call
}
LEAD, MID, LEAF = 0.006, 0.004, 0.0018


def lookup_tool() -> Tool:
    return Tool("lookup", "look something up", {"type": "object", "properties": {"q": {"type": "string"}}}, lambda args, ctx: f"data({args.get('q')})")


def delegate(agent_name: str, prompt: str):
    """A model step: delegate once, then answer with the child's text."""

    def step(request):
        found = tool_messages(request)
        if found:
            return {"content": f"got {found[-1]}"}
        return {"tool_calls": [{"id": f"call_{agent_name}", "name": "task", "arguments": {"agent": agent_name, "prompt": prompt}}]}

    return step


def looping(request):
    """A model that never finishes: one lookup per step."""
    return {"tool_calls": [{"name": "lookup", "arguments": {"q": str(len(tool_messages(request)))}}]}


def three_levels() -> dict[str, AgentDef]:
    return {
        "lead": AgentDef("lead", "leads", model="m-lead", team=("mid",)),
        "mid": AgentDef("mid", "relays", model="m-mid", team=("leaf",)),
        "leaf": AgentDef("leaf", "answers", model="m-leaf"),
    }


def three_level_model() -> ScriptedModel:
    return ScriptedModel({"m-lead": delegate("mid", "relay"), "m-mid": delegate("leaf", "answer"), "m-leaf": {"content": "leaf text"}}, usage=USAGE)


# --- usage: the cached tokens each wire style reports ----------------------------------------------


def test_openai_cached_tokens_come_from_prompt_tokens_details():
    usage = openai.usage_of({"prompt_tokens": 1000, "completion_tokens": 50, "total_tokens": 1050, "prompt_tokens_details": {"cached_tokens": 800}})
    assert usage == Usage(prompt_tokens=1000, completion_tokens=50, total_tokens=1050, cached_tokens=800)


def test_anthropic_cache_reads_are_cached_tokens_and_cache_writes_plain_input():
    usage = anthropic.usage_of({"input_tokens": 100, "cache_read_input_tokens": 700, "cache_creation_input_tokens": 200, "output_tokens": 50})
    assert usage == Usage(prompt_tokens=1000, completion_tokens=50, total_tokens=1050, cached_tokens=700)


@pytest.mark.parametrize("cached", [-5, 1.5, "many", True])
def test_a_cached_count_that_is_not_a_count_is_zero(cached):
    usage = openai.usage_of({"prompt_tokens": 10, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": cached}})
    assert usage.cached_tokens == 0


def test_cached_tokens_never_exceed_the_prompt_tokens():
    assert openai.usage_of({"prompt_tokens": 10, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 50}}).cached_tokens == 10


# --- a bare Client -------------------------------------------------------------------------------


def test_a_client_run_costs_its_usage_at_the_models_price():
    script = ScriptedModel({"m-leaf": [{"tool_calls": [{"name": "lookup", "arguments": {}}]}, {"content": "done"}]}, usage=USAGE)
    with Client(model="m-leaf", generate=script, prices=PRICES) as client:
        result = client.run("go", Toolkit([lookup_tool()]))
    assert result.usage.cost == pytest.approx(2 * LEAF)
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (2000, 400)


def test_a_model_without_a_price_has_no_cost():
    with Client(model="m-unpriced", generate=ScriptedModel({"m-unpriced": {"content": "ok"}}, usage=USAGE), prices=PRICES) as client:
        result = client.run("go")
        text = client.metrics()
    assert result.usage.cost is None
    assert "toolnexus_cost_usd_total{" not in text


def test_openai_cached_input_is_priced_at_cached_input(scripted):
    usage = {"prompt_tokens": 1000, "completion_tokens": 100, "total_tokens": 1100, "prompt_tokens_details": {"cached_tokens": 600}}
    reply = {"choices": [{"message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}], "usage": usage}
    scripted.add(json=reply)
    prices = {"gpt-x": {"input": 2.0, "output": 8.0, "cached_input": 0.5}}
    with Client(base_url="https://api.example.test/v1", model="gpt-x", api_key="k", prices=prices) as client:
        result = client.run("hi")
    assert result.usage.cost == pytest.approx((400 * 2.0 + 600 * 0.5 + 100 * 8.0) / 1e6)


def test_anthropic_cache_reads_are_priced_at_cached_input_and_cache_writes_at_input(scripted):
    usage = {"input_tokens": 100, "cache_read_input_tokens": 700, "cache_creation_input_tokens": 200, "output_tokens": 50}
    reply = {"content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn", "usage": usage}
    scripted.add(json=reply)
    prices = {"claude-x": {"input": 3.0, "output": 15.0, "cached_input": 0.3}}
    with Client(base_url="https://api.example.test", model="claude-x", style="anthropic", api_key="k", prices=prices) as client:
        result = client.run("hi")
    assert result.usage.cost == pytest.approx(((100 + 200) * 3.0 + 700 * 0.3 + 50 * 15.0) / 1e6)


def test_cached_input_is_priced_at_input_when_the_price_has_no_cached_input():
    usage = {**USAGE, "prompt_tokens_details": {"cached_tokens": 900}}
    with Client(model="m-lead", generate=ScriptedModel({"m-lead": {"content": "ok", "usage": usage}}), prices=PRICES) as client:
        assert client.run("go").usage.cost == pytest.approx(LEAD)


@pytest.mark.parametrize(
    ("prices", "named"),
    [
        ({"m": {"input": -1, "output": 1}}, "prices['m'].input"),
        ({"m": {"input": 1}}, "needs output"),
        ({"m": {"input": 1, "output": math.inf}}, "prices['m'].output"),
        ({"m": {"input": 1, "output": "2"}}, "prices['m'].output"),
        ({"m": {"input": True, "output": 2}}, "prices['m'].input"),
        ({"m": {"input": 1, "output": 2, "cache": 1}}, "unknown key(s) cache"),
        ({"m": 3}, "prices['m'] must be a table"),
        (["m"], "prices must map"),
    ],
)
def test_a_bad_price_is_a_config_error_naming_the_model_and_key(prices, named):
    with pytest.raises(ConfigError, match=re.escape(named)):
        Client(model="m", generate=lambda request: {"content": "ok"}, prices=prices)


def test_the_client_metrics_count_the_cost_with_an_empty_agent_label():
    with Client(model="m-leaf", generate=ScriptedModel({"m-leaf": {"content": "ok"}}, usage=USAGE), prices=PRICES) as client:
        client.run("one")
        client.run("two")
        lines = client.metrics().splitlines()
    assert lines[-3:-1] == ["# HELP toolnexus_cost_usd_total US dollars spent on model calls, by agent and model.", "# TYPE toolnexus_cost_usd_total counter"]
    name, value = lines[-1].split(" ")
    assert name == 'toolnexus_cost_usd_total{agent="",model="m-leaf"}'
    assert float(value) == pytest.approx(2 * LEAF)


def test_a_priced_llm_metric_event_carries_its_cost():
    events: list[dict] = []
    with Client(model="m-leaf", generate=ScriptedModel({"m-leaf": {"content": "ok"}}, usage=USAGE), prices=PRICES, on_metric=events.append) as client:
        client.run("go")
    llm, run = events
    assert llm["cost"] == pytest.approx(LEAF) and run["cost"] == pytest.approx(LEAF)


# --- the ledger: every handle's cost rolls up ---------------------------------------------------------


def test_a_three_level_teams_per_handle_costs_sum_to_the_roots():
    with Runtime(three_levels(), generate=three_level_model(), prices=PRICES) as rt:
        result = rt.run_agent("lead", "go")
        views = {view.id: view for view in rt.handles()}
    assert result.status == "done"
    lead, mid, leaf = "root/lead.1", "root/lead.1/mid.1", "root/lead.1/mid.1/leaf.1"
    assert views[leaf].cost == pytest.approx(LEAF)
    assert views[mid].cost == pytest.approx(2 * MID + LEAF)
    assert views[lead].cost == pytest.approx(2 * LEAD + 2 * MID + LEAF)
    own = {hid: view.cost - sum(views[child].cost for child in view.children) for hid, view in views.items() if hid != "root"}
    assert own == pytest.approx({lead: 2 * LEAD, mid: 2 * MID, leaf: LEAF})
    assert sum(own.values()) == pytest.approx(views["root"].cost)
    assert result.cost == pytest.approx(views[lead].cost)


def test_agent_result_cost_is_what_that_turn_spent():
    registry = {"solo": AgentDef("solo", "answers", model="m-leaf")}
    with Runtime(registry, generate=ScriptedModel({"m-leaf": {"content": "ok"}}, usage=USAGE), prices=PRICES) as rt:
        handle = rt.spawn(rt.root, "solo")
        results = []
        for _ in range(2):
            rt.wake(handle, "go")
            results.append(run_in_thread(lambda: rt.wait(handle)))
        assert [r.cost for r in results] == pytest.approx([LEAF, LEAF])
        assert rt.inspect(handle).cost == pytest.approx(2 * LEAF)


def test_a_team_without_prices_has_no_cost():
    with Runtime(three_levels(), generate=three_level_model()) as rt:
        result = rt.run_agent("lead", "go")
        assert result.cost is None
        assert {view.cost for view in rt.handles()} == {None}


def test_agent_run_takes_prices():
    leaf = agent("leaf", does="answers", model="m-leaf")
    result = leaf.run("go", generate=ScriptedModel({"m-leaf": {"content": "ok"}}, usage=USAGE), prices=PRICES)
    assert result.cost == pytest.approx(LEAF)


def test_the_runtime_metrics_label_the_cost_by_agent_and_model():
    with Runtime(three_levels(), generate=three_level_model(), prices=PRICES) as rt:
        rt.run_agent("lead", "go")
        lines = rt.metrics().splitlines()
    series = {line.split(" ")[0]: float(line.split(" ")[1]) for line in lines if line.startswith("toolnexus_cost_usd_total{")}
    assert series == pytest.approx(
        {
            'toolnexus_cost_usd_total{agent="lead",model="m-lead"}': 2 * LEAD,
            'toolnexus_cost_usd_total{agent="leaf",model="m-leaf"}': LEAF,
            'toolnexus_cost_usd_total{agent="mid",model="m-mid"}': 2 * MID,
        }
    )
    assert list(series) == sorted(series)


# --- Budget(max_cost=...) -----------------------------------------------------------------------------


@pytest.mark.parametrize("value", [-0.01, math.nan, math.inf, "1", True])
def test_a_max_cost_that_is_not_a_finite_amount_is_a_config_error(value):
    with pytest.raises(ConfigError, match="max_cost"):
        Budget(max_cost=value)


def test_a_max_cost_of_zero_allows_no_model_call():
    registry = {"leaf": AgentDef("leaf", "answers", model="m-leaf", budget=Budget(max_cost=0))}
    with Runtime(registry, generate=ScriptedModel({"m-leaf": {"content": "ok"}}, usage=USAGE), prices=PRICES) as rt:
        result = rt.run_agent("leaf", "go")
    assert (result.status, result.limit, result.turns) == ("incomplete", "maxCost", 0)


def test_a_childs_max_cost_is_carved_from_its_parents_remaining():
    registry = {"solo": AgentDef("solo", "answers", model="m-leaf"), "lead": AgentDef("lead", "leads", model="m-lead", team=("solo",))}
    with Runtime(registry, generate=ScriptedModel({"m-leaf": {"content": "ok"}}, usage=USAGE), prices=PRICES) as rt:
        lead = rt.spawn(rt.root, "lead", Budget(max_cost=0.01))
        first = rt.spawn(lead, "solo")
        rt.wake(first, "go")
        run_in_thread(lambda: rt.wait(first))
        assert rt.budget(first).max_cost == pytest.approx(0.01)
        assert rt.budget(rt.spawn(lead, "solo", Budget(max_cost=0.5))).max_cost == pytest.approx(0.01 - LEAF)
        assert rt.budget(rt.spawn(lead, "solo", Budget(max_cost=0.001))).max_cost == pytest.approx(0.001)


def test_a_run_that_reaches_its_cost_cap_ends_incomplete_overshooting_by_at_most_one_call():
    registry = {"looper": AgentDef("looper", "never finishes", model="m-leaf", tools=[lookup_tool()], budget=Budget(max_cost=0.005, max_turns=100))}
    with Runtime(registry, generate=ScriptedModel({"m-leaf": looping}, usage=USAGE), prices=PRICES) as rt:
        result = rt.run_agent("looper", "go")
    assert (result.status, result.limit) == ("incomplete", "maxCost")
    assert "budget exhausted" in result.text
    assert result.turns == 3  # 0.0018, 0.0036: under the cap; 0.0054: over it by less than one call
    assert result.cost == pytest.approx(3 * LEAF)
    assert 0.005 <= result.cost < 0.005 + LEAF


def test_a_cost_cap_stops_a_fan_out_of_eight_children_passing_it_by_at_most_one_call():
    cap = LEAD + 20 * LEAF  # the lead's first call, then about twenty of its children's

    def lead_step(request):
        if tool_messages(request):
            return {"content": "all back"}
        return {"tool_calls": [{"id": f"call_{n}", "name": "task", "arguments": {"agent": "looper", "prompt": f"part {n}"}} for n in range(8)]}

    def slow_looping(request):
        time.sleep(0.02)  # a model's latency, so that the children's calls overlap
        return looping(request)

    registry = {
        "lead": AgentDef("lead", "fans out", model="m-lead", team=("looper",), budget=Budget(max_cost=cap)),
        "looper": AgentDef("looper", "never finishes", model="m-leaf", tools=[lookup_tool()], budget=Budget(max_turns=100)),
    }
    model = ScriptedModel({"m-lead": lead_step, "m-leaf": slow_looping}, usage=USAGE)
    with Runtime(registry, generate=model, prices=PRICES) as rt:
        result = run_in_thread(lambda: rt.run_agent("lead", "go"), timeout=30)
        views = rt.handles()[1:]
    lead, children = views[0], views[1:]
    assert (result.status, result.limit) == ("incomplete", "maxCost")
    assert len(children) == 8 and model.peak_concurrency > 1
    assert cap <= lead.cost <= cap + LEAF + 1e-12  # the cap, passed by at most one call in flight
    assert sum(child.cost or 0.0 for child in children) == pytest.approx(lead.cost - LEAD)
    # each child stopped on its parent's cap, with money of its own carve left (a child
    # whose first call was still waiting when the cap was reached made none)
    assert all((child.cost or 0.0) < cap - LEAD for child in children)
    assert model.calls["m-lead"] == 1  # the lead's second call is refused: its cap is spent


def test_a_spent_cost_cap_refuses_a_spawn():
    registry = {"leaf": AgentDef("leaf", "answers", model="m-leaf"), "lead": AgentDef("lead", "leads", model="m-lead", team=("leaf",))}
    with Runtime(registry, generate=ScriptedModel({"m-lead": {"content": "ok"}}, usage=USAGE), prices=PRICES) as rt:
        lead = rt.spawn(rt.root, "lead", Budget(max_cost=LEAD))
        rt.wake(lead, "go")
        run_in_thread(lambda: rt.wait(lead))
        with pytest.raises(SpawnError, match="budget exhausted: maxCost"):
            rt.spawn(lead, "leaf")


def test_a_capped_agent_whose_model_has_no_price_fails_when_the_runtime_is_built():
    registry = {"lead": AgentDef("lead", "leads", model="m-lead", team=("helper",), budget=Budget(max_cost=1)), "helper": AgentDef("helper", "helps")}
    with pytest.raises(ConfigError, match="agent 'helper'.*model 'm-default' has no price"):
        Runtime(registry, model="m-default", generate=lambda request: {"content": "ok"}, prices=PRICES)


def test_spawning_under_a_cost_cap_an_agent_whose_model_has_no_price_is_a_config_error():
    registry = {"free": AgentDef("free", "answers", model="m-unpriced")}
    with Runtime(registry, generate=lambda request: {"content": "ok"}, prices=PRICES) as rt:
        rt.spawn(rt.root, "free")  # no cap applies: no price needed
        with pytest.raises(ConfigError, match="model 'm-unpriced' has no price"):
            rt.spawn(rt.root, "free", Budget(max_cost=1))


# --- calls in flight against a cap -----------------------------------------------------------------


def take_flight(spending: Spending, cap: Cap, scope: CancelScope | None = None):
    """Enter a flight on a thread; ``entered`` is set once it is in, ``leave`` ends it."""
    entered, leave, outcome = threading.Event(), threading.Event(), {}

    def fly():
        try:
            with spending.flight(lambda: [cap], scope) as limit:
                outcome["limit"] = limit
                entered.set()
                leave.wait(HANG_TIMEOUT)
        except Cancelled as exc:
            outcome["cancelled"] = exc
            entered.set()

    thread = threading.Thread(target=fly, daemon=True)
    thread.start()
    return entered, leave, outcome, thread


def test_before_a_first_call_is_priced_calls_under_a_cap_go_one_at_a_time():
    spending = Spending()
    cap = Cap(handle_id="root/lead.1", cap=1.0, spent=0.0, largest=None)
    first, first_leaves, _, first_thread = take_flight(spending, cap)
    assert first.wait(HANG_TIMEOUT)
    second, second_leaves, outcome, second_thread = take_flight(spending, cap)
    assert not second.wait(0.2)  # waits for the first to land
    first_leaves.set()
    assert second.wait(HANG_TIMEOUT) and outcome == {"limit": None}
    second_leaves.set()
    for thread in (first_thread, second_thread):
        thread.join(HANG_TIMEOUT)
    assert spending.flying("root/lead.1") == 0


def test_calls_fly_together_while_those_in_flight_cannot_pass_the_cap():
    spending = Spending()
    cap = Cap(handle_id="root/lead.1", cap=1.0, spent=0.0, largest=0.25)
    flights = [take_flight(spending, cap) for _ in range(5)]
    # 0 + 4 x 0.25 <= 1.0: a fifth may start too, passing the cap by one call at most
    assert all(flight[0].wait(HANG_TIMEOUT) for flight in flights)
    assert spending.flying("root/lead.1") == 5
    sixth, sixth_leaves, _, _ = take_flight(spending, cap)
    assert not sixth.wait(0.2)
    for flight in flights:
        flight[1].set()
    assert sixth.wait(HANG_TIMEOUT)
    sixth_leaves.set()


def test_a_reached_cap_refuses_the_call_at_once():
    spending = Spending()
    with spending.flight(lambda: [Cap(handle_id="h", cap=1.0, spent=1.0, largest=0.5)], None) as limit:
        assert limit == "maxCost"
    assert spending.flying("h") == 0


def test_an_interrupt_ends_a_call_waiting_under_a_cap():
    spending = Spending()
    cap = Cap(handle_id="h", cap=1.0, spent=0.0, largest=None)
    first, first_leaves, _, _ = take_flight(spending, cap)
    assert first.wait(HANG_TIMEOUT)
    scope = CancelScope()
    waiting, _, outcome, thread = take_flight(spending, cap, scope)
    assert not waiting.wait(0.2)
    scope.cancel()
    thread.join(HANG_TIMEOUT)
    assert not thread.is_alive() and "cancelled" in outcome
    first_leaves.set()


# --- durable: the cost is in the ledger -------------------------------------------------------------


def test_the_cost_is_kept_in_the_durable_ledger(state, files):
    with Runtime(three_levels(), generate=three_level_model(), prices=PRICES, state=state, runtime_id=files.runtime_id) as rt:
        result = rt.run_agent("lead", "go")
        before = {view.id: view.cost for view in rt.handles()}
    assert result.cost == pytest.approx(2 * LEAD + 2 * MID + LEAF)
    with Runtime(three_levels(), generate=three_level_model(), prices=PRICES, state=state, runtime_id=files.runtime_id) as rt:
        assert {hid: rt.inspect(hid).cost for hid in before} == pytest.approx(before)
        assert rt.inspect("root").cost == pytest.approx(result.cost)


# --- team files and the command line --------------------------------------------------------------

TEAM = """\
entry = "coordinator"

[connection]
base_url = "{base_url}"
model = "file-model"

[prices."file-model"]
input = 1000
output = 2000

[prices.writer-model]
input = 3000
output = 3000
cached_input = 300

[agents.coordinator]
does = "Coordinates"
team = ["researcher", "writer"]

[agents.coordinator.budget]
max_cost = 0.5

[agents.researcher]
does = "Researches"

[agents.writer]
does = "Writes"
model = "writer-model"
"""

#: The scripted server's usage (10 in, 5 out) at the team file's prices.
FILE_CALL, WRITER_CALL = 0.02, 0.045


def team_responder(body):
    tools = [t["function"]["name"] for t in body.get("tools", [])]
    results = tool_messages(body)
    if "task" in tools and not results:
        return tool_call_completion(body, [("c1", "task", {"agent": "researcher", "prompt": "facts"}), ("c2", "task", {"agent": "writer", "prompt": "prose"})])
    return text_completion(body, "final: " + " | ".join(results) if results else "notes")


def test_a_team_file_prices_its_models_and_caps_an_agent_in_dollars(tmp_path: Path):
    path = tmp_path / "team.toml"
    path.write_text(TEAM.format(base_url="http://127.0.0.1:9"))
    team = load_team(str(path))
    assert team.prices == {"file-model": {"input": 1000, "output": 2000}, "writer-model": {"input": 3000, "output": 3000, "cached_input": 300}}
    assert team.registry["coordinator"].budget == Budget(max_cost=0.5)


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (("input = 1000\n", "input = -1\n"), "prices['file-model'].input must be a number >= 0"),
        (("output = 2000\n", ""), "needs output"),
        (("max_cost = 0.5", "max_cost = -0.5"), "max_cost must be a number of US dollars >= 0"),
        (("max_cost = 0.5", "max_cost = nan"), "max_cost must be a finite number"),
    ],
)
def test_a_team_file_with_a_bad_price_or_cost_cap_is_refused(tmp_path: Path, change, problem):
    path = tmp_path / "team.toml"
    path.write_text(TEAM.format(base_url="http://127.0.0.1:9").replace(*change, 1))
    with pytest.raises(TeamFileError, match=re.escape(problem)):
        load_team(str(path))


def test_the_command_line_shows_the_cost_in_the_tree_and_in_json(tmp_path: Path, capsys):
    path = tmp_path / "team.toml"
    with ScriptedLLMServer(team_responder) as server:
        path.write_text(TEAM.format(base_url=server.base_url))
        assert main(["run", str(path), "hello", "--json", "--no-tree"]) == 0
        result = json.loads(capsys.readouterr().out)
        assert main(["run", str(path), "hello"]) == 0  # with the final tree
        out = capsys.readouterr().out
    assert result["status"] == "done" and result["cost"] == pytest.approx(3 * FILE_CALL + WRITER_CALL)
    assert "total cost: $0.105000" in out
    final_tree = out.split("final tree:")[1].splitlines()
    coordinator = next(line for line in final_tree if line.strip().startswith("root/coordinator.1 "))
    assert coordinator.endswith("cost  $0.105000")


def test_the_tree_shows_cost_only_when_something_was_priced():
    views = [HandleView(id="root", name="root", state="idle", parent=None, children=[], turns=0, tokens=0, tool_calls=0, inbox=0)]
    assert "cost" not in tree_lines(views)[0]
    priced = [HandleView(id="root", name="root", state="idle", parent=None, children=[], turns=0, tokens=5, tool_calls=0, inbox=0, cost=0.0012)]
    assert tree_lines(priced)[0].endswith("cost  $0.001200")


def test_the_budgets_guide_s_first_example_runs_as_pasted(capsys):
    page = (Path(__file__).resolve().parent.parent / "docs" / "guides" / "budgets.md").read_text(encoding="utf-8")
    code = page.split("```python\n", 1)[1].split("```", 1)[0]
    exec(compile(code, "budgets.md", "exec"), {"__name__": "budgets_guide"})
    assert capsys.readouterr().out == "done $0.016560\n4500\n"
