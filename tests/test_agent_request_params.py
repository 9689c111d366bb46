"""An agent's own ``request_params`` (``AgentDef(request_params=...)``, a team file's
``[agents.NAME] request_params``): merged over the runtime's for that agent's calls only."""

from __future__ import annotations

from typing import Any

import pytest

from toolnexus import AgentDef, ConfigError, Runtime
from toolnexus.testing import ScriptedLLMServer, text_completion, tool_call_completion, tool_messages


def test_an_agents_request_params_go_with_its_own_calls_over_the_runtimes():
    bodies: list[dict[str, Any]] = []

    def responder(body: dict[str, Any]) -> dict[str, Any]:
        bodies.append(body)
        if body["model"] == "m-lead" and not tool_messages(body):
            return tool_call_completion(body, [("t1", "task", {"agent": "helper", "prompt": "help"})])
        return text_completion(body, "ok")

    registry = {
        "lead": AgentDef("lead", "leads", model="m-lead", team=["helper"], request_params={"tool_choice": {"type": "function", "function": {"name": "task"}}, "temperature": 0.8}, reset_tool_choice=True),
        "helper": AgentDef("helper", "helps", model="m-helper"),
    }
    with ScriptedLLMServer(responder) as server:
        with Runtime(registry, base_url=server.base_url, request_params={"temperature": 0.1, "max_tokens": 64}) as rt:
            assert rt.run_agent("lead", "go").status == "done"
    lead = [b for b in bodies if b["model"] == "m-lead"]
    helper = [b for b in bodies if b["model"] == "m-helper"]
    assert lead[0]["tool_choice"] == {"type": "function", "function": {"name": "task"}}
    assert lead[0]["temperature"] == 0.8 and lead[0]["max_tokens"] == 64
    assert lead[1]["tool_choice"] == "auto" and lead[1]["temperature"] == 0.8  # it delegated: free to answer
    assert helper[0]["temperature"] == 0.1 and "tool_choice" not in helper[0]


# --- request_params go into every body; reset_tool_choice lets a forced choice go ---------------


def test_without_reset_a_forced_tool_choice_is_sent_on_every_step_as_request_params_say():
    from toolnexus import Client, Tool

    calls = iter([[("c1", "word_count", {})], [("c2", "word_count", {})]])
    bodies: list[dict[str, Any]] = []

    def respond(body: dict[str, Any]) -> dict[str, Any]:
        bodies.append(body)
        made = next(calls, None)
        return tool_call_completion(body, made) if made else text_completion(body, "six words")

    named = {"type": "function", "function": {"name": "word_count"}}
    with ScriptedLLMServer(respond) as server, Client(base_url=server.base_url, model="m", request_params={"tool_choice": named}) as client:
        result = client.run("How many words?", [Tool("word_count", "count", None, lambda args, ctx: "6")])
    assert result.status == "done" and [body["tool_choice"] for body in bodies] == [named, named, named]


def forced_server(bodies: list[dict[str, Any]]) -> ScriptedLLMServer:
    """A server that honours a forced ``tool_choice`` as llama-cpp-python does (a grammar:
    the model must call the tool) and otherwise answers."""

    def respond(body: dict[str, Any]) -> dict[str, Any]:
        bodies.append(body)
        choice = body.get("tool_choice")
        forced = choice == "required" or isinstance(choice, dict) and choice.get("type") in ("function", "tool", "any")
        if forced:
            return tool_call_completion(body, [(f"c{len(bodies)}", "word_count", {"text": "to be or not to be"})])
        return text_completion(body, "six words")

    return ScriptedLLMServer(respond)


@pytest.mark.parametrize("choice", [{"type": "function", "function": {"name": "word_count"}}, "required"], ids=["named", "required"])
def test_a_forced_tool_choice_holds_until_a_tool_was_called_then_the_model_may_answer(choice):
    from toolnexus import Client, tool

    @tool
    def word_count(text: str) -> int:
        """Count the words in a text."""
        return len(text.split())

    bodies: list[dict[str, Any]] = []
    with forced_server(bodies) as server, Client(base_url=server.base_url, model="m", request_params={"tool_choice": choice}, reset_tool_choice=True) as client:
        result = client.run("How many words?", [word_count])
        again = client.run("And now?", [word_count])  # a new run is forced again
    assert (result.status, result.text, result.turns, result.tool_call_count) == ("done", "six words", 2, 1)
    assert [body["tool_choice"] for body in bodies] == [choice, "auto", choice, "auto"] and again.status == "done"


