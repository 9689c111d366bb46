"""The ``task`` tool, cross-agent suspension, ``agent_tool``, ``run_agent`` and level 1 (CONTRACT §7D)."""

from __future__ import annotations

import copy
import threading
from collections import Counter

import pytest

from conftest import run_in_thread
from toolnexus import (
    AgentDef,
    Budget,
    Client,
    Runtime,
    Tool,
    Toolkit,
    UnknownRequest,
    agent,
    make_answer,
    make_request,
    suspend,
)
from toolnexus.testing import ScriptedModel, tool_messages

USAGE = {"prompt_tokens": 30, "completion_tokens": 10, "total_tokens": 40}
PREFIX = "Delegate a subtask to an isolated subagent."
STATES = {"idle", "running", "suspended", "closed"}


class Model(ScriptedModel):
    """A ScriptedModel whose ``requests`` are snapshots (the live transcript keeps growing)."""

    def __init__(self, scripts):
        super().__init__(scripts, usage=USAGE)

    def __call__(self, request):
        return super().__call__(copy.deepcopy(request))

    def requests_of(self, model):
        return [r for r in self.requests if r["model"] == model]


def call(name, **arguments):
    return {"name": name, "arguments": arguments}


def task(agent_name, prompt):
    return call("task", agent=agent_name, prompt=prompt)


def answered(first, final):
    """A step: ``first`` on a fresh input, then ``final(last tool content)`` once a tool replied."""

    def step(request):
        last = request["messages"][-1]
        return {"content": final(last["content"])} if last["role"] == "tool" else first

    return step


def delegating(*calls, final=lambda content: f"boss: {content}"):
    """A parent step: ``calls`` on a fresh input, then ``final(last tool content)``."""
    return answered({"tool_calls": list(calls)}, final)


def text(content):
    return {"content": content}


def lookup_tool():
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    return Tool("lookup", "look something up", schema, lambda args, ctx: f"data({args.get('q')})")


class ToolLog:
    """An ``after_tool`` hook that records every ToolResult by tool name."""

    def __init__(self):
        self.lock = threading.Lock()
        self.results = []

    def __call__(self, name, args, result, id, turn):
        with self.lock:
            self.results.append((name, dict(args) if isinstance(args, dict) else args, result))

    def of(self, name):
        return [result for tool_name, _, result in self.results if tool_name == name]

    @property
    def hooks(self):
        return {"after_tool": self}


def boss_def(step_model="m-boss", *, team=("worker",), **kwargs):
    return AgentDef("boss", "runs the show", model=step_model, team=list(team), **kwargs)


def run_boss(rt, prompt="go"):
    handle = rt.spawn(rt.root, "boss")
    rt.wake(handle, prompt)
    return handle, run_in_thread(lambda: rt.wait(handle))


@pytest.fixture
def closing():
    """Collects runtimes and closes them after the test."""
    runtimes = []
    yield runtimes.append
    for rt in runtimes:
        rt.close(rt.root)


def tool_names(request):
    return [t["function"]["name"] for t in request["tools"]]


def task_tool_schema(request):
    return next(t["function"] for t in request["tools"] if t["function"]["name"] == "task")


# --- the tool itself ------------------------------------------------------------------------


def team_registry():
    return {
        "boss": boss_def(team=("zeta", "alpha"), tools=[lookup_tool()]),
        "alpha": AgentDef("alpha", "does alpha things", model="m-alpha"),
        "zeta": AgentDef("zeta", "does zeta things", model="m-zeta"),
        "outsider": AgentDef("outsider", "never on the team", model="m-out"),
        "solo": AgentDef("solo", "works alone", model="m-solo", tools=[lookup_tool()]),
        "bare": AgentDef("bare", "no tools at all", model="m-bare"),
    }


def first_request(name, closing):
    model = Model({f"m-{name}": text("ok")})
    rt = Runtime(team_registry(), generate=model)
    closing(rt)
    assert run_in_thread(lambda: rt.run_agent(name, "hi")).status == "done"
    return model.requests[0]


def test_agent_without_team_gets_no_task_tool(closing):
    assert tool_names(first_request("solo", closing)) == ["lookup"]


def test_agent_without_team_or_tools_gets_empty_tool_list(closing):
    assert first_request("bare", closing)["tools"] == []


