"""Definitions are checked when built: budgets, agent names and the ``task`` tool name."""

from __future__ import annotations

import attrs
import pytest

from _helpers import EMPTY_SCHEMA
from toolnexus import AgentDef, Budget, ConfigError, Runtime, SpawnError, Tool, agent
from toolnexus._team import budget as budgets

CAPS = [field.name for field in attrs.fields(Budget)]


@pytest.mark.parametrize("cap", CAPS)
def test_a_negative_budget_field_is_a_config_error(cap):
    with pytest.raises(ConfigError, match=cap):
        Budget(**{cap: -1})


def test_max_concurrent_zero_is_a_config_error_because_no_child_could_run():
    with pytest.raises(ConfigError, match="max_concurrent"):
        Budget(max_concurrent=0)


@pytest.mark.parametrize("value", [1.5, "3", True])
def test_a_budget_field_that_is_not_a_whole_number_is_a_config_error(value):
    with pytest.raises(ConfigError, match="max_turns"):
        Budget(max_turns=value)


def test_a_registry_dict_with_max_concurrent_zero_is_refused_when_the_runtime_is_built():
    registry = {"lead": {"does": "Leads.", "team": ["helper"], "budget": {"max_concurrent": 0}}, "helper": {"does": "Helps."}}
    with pytest.raises(ConfigError, match="max_concurrent"):
        Runtime(registry, generate=lambda request: {"content": "ok"})


def test_an_unknown_budget_key_in_a_registry_dict_is_a_config_error():
    with pytest.raises(ConfigError, match="max_tokenz"):
        Runtime({"a": {"does": "x", "budget": {"max_tokenz": 5}}}, generate=lambda request: {"content": "ok"})


def test_other_zero_caps_keep_meaning_none_allowed():
    registry = {"a": AgentDef("a", "x", budget=Budget(max_children=0)), "b": AgentDef("b", "x", budget=Budget(max_tokens=0))}
    with Runtime(registry, generate=lambda request: {"content": "ok"}) as rt:
        with pytest.raises(SpawnError, match="maxChildren"):
            rt.spawn(rt.spawn(rt.root, "a"), "a")
        with pytest.raises(SpawnError, match="budget exhausted"):
            rt.spawn(rt.spawn(rt.root, "b"), "a")


def test_a_carve_from_an_overspent_parent_leaves_an_empty_pool_not_a_negative_one():
    carved = budgets.carve(Budget(), Budget(max_tokens=10, max_tool_calls=1), parent_tokens=40, parent_tool_calls=3)
    assert (carved.max_tokens, carved.max_tool_calls) == (0, 0)


@pytest.mark.parametrize("name", ["boss/worker", "a.1", "with space", "", "tab\t", "ünï"])
def test_an_agent_name_outside_letters_digits_underscore_and_dash_is_a_config_error(name):
    with pytest.raises(ConfigError, match="agent name"):
        AgentDef(name, "x")
    with pytest.raises(ConfigError, match="agent name"):
        agent(name, does="x")


def test_a_registry_key_that_could_forge_handle_ids_is_a_config_error():
    with pytest.raises(ConfigError, match="agent name"):
        Runtime({"worker.1/evil": {"does": "x"}}, generate=lambda request: {"content": "ok"})


def test_agent_names_with_letters_digits_underscore_and_dash_are_accepted():
    assert AgentDef("Research_Team-2", "x").name == "Research_Team-2"


def _own_task_tool():
    return Tool("task", "My own task tracker.", EMPTY_SCHEMA, lambda args, ctx: "ok")


def test_a_team_agent_with_its_own_tool_named_task_is_a_config_error():
    with pytest.raises(ConfigError, match="task"):
        AgentDef("lead", "Leads.", team=("helper",), tools=[_own_task_tool()])
    with pytest.raises(ConfigError, match="task"):
        Runtime({"lead": {"does": "Leads.", "team": ["helper"], "tools": [_own_task_tool()]}, "helper": {"does": "Helps."}}, generate=lambda r: {"content": "ok"})


def test_an_agent_without_a_team_may_have_a_tool_named_task():
    assert AgentDef("solo", "Works alone.", tools=[_own_task_tool()]).tools[0].name == "task"


def test_an_agents_registry_follows_a_replaced_definition_of_it_or_of_a_team_member():
    researcher = agent("researcher", does="looks things up")
    boss = agent("boss", does="delegates", team=[researcher])
    assert boss.registry["boss"].team == ("researcher",)
    researcher.definition = attrs.evolve(researcher.definition, name="scout")
    assert boss.registry["boss"].team == ("scout",)
    assert "scout" in boss.registry and "researcher" not in boss.registry
    boss.definition = attrs.evolve(boss.definition, soul="be brief")
    assert boss.registry["boss"].soul == "be brief"
