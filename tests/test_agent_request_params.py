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
        "lead": AgentDef("lead", "leads", model="m-lead", team=["helper"], request_params={"tool_choice": {"type": "function", "function": {"name": "task"}}, "temperature": 0.8}),
        "helper": AgentDef("helper", "helps", model="m-helper"),
    }
    with ScriptedLLMServer(responder) as server:
        with Runtime(registry, base_url=server.base_url, request_params={"temperature": 0.1, "max_tokens": 64}) as rt:
            assert rt.run_agent("lead", "go").status == "done"
    lead = [b for b in bodies if b["model"] == "m-lead"]
    helper = [b for b in bodies if b["model"] == "m-helper"]
    assert lead[0]["tool_choice"] == {"type": "function", "function": {"name": "task"}}
    assert lead[0]["temperature"] == 0.8 and lead[0]["max_tokens"] == 64
    assert helper[0]["temperature"] == 0.1 and "tool_choice" not in helper[0]


@pytest.mark.parametrize("params", [{"stream": True}, {"messages": []}, {"temperature": float("nan")}, ["not", "a", "dict"]])
def test_request_params_an_agent_may_not_set_are_refused_when_it_is_defined(params):
    with pytest.raises(ConfigError):
        AgentDef("a", "answers", request_params=params)