def test_team_agent_gets_exactly_one_task_tool(closing):
    names = tool_names(first_request("boss", closing))
    assert Counter(names) == Counter({"lookup": 1, "task": 1})


def test_task_description_lists_only_the_team_sorted(closing):
    description = task_tool_schema(first_request("boss", closing))["description"]
    assert description.startswith(PREFIX)
    assert "alpha: does alpha things; zeta: does zeta things" in description
    for other in ("outsider", "never on the team", "solo", "boss"):
        assert other not in description


def test_task_schema_requires_agent_and_prompt_strings(closing):
    schema = task_tool_schema(first_request("boss", closing))["parameters"]
    assert schema["type"] == "object"
    assert schema["properties"]["agent"]["type"] == "string"
    assert schema["properties"]["prompt"]["type"] == "string"
    assert sorted(schema["required"]) == ["agent", "prompt"]


def refused_call(closing, registry, first_call):
    log = ToolLog()
    registry = {**registry, "boss": boss_def(team=registry["boss"].team_names, hooks=log.hooks)}
    model = Model({"m-boss": delegating(first_call)})
    rt = Runtime(registry, generate=model)
    closing(rt)
    handle, result = run_boss(rt)
    return rt, handle, result, log.of("task")


def test_out_of_team_target_is_an_error_result_naming_the_team(closing):
    rt, handle, result, results = refused_call(closing, team_registry(), task("outsider", "do it"))
    assert len(results) == 1 and results[0].is_error
    assert "not in this agent's team" in results[0].output
    assert "alpha" in results[0].output and "zeta" in results[0].output
    assert result.status == "done"


def test_out_of_team_target_spawns_nothing(closing):
    rt, handle, _, _ = refused_call(closing, team_registry(), task("outsider", "do it"))
    assert [view.id for view in rt.handles()] == ["root", handle.id]
    assert not any(e["event"] == "spawn" and e["handle"] != handle.id for e in rt.events())


@pytest.mark.parametrize(
    "arguments",
    [{}, {"agent": "alpha"}, {"prompt": "x"}, {"agent": 5, "prompt": "x"}, {"agent": "alpha", "prompt": 7}, {"agent": None, "prompt": "x"}],
    ids=["empty", "no-prompt", "no-agent", "int-agent", "int-prompt", "null-agent"],
)
def test_invalid_task_arguments_are_an_error_result_and_the_run_goes_on(closing, arguments):
    rt, handle, result, results = refused_call(closing, team_registry(), call("task", **arguments))
    assert len(results) == 1 and results[0].is_error
    assert [view.id for view in rt.handles()] == ["root", handle.id]
    assert result.status == "done"
    assert result.turns == 2


def test_team_member_missing_from_registry_is_an_error_result(closing):
    registry = {**team_registry(), "boss": boss_def(team=("ghost", "alpha"))}
    rt, handle, result, results = refused_call(closing, registry, task("ghost", "boo"))
    assert len(results) == 1 and results[0].is_error
    assert "unknown agent" in results[0].output
    assert [view.id for view in rt.handles()] == ["root", handle.id]
    assert result.status == "done"


# --- one delegation ---------------------------------------------------------------------------


def worker_registry(worker=None, **boss_kwargs):
    return {
        "boss": boss_def(**boss_kwargs),
        "worker": worker or AgentDef("worker", "does the work", model="m-worker", tools=[lookup_tool()]),
    }


def one_lookup_then_text(request):
    results = tool_messages(request)
    return text("found:" + results[0]) if results else {"tool_calls": [call("lookup", q="x")]}


@pytest.mark.parametrize("soul", ["WORKER SOUL", ""], ids=["with-soul", "without-soul"])
def test_child_sees_only_its_own_soul_and_the_prompt(closing, soul):
    worker = AgentDef("worker", "does the work", model="m-worker", soul=soul)
    model = Model({"m-boss": delegating(task("worker", "sub prompt")), "m-worker": text("w")})
    rt = Runtime(worker_registry(worker, soul="BOSS SOUL"), generate=model)
    closing(rt)
    handle = rt.spawn(rt.root, "boss")
    rt.conversation_store.save(handle.id, [{"role": "user", "content": "earlier"}, {"role": "assistant", "content": "before"}])
    rt.wake(handle, "go")
    assert run_in_thread(lambda: rt.wait(handle)).status == "done"
    expected = ([{"role": "system", "content": soul}] if soul else []) + [{"role": "user", "content": "sub prompt"}]
    assert [model.requests_of("m-worker")[0]["messages"]] == [expected]
    assert model.requests_of("m-boss")[0]["messages"][0] == {"role": "system", "content": "BOSS SOUL"}


