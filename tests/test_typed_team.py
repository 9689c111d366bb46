"""Typed output up the team (CONTRACT §17 "Up the team"): a typed teammate hands its lead
the JSON of its value, with the value itself in the ``task`` result's metadata; ``agent_tool``
and level-1 agents do the same; a stored result is rebuilt as ``T`` in another process."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from decimal import Decimal
from pathlib import Path

import pytest

import _typed_team as team
from _helpers import call, calls, text
from _services import service_url
from toolnexus import AgentDef, Budget, ConfigError, Runtime, Tool, Toolkit, agent, tool
from toolnexus.cli.teamfile import TeamFileError, load_team
from toolnexus.testing import ScriptedModel, tool_messages

HERE = Path(__file__).resolve().parent


def test_two_typed_teammates_feed_a_lead_that_returns_its_own_typed_value(cleanup):
    model = team.model()
    rt = cleanup.runtime(team.registry(), model="buyer", generate=model)
    result = rt.run_agent("buyer", "Buy 10 chairs")
    assert result.status == "done"
    assert result.output == team.Choice(supplier="Beta", price=Decimal("39.9"), reason="cheapest of 2")
    assert json.loads(result.text) == {"supplier": "Beta", "price": "39.9", "reason": "cheapest of 2"}
    lead_second_step = [r for r in model.requests if r["model"] == "buyer"][1]
    assert [json.loads(t) for t in tool_messages(lead_second_step)] == [
        {"supplier": "Alpha", "price": "41.50", "days": 3},
        {"supplier": "Beta", "price": "39.9", "days": 5},
    ]


def test_the_task_result_carries_the_teammates_value_in_its_metadata(cleanup):
    seen = []
    rt = cleanup.runtime(team.registry(), model="buyer", generate=team.model(), hooks={"after_tool": lambda **kw: seen.append(kw["result"])})
    rt.run_agent("buyer", "Buy 10 chairs")
    outputs = sorted((r.metadata["agent"], r.metadata["output"]) for r in seen)
    assert outputs == [("alpha", team.Quote("Alpha", Decimal("41.50"), 3)), ("beta", team.Quote("Beta", Decimal("39.9"), 5))]


def test_agent_tool_returns_the_json_with_the_value_in_metadata(cleanup):
    rt = cleanup.runtime(team.registry(), model="buyer", generate=team.model())
    result = Toolkit([rt.agent_tool("alpha")]).execute("alpha", {"prompt": "Quote 10 chairs"})
    assert json.loads(result.output) == {"supplier": "Alpha", "price": "41.50", "days": 3}
    assert result.metadata["output"] == team.Quote("Alpha", Decimal("41.50"), 3)


def test_a_level_one_agent_run_returns_the_value():
    quoter = agent("alpha", does="Quotes", model="alpha", output=team.Quote)
    result = quoter.run("Quote 10 chairs", generate=team.model())
    assert result.output == team.Quote("Alpha", Decimal("41.50"), 3)
    quoter.close()


def test_a_typed_agent_is_corrected_within_its_budget(cleanup):
    model = ScriptedModel({"m": [text("It costs about forty.")]})
    rt = cleanup.runtime({"q": AgentDef("q", "Quotes", output=team.Quote, budget=Budget(max_turns=2))}, model="m", generate=model)
    result = rt.run_agent("q", "Quote")
    assert (result.status, result.limit, result.output, result.turns) == ("incomplete", "maxTurns", None, 2)
    assert "final_result" in model.requests[1]["messages"][-1]["content"]


def test_final_result_does_not_count_against_max_tool_calls(cleanup):
    @tool
    def catalogue(item: str) -> str:
        """Look an item up."""
        return "41.50"

    # Counted, the two calls of the first step would spend the pool of 2 before the second.
    first = calls(call("c1", "catalogue", {"item": "chair"}), call("f1", "final_result", {"supplier": "A"}))
    second = calls(call("f2", "final_result", {"supplier": "A", "price": "41.50", "days": 1}))
    definition = AgentDef("q", "Quotes", tools=[catalogue], output=team.Quote, budget=Budget(max_tool_calls=2))
    rt = cleanup.runtime({"q": definition}, model="m", generate=ScriptedModel({"m": [first, second]}))
    result = rt.run_agent("q", "Quote")
    assert (result.status, result.turns, result.output.price) == ("done", 2, Decimal("41.50"))
    assert rt.inspect(result.handle_id).tool_calls == 1


def test_agent_tools_may_be_plain_functions():
    def catalogue(item: str) -> str:
        """Look an item up."""
        return "41.50"

    definition = AgentDef("q", "Quotes", tools=[catalogue])
    assert [t.name for t in definition.tools] == ["catalogue"] and isinstance(definition.tools[0], Tool)


def test_an_agent_output_without_a_schema_is_a_config_error():
    with pytest.raises(ConfigError, match="cannot be given a schema"):
        AgentDef("q", "Quotes", output=int)
    with pytest.raises(ConfigError, match="cannot be given a schema"):
        agent("q", does="Quotes", output=str)


def test_an_agent_with_output_and_its_own_final_result_tool_is_a_config_error():
    own = Tool("final_result", "Mine.", None, lambda args, ctx: "x")
    with pytest.raises(ConfigError, match="final_result"):
        AgentDef("q", "Quotes", tools=[own], output=team.Quote)


# --- durable: stored as JSON, rebuilt as T ------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgresql"])
def state(request, tmp_path):
    return str(tmp_path / "state.db") if request.param == "sqlite" else service_url("postgresql")


def refuse(request):
    raise AssertionError("no model call is needed to read a stored result")


def test_a_stored_result_read_in_another_process_is_rebuilt_as_the_definitions_type(state):
    runtime_id = f"typed-{uuid.uuid4().hex[:10]}"
    done = subprocess.run([sys.executable, str(HERE / "_typed_team.py"), "settle", state, runtime_id], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    settled = json.loads(done.stdout.strip().splitlines()[-1])
    assert settled["status"] == "done"
    with Runtime(team.registry(), model="buyer", generate=refuse, state=state, runtime_id=runtime_id) as rt:
        result = rt.wait(settled["handle"], timeout=5)
    assert result.output == team.Choice(supplier="Beta", price=Decimal("39.9"), reason="cheapest of 2")
    assert result.text == settled["text"]


# --- team files ----------------------------------------------------------------------------------


def write_team(tmp_path, output_line):
    (tmp_path / "shapes.py").write_text("import attrs\n\n@attrs.frozen\nclass Verdict:\n    label: str\n\nNOT_A_TYPE = 3\n")
    path = tmp_path / "team.toml"
    path.write_text(f'[agents.judge]\ndoes = "Judges"\n{output_line}\n')
    return str(path)


def test_a_team_file_names_an_agents_output_type(tmp_path):
    loaded = load_team(write_team(tmp_path, 'output = "shapes:Verdict"'))
    assert loaded.registry["judge"].output.__name__ == "Verdict"


@pytest.mark.parametrize(
    ("line", "words"),
    [('output = "shapes:Missing"', "cannot load output"), ('output = "shapes:NOT_A_TYPE"', "cannot be given a schema"), ("output = 3", "module:ClassName")],
)
def test_a_team_file_output_that_is_not_a_type_is_a_team_file_error(tmp_path, line, words):
    with pytest.raises(TeamFileError, match=words):
        load_team(write_team(tmp_path, line))