def test_none_and_auto_are_sent_as_they_are_on_every_step():
    from toolnexus import Client, Tool

    bodies: list[dict[str, Any]] = []
    with forced_server(bodies) as server, Client(base_url=server.base_url, model="m", request_params={"tool_choice": "none"}, reset_tool_choice=True) as client:
        client.run("go", [Tool("word_count", "count", None, lambda args, ctx: "6")])
    assert [body["tool_choice"] for body in bodies] == ["none"]


@pytest.mark.parametrize(
    ("choice", "after"),
    [
        ({"type": "tool", "name": "word_count"}, {"type": "auto"}),
        ({"type": "any", "disable_parallel_tool_use": True}, {"type": "auto", "disable_parallel_tool_use": True}),
        ({"type": "auto"}, {"type": "auto"}),
        ({"type": "none"}, {"type": "none"}),
    ],
)
def test_anthropic_forced_tool_choice_is_made_auto_keeping_its_other_keys(choice, after):
    from toolnexus._model.styles import anthropic

    body = anthropic.build_body("c", [], [{"name": "word_count"}], None, {"tool_choice": choice})
    assert anthropic.unforced(body)["tool_choice"] == after and body["tool_choice"] == choice


@pytest.mark.parametrize("params", [{"stream": True}, {"messages": []}, {"temperature": float("nan")}, ["not", "a", "dict"]])
def test_request_params_an_agent_may_not_set_are_refused_when_it_is_defined(params):
    with pytest.raises(ConfigError):
        AgentDef("a", "answers", request_params=params)


@pytest.mark.parametrize(
    ("choice", "second"),
    [
        ("required", "required"),  # final_result can satisfy it: a typed run keeps it
        ({"type": "function", "function": {"name": "final_result"}}, {"type": "function", "function": {"name": "final_result"}}),
        ({"type": "function", "function": {"name": "lookup"}}, "auto"),  # would never let the run end
    ],
    ids=["required", "named-final-result", "named-other"],
)
def test_a_typed_run_keeps_a_forced_tool_choice_that_lets_it_call_final_result(choice, second):
    from toolnexus import Client, Tool

    bodies: list[dict[str, Any]] = []

    def respond(body: dict[str, Any]) -> dict[str, Any]:
        bodies.append(body)
        if len(bodies) == 1:
            return tool_call_completion(body, [("c1", "lookup", {})])
        return tool_call_completion(body, [("f1", "final_result", {"verdict": "ok"})])

    schema = {"type": "object", "properties": {"verdict": {"type": "string"}}, "required": ["verdict"]}
    with ScriptedLLMServer(respond) as server, Client(base_url=server.base_url, model="m", request_params={"tool_choice": choice}, reset_tool_choice=True) as client:
        result = client.run("go", [Tool("lookup", "look", None, lambda args, ctx: "found")], output=schema)
    assert result.output == {"verdict": "ok"}
    assert [body["tool_choice"] for body in bodies] == [choice, second]


@pytest.mark.parametrize(
    ("choice", "keep", "after"),
    [
        ("required", None, "auto"),
        ("required", "final_result", "required"),
        ({"type": "function", "function": {"name": "final_result"}}, "final_result", {"type": "function", "function": {"name": "final_result"}}),
        ("none", None, "none"),
    ],
)
def test_openai_forced_tool_choice_is_made_auto_unless_it_allows_the_kept_tool(choice, keep, after):
    from toolnexus._model.styles import openai

    body = openai.build_body("m", [], [{"type": "function", "function": {"name": "final_result"}}], None, {"tool_choice": choice})
    assert openai.unforced(body, keep=keep)["tool_choice"] == after


def test_a_team_file_agent_takes_reset_tool_choice_and_refuses_a_non_boolean(tmp_path):
    from toolnexus.cli.teamfile import TeamFileError, load_team

    base = '[connection]\nbase_url = "http://127.0.0.1:9/v1"\nmodel = "m"\n\n[agents.counter]\ndoes = "counts"\n'
    good = tmp_path / "good.toml"
    good.write_text(base + "reset_tool_choice = true\n")
    assert load_team(str(good)).registry["counter"].reset_tool_choice is True
    bad = tmp_path / "bad.toml"
    bad.write_text(base + 'reset_tool_choice = "yes"\n')
    with pytest.raises(TeamFileError, match="reset_tool_choice must be true or false"):
        load_team(str(bad))