def test_child_gets_its_own_tools_not_the_parents(closing):
    boss_tool = Tool("secret", "boss only", None, lambda args, ctx: "s")
    model = Model({"m-boss": delegating(task("worker", "p")), "m-worker": one_lookup_then_text})
    rt = Runtime(worker_registry(tools=[boss_tool]), generate=model)
    closing(rt)
    run_boss(rt)
    assert tool_names(model.requests_of("m-worker")[0]) == ["lookup"]
    assert sorted(tool_names(model.requests_of("m-boss")[0])) == ["secret", "task"]


def test_parent_transcript_gains_exactly_one_tool_message_per_call(closing):
    registry = {**team_registry(), "boss": boss_def(team=("alpha", "zeta"))}
    model = Model({"m-boss": delegating(task("alpha", "a"), task("zeta", "z")), "m-alpha": text("A!"), "m-zeta": text("Z!")})
    rt = Runtime(registry, generate=model)
    closing(rt)
    handle, result = run_boss(rt)
    assert result.status == "done"
    messages = rt.conversation_store.get(handle.id)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool", "assistant"]
    call_ids = [c["id"] for c in messages[1]["tool_calls"]]
    assert [(m["tool_call_id"], m["content"]) for m in messages[2:4]] == list(zip(call_ids, ["A!", "Z!"]))


def test_child_not_done_appears_as_status_prefixed_text(closing):
    log = ToolLog()
    worker = AgentDef("worker", "loops", model="m-worker", tools=[lookup_tool()], budget=Budget(max_turns=1))
    model = Model({"m-boss": delegating(task("worker", "p")), "m-worker": {"tool_calls": [call("lookup", q="y")]}})
    rt = Runtime(worker_registry(worker, hooks=log.hooks), generate=model)
    closing(rt)
    _, result = run_boss(rt)
    child_result = rt.wait("root/boss.1/worker.1")
    assert child_result.status == "incomplete"
    [output] = log.of("task")
    assert output.output == f"[incomplete] {child_result.text}"
    assert result.status == "done"


def test_task_result_metadata_names_agent_turns_and_tokens(closing):
    log = ToolLog()
    model = Model({"m-boss": delegating(task("worker", "p")), "m-worker": one_lookup_then_text})
    rt = Runtime(worker_registry(hooks=log.hooks), generate=model)
    closing(rt)
    run_boss(rt)
    [output] = log.of("task")
    assert output.output == "found:data(x)"
    assert not output.is_error
    assert output.metadata == {"agent": "worker", "turns": 2, "total_tokens": 80, "handle": "root/boss.1/worker.1"}


def test_child_usage_rolls_up_into_parent_and_root(closing):
    model = Model({"m-boss": delegating(task("worker", "p")), "m-worker": one_lookup_then_text})
    rt = Runtime(worker_registry(), generate=model)
    closing(rt)
    handle, result = run_boss(rt)
    assert rt.inspect("root/boss.1/worker.1").tokens == 80
    assert rt.inspect(handle).tokens == 2 * 40 + 80
    assert rt.inspect(rt.root).tokens == 160
    assert result.total_tokens == 160


def test_failing_child_is_an_error_result_and_parent_finishes(closing):
    log = ToolLog()

    def broken(request):
        raise RuntimeError("model exploded")

    model = Model({"m-boss": delegating(task("worker", "p")), "m-worker": broken})
    rt = Runtime(worker_registry(hooks=log.hooks), generate=model)
    closing(rt)
    _, result = run_boss(rt)
    [output] = log.of("task")
    assert output.is_error
    assert output.output.startswith("[error]")
    assert "model exploded" in output.output
    assert result.status == "done"
    assert result.text.startswith("boss: [error]")


# --- reattachment -----------------------------------------------------------------------------


