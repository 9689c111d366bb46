"""The in-order first step of a turn's tool calls (``Tool.prepare``), and what rests on it:
delegated children are numbered in the order the model asked for them."""

from __future__ import annotations

import threading

import pytest

from toolnexus import AgentDef, Client, Runtime, Tool, Toolkit
from toolnexus.testing import ScriptedModel, last_user_text, tool_messages


def calls(*names):
    return {"tool_calls": [{"id": f"c{i}", "name": name, "arguments": {"n": i}} for i, name in enumerate(names)]}


def test_prepare_steps_run_in_call_order_before_any_call_executes():
    seen = []
    lock = threading.Lock()

    def prepare(args, ctx):
        with lock:
            seen.append(("prepare", args["n"]))
        return args["n"] * 10

    def execute(args, ctx):
        with lock:
            seen.append(("execute", args["n"]))
        return f"prepared {ctx.prepared}"

    step = Tool("step", "A two-step tool.", None, execute, prepare=prepare)
    model = ScriptedModel({"m": [calls("step", "step", "step"), lambda r: {"content": " | ".join(tool_messages(r))}]})
    with Client(model="m", generate=model) as client:
        result = client.run("go", Toolkit([step]))
    assert result.text == "prepared 0 | prepared 10 | prepared 20"
    assert seen[:3] == [("prepare", 0), ("prepare", 1), ("prepare", 2)]
    assert sorted(seen[3:]) == [("execute", 0), ("execute", 1), ("execute", 2)]


def test_a_prepare_step_that_raises_leaves_execute_to_work_alone():
    def prepare(args, ctx):
        raise RuntimeError("no")

    step = Tool("step", "", None, lambda args, ctx: f"prepared {ctx.prepared}", prepare=prepare)
    model = ScriptedModel({"m": [calls("step"), lambda r: {"content": tool_messages(r)[0]}]})
    with Client(model="m", generate=model) as client:
        assert client.run("go", Toolkit([step])).text == "prepared None"


@pytest.mark.parametrize("attempt", range(5))
def test_parallel_task_children_are_numbered_in_call_order(attempt):
    registry = {
        "lead": AgentDef("lead", "Delegates.", model="lead", team=["worker"]),
        "worker": AgentDef("worker", "Works.", model="worker"),
    }
    prompts = ["first", "second", "third"]
    model = ScriptedModel(
        {
            "lead": [
                {"tool_calls": [{"id": f"c{i}", "name": "task", "arguments": {"agent": "worker", "prompt": p}} for i, p in enumerate(prompts)]},
                lambda r: {"content": ", ".join(tool_messages(r))},
            ],
            "worker": lambda r: {"content": last_user_text(r)},
        }
    )
    with Runtime(registry, generate=model) as rt:
        result = rt.run_agent("lead", "go")
        transcripts = {rt.conversation_store.get(f"root/lead.1/worker.{n}")[0]["content"]: n for n in (1, 2, 3)}
    assert result.text == "first, second, third"
    assert transcripts == {"first": 1, "second": 2, "third": 3}