def test_identical_calls_in_one_turn_share_one_child(closing):
    model = Model({"m-boss": delegating(task("worker", "same"), task("worker", "same")), "m-worker": text("w")})
    rt = Runtime(worker_registry(), generate=model)
    closing(rt)
    handle, result = run_boss(rt)
    assert result.status == "done"
    assert rt.inspect(handle).children == ["root/boss.1/worker.1"]
    assert model.calls["m-worker"] == 1
    tool_contents = [m["content"] for m in rt.conversation_store.get(handle.id) if m["role"] == "tool"]
    assert tool_contents == ["w", "w"]


def test_identical_calls_in_one_turn_log_a_reattach_event(closing):
    model = Model({"m-boss": delegating(task("worker", "same"), task("worker", "same")), "m-worker": text("w")})
    rt = Runtime(worker_registry(), generate=model)
    closing(rt)
    handle, _ = run_boss(rt)
    [event] = [e for e in rt.events() if e["event"] == "reattach"]
    assert event["handle"] == "root/boss.1/worker.1"
    assert event["parent"] == handle.id
    assert event["state"] in STATES


def test_reattachment_is_scoped_to_the_turn(closing):
    model = Model({"m-boss": delegating(task("worker", "same")), "m-worker": text("w")})
    rt = Runtime(worker_registry(), generate=model)
    closing(rt)
    handle, first = run_boss(rt, "first")
    rt.wake(handle, "second")
    second = run_in_thread(lambda: rt.wait(handle))
    assert (first.status, second.status) == ("done", "done")
    assert rt.inspect(handle).children == ["root/boss.1/worker.1", "root/boss.1/worker.2"]
    assert model.calls["m-worker"] == 2
    assert not [e for e in rt.events() if e["event"] == "reattach"]
    assert [rt.inspect(child).state for child in rt.inspect(handle).children] == ["closed", "closed"]


# --- suspension across agents -------------------------------------------------------------------


class Approval:
    """A worker tool that suspends until answered; records the answer of every run."""

    def __init__(self):
        self.lock = threading.Lock()
        self.answers = []

    def execute(self, args, ctx):
        with self.lock:
            self.answers.append(ctx.answer)
        if ctx.answer is None:
            return suspend(make_request("approval", "approve deploy?"))
        return "approved"

    def tool(self):
        return Tool("approve", "ask for approval", None, self.execute)


def approval_registry(approval, *, worker_wait_for=None, **boss_kwargs):
    worker = AgentDef("worker", "deploys", model="m-worker", tools=[approval.tool()], wait_for=worker_wait_for)
    return worker_registry(worker, **boss_kwargs)


def approval_model():
    return Model(
        {
            "m-boss": delegating(task("worker", "deploy")),
            "m-worker": answered({"tool_calls": [call("approve")]}, lambda content: f"deployed: {content}"),
        }
    )


@pytest.fixture
def suspended(closing):
    """boss -> worker, the worker's tool suspended, nobody to answer: the root wait is pending."""
    approval = Approval()
    model = approval_model()
    rt = Runtime(approval_registry(approval), generate=model)
    closing(rt)
    handle, result = run_boss(rt, "ship it")
    return rt, model, approval, handle, result


def test_child_suspension_reaches_the_root_as_pending(suspended):
    rt, _, _, handle, result = suspended
    assert result.status == "pending"
    assert result.pending is not None
    assert result.pending.data["path"] == ["root", "boss.1", "worker.1"]
    assert rt.inspect(handle).state == "suspended"
    assert rt.inspect("root/boss.1/worker.1").state == "suspended"
    assert rt.inspect(handle).pending.id == result.pending.id


def test_resume_unknown_id_raises_and_changes_nothing(suspended):
    rt, model, approval, handle, result = suspended
    calls_before = dict(model.calls)
    with pytest.raises(UnknownRequest):
        rt.resume(make_answer("no-such-request", True))
    assert rt.inspect(handle).state == "suspended"
    assert rt.inspect("root/boss.1/worker.1").state == "suspended"
    assert rt.inspect(handle).pending.id == result.pending.id
    assert model.calls == calls_before
    assert len(approval.answers) == 1


def test_runtime_resume_finishes_the_whole_chain(suspended):
    rt, _, _, handle, result = suspended
    rt.resume(make_answer(result.pending.id, True))
    final = run_in_thread(lambda: rt.wait(handle))
    assert final.status == "done"
    assert final.text == "boss: deployed: approved"
    assert rt.inspect(handle).state == "idle"
    assert rt.inspect("root/boss.1/worker.1").state == "closed"


def test_runtime_resume_continues_child_from_checkpoint(suspended):
    rt, model, approval, handle, result = suspended
    rt.resume(make_answer(result.pending.id, True))
    run_in_thread(lambda: rt.wait(handle))
    assert approval.answers[0] is None
    assert approval.answers[1].id == result.pending.id and approval.answers[1].ok
    assert len(approval.answers) == 2
    assert model.calls["m-worker"] == 2
    assert rt.inspect(handle).children == ["root/boss.1/worker.1"]


def test_runtime_resume_goes_through_idle_on_every_handle_of_the_path(suspended):
    rt, _, _, handle, result = suspended
    rt.resume(make_answer(result.pending.id, True))
    run_in_thread(lambda: rt.wait(handle))
    arrow = "\u2192"
    through_idle = [f"suspended{arrow}idle", f"idle{arrow}running"]
    for each in (handle.id, "root/boss.1/worker.1"):
        recorded = rt.transitions(each)
        at = recorded.index(f"running{arrow}suspended") + 1
        assert recorded[at : at + 2] == through_idle
        assert f"suspended{arrow}running" not in recorded


def test_runtime_resume_continues_the_parent_and_reattaches_without_asking_its_model_again(suspended):
    rt, model, _, handle, result = suspended
    rt.resume(make_answer(result.pending.id, True))
    run_in_thread(lambda: rt.wait(handle))
    reattached = [e for e in rt.events() if e["event"] == "reattach"]
    assert [(e["handle"], e["parent"]) for e in reattached] == [("root/boss.1/worker.1", handle.id)]
    assert model.calls["m-boss"] == 2  # the pending turn's call and the final answer: the step that delegated is not asked again


def test_resume_twice_with_the_same_id_raises(suspended):
    rt, _, _, handle, result = suspended
    rt.resume(make_answer(result.pending.id, True))
    run_in_thread(lambda: rt.wait(handle))
    with pytest.raises(UnknownRequest):
        rt.resume(make_answer(result.pending.id, True))


def balanced(messages):
    asked = [c["id"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    answered_ids = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    return Counter(answered_ids) == Counter(asked) and all(n == 1 for n in Counter(asked).values())


def test_transcripts_are_balanced_after_runtime_resume(suspended):
    rt, _, _, handle, result = suspended
    assert rt.conversation_store.get(handle.id) in (None, [])  # pending turns are rewound
    rt.resume(make_answer(result.pending.id, True))
    run_in_thread(lambda: rt.wait(handle))
    boss = rt.conversation_store.get(handle.id)
    assert balanced(boss)
    assert [m["role"] for m in boss] == ["user", "assistant", "tool", "assistant"]
    assert balanced(rt.conversation_store.get("root/boss.1/worker.1"))


def test_parent_wait_for_answers_a_child_suspension_inline(closing):
    approval, asked = Approval(), []

    def boss_wait_for(request):
        asked.append(request)
        return make_answer(request.id, True)

    model = approval_model()
    rt = Runtime(approval_registry(approval, wait_for=boss_wait_for), generate=model)
    closing(rt)
    handle, result = run_boss(rt, "ship it")
    assert result.status == "done"
    assert result.text == "boss: deployed: approved"
    assert len(asked) == 1 and asked[0].data["path"] == ["root", "boss.1", "worker.1"]
    assert [a is not None and a.id == asked[0].id for a in approval.answers] == [False, True]
    assert model.calls["m-worker"] == 2
    assert rt.inspect(handle).children == ["root/boss.1/worker.1"]


def test_nearest_interpreter_wins(closing):
    approval, boss_asked, worker_asked = Approval(), [], []

    def boss_wait_for(request):
        boss_asked.append(request)
        return make_answer(request.id, False, reason="declined")

    def worker_wait_for(request):
        worker_asked.append(request)
        return make_answer(request.id, True)

    model = approval_model()
    rt = Runtime(approval_registry(approval, worker_wait_for=worker_wait_for, wait_for=boss_wait_for), generate=model)
    closing(rt)
    _, result = run_boss(rt, "ship it")
    assert result.status == "done"
    assert result.text == "boss: deployed: approved"
    assert len(worker_asked) == 1
    assert boss_asked == []


# --- agent_tool, run_agent, level 1 ----------------------------------------------------------


def test_agent_tool_works_in_a_bare_client(closing):
    model = Model({"m-host": answered({"tool_calls": [call("worker", prompt="do it")]}, lambda c: f"host: {c}"), "m-worker": text("w-done")})
    rt = Runtime(worker_registry(), generate=model)
    closing(rt)
    worker_tool = rt.agent_tool("worker")
    assert worker_tool.name == "worker"
    assert worker_tool.input_schema["required"] == ["prompt"]
    client = Client(model="m-host", generate=model)
    result = run_in_thread(lambda: client.run("use the worker", Toolkit([worker_tool])))
    assert result.status == "done"
    assert result.text == "host: w-done"
    [record] = result.tool_calls
    assert record.output == "w-done"
    assert record.metadata == {"agent": "worker", "turns": 1, "total_tokens": 40}
    assert model.requests_of("m-worker")[0]["messages"] == [{"role": "user", "content": "do it"}]


def test_run_agent_returns_done_and_closes_the_handle(closing):
    model = Model({"m-worker": one_lookup_then_text})
    rt = Runtime(worker_registry(), generate=model)
    closing(rt)
    result = run_in_thread(lambda: rt.run_agent("worker", "p"))
    assert result.status == "done"
    assert result.text == "found:data(x)"
    assert result.handle_id == "root/worker.1"
    assert rt.inspect(result.handle_id).state == "closed"


def test_level_one_registry_is_the_transitive_closure():
    leaf = agent("leaf", does="leaf things", model="m-leaf")
    mid = agent("mid", does="mid things", team=[leaf], model="m-mid")
    top = agent("top", does="top things", team=[mid], model="m-top")
    assert sorted(top.registry) == ["leaf", "mid", "top"]
    assert sorted(mid.registry) == ["leaf", "mid"]
    assert sorted(leaf.registry) == ["leaf"]
    assert all(isinstance(d, AgentDef) for d in top.registry.values())
    assert top.registry["top"].team_names == ("mid",)


def test_level_one_run_delegates_through_the_team():
    leaf = agent("leaf", does="leaf things", model="m-leaf")
    mid = agent("mid", does="mid things", team=[leaf], model="m-mid")
    top = agent("top", does="top things", team=[mid], model="m-top")
    model = Model(
        {
            "m-top": delegating(task("mid", "m"), final=lambda c: f"top<{c}>"),
            "m-mid": delegating(task("leaf", "l"), final=lambda c: f"mid<{c}>"),
            "m-leaf": text("leaf"),
        }
    )
    result = run_in_thread(lambda: top.run("go", generate=model))
    assert result.status == "done"
    assert result.text == "top<mid<leaf>>"
    assert isinstance(result.runtime, Runtime)


def test_level_one_pending_run_resumes_on_its_runtime():
    approval = Approval()
    worker = agent("worker", does="deploys", tools=[approval.tool()], model="m-worker")
    boss = agent("boss", does="runs the show", team=[worker], model="m-boss")
    result = run_in_thread(lambda: boss.run("ship it", generate=approval_model()))
    rt = result.runtime
    try:
        assert result.status == "pending"
        assert result.pending.data["path"] == ["root", "boss.1", "worker.1"]
        rt.resume(make_answer(result.pending.id, True))
        final = run_in_thread(lambda: rt.wait(result.handle_id))
        assert final.status == "done"
        assert final.text == "boss: deployed: approved"
    finally:
        rt.close(rt.root)


def test_an_agent_tool_that_suspends_resumes_the_same_agent_when_answered():
    from toolnexus import Client, make_answer, make_request, success, suspend

    def approve(args, ctx):
        return success("approved") if ctx.answer is not None else suspend(make_request("approval", "Deploy?"))

    registry = {"deployer": AgentDef("deployer", "Deploys.", model="deployer", tools=[Tool("approve", "", None, approve)])}
    deployer = ScriptedModel(
        {"deployer": [{"tool_calls": [{"id": "a1", "name": "approve", "arguments": {}}]}, lambda r: {"content": f"deployed: {tool_messages(r)[-1]}"}]}
    )
    outer = ScriptedModel(
        {"outer": [{"tool_calls": [{"id": "o1", "name": "deployer", "arguments": {"prompt": "ship"}}]}, lambda r: {"content": tool_messages(r)[-1]}]}
    )
    with Runtime(registry, generate=deployer) as rt, Client(model="outer", generate=outer) as client:
        toolkit = Toolkit([rt.agent_tool("deployer")])
        first = client.run("go", toolkit)
        assert first.status == "pending"
        final = client.resume(first.pending, make_answer(first.pending.id, True), toolkit, messages=first.messages)
        assert (final.status, final.text) == ("done", "deployed: approved")
        assert [view.id for view in rt.handles()] == ["root", "root/deployer.1"]
        assert rt.inspect("root/deployer.1").state == "closed"


# --- Agent.as_tool: a runtime the tool belongs to ------------------------------------------------


def host_and_worker_model() -> Model:
    return Model({"m-host": answered({"tool_calls": [call("worker", prompt="do it")]}, lambda c: f"host: {c}"), "m-worker": text("w-done")})


def test_an_agent_as_a_tool_runs_it_once_per_call_and_says_what_it_does():
    model = host_and_worker_model()
    worker = agent("worker", does="does the work", model="m-worker")
    try:
        tool = worker.as_tool(generate=model)
        assert (tool.name, tool.description, tool.input_schema["required"]) == ("worker", "does the work", ["prompt"])
        with Client(model="m-host", generate=model) as client:
            result = run_in_thread(lambda: client.run("use the worker", Toolkit([tool])))
        assert (result.status, result.text) == ("done", "host: w-done")
        assert result.tool_calls[0].metadata == {"agent": "worker", "turns": 1, "total_tokens": 40}
    finally:
        worker.close()


def test_the_client_given_an_agent_tool_closes_its_runtime_when_it_closes():
    model = host_and_worker_model()
    worker = agent("worker", does="does the work", model="m-worker")
    try:
        tool = worker.as_tool(generate=model)
        rt = tool.resource.runtime()  # the runtime the tool was built with
        with Client(model="m-host", generate=model) as client:
            run_in_thread(lambda: client.run("use the worker", Toolkit([tool])))
            assert rt.inspect(rt.root).state == "idle"
        assert rt.inspect(rt.root).state == "closed"
    finally:
        worker.close()


def test_an_agent_tool_runs_again_after_the_runtime_given_it_closed_its_own():
    model = host_and_worker_model()
    worker = agent("worker", does="does the work", model="m-worker")
    host = agent("host", does="asks the worker", model="m-host", tools=[worker.as_tool(generate=model)])
    try:
        first = run_in_thread(lambda: host.run("use the worker", generate=model))  # closing its runtime closes the tool's
        second = run_in_thread(lambda: host.run("use the worker", generate=model))
        assert (first.text, second.text) == ("host: w-done", "host: w-done")
    finally:
        host.close()
        worker.close()


def test_an_agent_tool_refuses_runtime_options_when_it_is_made():
    from toolnexus import ConfigError

    with pytest.raises(ConfigError, match="recover"):
        agent("worker", does="does the work").as_tool(recover="sometimes")


def test_an_agent_tool_that_suspends_resumes_the_same_run_when_answered():
    from toolnexus import success

    def approve(args, ctx):
        return success("approved") if ctx.answer is not None else suspend(make_request("approval", "Deploy?"))

    deployer = agent("deployer", does="Deploys.", model="deployer", tools=[Tool("approve", "", None, approve)])
    script = ScriptedModel(
        {
            "deployer": [{"tool_calls": [{"id": "a1", "name": "approve", "arguments": {}}]}, lambda r: {"content": f"deployed: {tool_messages(r)[-1]}"}],
            "outer": [{"tool_calls": [{"id": "o1", "name": "deployer", "arguments": {"prompt": "ship"}}]}, lambda r: {"content": tool_messages(r)[-1]}],
        }
    )
    try:
        tool = deployer.as_tool(generate=script)
        with Client(model="outer", generate=script) as client:
            toolkit = Toolkit([tool])
            first = client.run("go", toolkit)
            assert first.status == "pending"
            final = client.resume(first.pending, make_answer(first.pending.id, True), toolkit, messages=first.messages)
            assert (final.status, final.text) == ("done", "deployed: approved")
            rt = tool.resource.runtime()
            assert [(view.id, view.state) for view in rt.handles()] == [("root", "idle"), ("root/deployer.1", "closed")]
    finally:
        deployer.close()
