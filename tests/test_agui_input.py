"""An AG-UI run's input is checked before anything starts (CONTRACT §21): ``400`` for a body
that is not a JSON object, ``422`` for one ``RunAgentInput`` (or this library's rules)
refuses or that the thread cannot take, ``409`` for a busy thread or an answer given
already, ``404`` for a thread this caller does not have. Each refusal names its reason,
and nothing is spawned, woken or asked of a model."""

from __future__ import annotations

import copy
from typing import Any

import pytest

ag_ui = pytest.importorskip("ag_ui.core")

import _agui_team as team  # noqa: E402
from _agui_team import PICK, body, user  # noqa: E402
from toolnexus import agui  # noqa: E402

HANG = 10.0
#: An input exactly as HttpAgent sends a resume (ids shortened).
SENT = {
    "threadId": "t1",
    "runId": "run-2",
    "protocolVersion": "1.0",
    "state": {"theme": "dark", "toolnexus": {"thread": "root/assistant.1", "handles": {}}},
    "messages": [
        {"id": "u1", "role": "user", "content": [
            {"type": "text", "text": "hello"},
            {"type": "image", "source": {"type": "url", "value": "https://x/y.png"}},
        ]},
        {"id": "m1", "role": "assistant", "content": "Let me delegate.", "toolCalls": [
            {"id": "c1", "type": "function", "function": {"name": "task", "arguments": "{}"}}]},
        {"subagentRunId": "h2", "id": "r2", "role": "tool", "content": "deleted", "toolCallId": "c2"},
        {"id": "s1", "role": "system", "content": "be brief"},
        {"id": "r9", "role": "reasoning", "content": "thinking"},
        {"id": "x1", "role": "activity", "activityType": "progress", "content": {"done": 1}},
    ],
    "tools": [PICK],
    "context": [{"description": "page", "value": "home"}],
    "forwardedProps": {},
    "resume": [{"interruptId": "i1", "status": "resolved", "payload": {"approved": True}}],
}


class Counted:
    """The test team's model, counting its calls."""

    def __init__(self) -> None:
        self.model = team.model()

    def calls(self) -> int:
        return sum(self.model.calls.values())


@pytest.fixture
def model() -> Counted:
    return Counted()


@pytest.fixture
def rt(cleanup: Any, model: Counted) -> Any:
    return cleanup.runtime(team.registry(), generate=model.model)


def refused(rt: Any, given: Any, *, agent: str = "assistant", principal: str = "") -> agui.AGUIInputError:
    """The refusal of ``given``, checked to have started nothing."""
    before = [view.id for view in rt.handles()]
    with pytest.raises(agui.AGUIInputError) as caught:
        agui.events(rt, given, agent=agent, principal=principal)
    assert [view.id for view in rt.handles()] == before
    return caught.value


def test_an_input_as_httpagent_sends_it_is_taken(rt: Any) -> None:
    ag_ui.RunAgentInput.model_validate(SENT)  # the protocol's own model agrees it is one
    found = agui._input.read_input(SENT)
    assert found.prompt is None and [a.call_id for a in found.answers] == []  # a subagent's result is not an answer
    assert found.state == {"theme": "dark"}
    plain = copy.deepcopy(SENT)
    plain["messages"][-1:] = [user("go", id="u9")]
    assert agui._input.read_input(plain).prompt == "go"
    assert agui._input.read_input(SENT | {"messages": SENT["messages"][:1]}).prompt == "hello"


@pytest.mark.parametrize(
    "raw",
    [b"{", b'{"threadId": NaN}', b"[]", b'"a string"', b"\xff\xfe", "[" * 70 + "]" * 70],
    ids=["malformed", "nan", "array", "string", "not utf-8", "too deep"],
)
def test_a_body_that_is_not_a_json_object_is_400(rt: Any, raw: Any) -> None:
    assert refused(rt, raw).status == 400


def test_a_dict_body_too_deep_is_400(rt: Any) -> None:
    deep: Any = {}
    for _ in range(70):
        deep = {"a": deep}
    assert refused(rt, body("t1", "r1", [user("x")], forwardedProps=deep)).status == 400


def broken(path: str, value: Any) -> dict[str, Any]:
    """A good new-thread input with one field set (``value`` ``...``: removed)."""
    made: Any = copy.deepcopy(body("t1", "run-1", [user("go")]))
    *parents, key = path.split(".")
    target = made
    for part in parents:
        target = target[int(part)] if part.isdigit() else target[part]
    if value is ...:
        del target[int(key) if key.isdigit() else key]
    else:
        target[int(key) if key.isdigit() else key] = value
    return made


MODEL_REFUSES = [
    ("threadId", ...), ("runId", ...), ("messages", ...), ("threadId", 7), ("messages", {}),
    ("messages.0.id", ...), ("messages.0.role", "robot"), ("messages.0.content", ...), ("messages.0.content", 5),
    ("messages.0.content", [{"type": "text"}]),
    ("messages.0.content", [{"type": "image", "source": {"type": "data", "value": "x"}}]),
    ("messages.0", {"id": "t", "role": "tool", "content": "x"}),
    ("messages.0", {"role": "tool", "toolCallId": "c", "content": "x"}),
    ("messages.0", {"id": "a", "role": "assistant", "toolCalls": [{"id": "c", "function": {"name": "f"}}]}),
    ("tools.0.description", ...), ("tools.0.name", 3), ("context", [{"description": "d"}]),
    ("resume", [{"interruptId": "i", "status": "maybe"}]), ("resume", [{"status": "resolved"}]),
]


@pytest.mark.parametrize(("path", "value"), MODEL_REFUSES, ids=[f"{p}={v!r}"[:40] for p, v in MODEL_REFUSES])
def test_an_input_run_agent_input_refuses_is_422_naming_the_field(rt: Any, path: str, value: Any) -> None:
    given = broken(path, value)
    with pytest.raises(Exception):  # the protocol's model refuses it too
        ag_ui.RunAgentInput.model_validate(given)
    problem = refused(rt, given)
    assert problem.status == 422
    assert path.split(".")[0] in problem.reason


@pytest.mark.parametrize(
    ("path", "value", "said"),
    [
        ("tools", ..., "tools: required"),
        ("context", ..., "context: required"),
        ("tools.0.name", "has space", "is not [A-Za-z0-9_-]"),
        ("tools.0.name", "x" * 65, "is not [A-Za-z0-9_-]"),
        ("tools.0.name", "task", "own tools"),
        ("tools", [PICK, PICK], "offered twice"),
        ("tools.0.parameters", ["not", "a", "schema"], "tools[0].parameters"),
        ("messages", [], "last message must be a user message"),
        ("messages", [{"id": "a", "role": "assistant", "content": "hi"}], "last message must be a user message"),
        ("messages.0.content", "   ", "no text"),
        ("threadId", "", "threadId: 1 to 200"),
        ("threadId", "t" * 201, "threadId: 1 to 200"),
    ],
)
def test_an_input_this_library_refuses_is_422(rt: Any, path: str, value: Any, said: str) -> None:
    problem = refused(rt, broken(path, value))
    assert problem.status == 422 and said in problem.reason, problem.reason


def test_an_own_tool_of_the_agent_cannot_be_a_frontend_tool(cleanup: Any) -> None:
    rt = cleanup.runtime(team.registry(), generate=team.model())
    problem = refused(rt, body("t1", "r1", [user("x")], tools=[dict(PICK, name="publish")]), agent="publisher")
    assert problem.status == 422 and "own tools" in problem.reason


@pytest.fixture
def waiting(rt: Any) -> tuple[Any, str]:
    """A thread waiting on an approval: ``(runtime, interrupt id)``."""
    events = list(agui.events(rt, body("t1", "run-1", [user("the Q3 report")]), agent="assistant"))
    return rt, events[-1]["outcome"]["interrupts"][0]["id"]


def test_a_waiting_thread_without_its_resume_is_422_naming_the_interrupt(waiting: Any, model: Counted) -> None:
    rt, asked = waiting
    calls = model.calls()
    problem = refused(rt, body("t1", "run-2", [user("the Q3 report"), user("and more", id="u2")]))
    assert problem.status == 422 and asked in problem.reason
    assert model.calls() == calls and rt.inspect(rt.handles()[1].id).state == "suspended"


def test_a_resume_naming_another_interrupt_is_422(waiting: Any) -> None:
    rt, asked = waiting
    entries = [{"interruptId": asked, "status": "resolved"}, {"interruptId": "req_nope", "status": "resolved"}]
    problem = refused(rt, body("t1", "run-2", [user("x")], resume=entries))
    assert problem.status == 422 and "req_nope" in problem.reason


def test_a_tool_message_naming_no_open_call_is_422(waiting: Any) -> None:
    rt, asked = waiting
    stray = {"id": "tm", "role": "tool", "toolCallId": "call-nobody-made", "content": "x"}
    resume = [{"interruptId": asked, "status": "resolved"}]
    problem = refused(rt, body("t1", "run-2", [user("x"), stray], resume=resume))
    assert problem.status == 422 and "call-nobody-made" in problem.reason


def test_a_thread_waiting_on_a_frontend_call_needs_its_tool_message(waiting: Any) -> None:
    rt, asked = waiting
    resume = [{"interruptId": asked, "status": "resolved"}]
    list(agui.events(rt, body("t1", "run-2", [user("x")], resume=resume), agent="assistant"))
    problem = refused(rt, body("t1", "run-3", [user("x")]))
    assert problem.status == 422 and "call-pick-1" in problem.reason
    problem = refused(rt, body("t1", "run-3", [user("x")], resume=[{"interruptId": asked, "status": "resolved"}]))
    assert problem.status == 409  # that interrupt was answered by the run before


def test_a_second_answer_to_an_interrupt_is_409(waiting: Any) -> None:
    rt, asked = waiting
    resume = [{"interruptId": asked, "status": "resolved"}]
    list(agui.events(rt, body("t1", "run-2", [user("x")], resume=resume), agent="assistant"))
    answer = {"id": "tm", "role": "tool", "toolCallId": "call-pick-1", "content": "red"}
    list(agui.events(rt, body("t1", "run-3", [user("x"), answer]), agent="assistant"))
    problem = refused(rt, body("t1", "run-4", [user("x"), answer, user("again", id="u2")], resume=resume))
    assert problem.status == 409 and asked in problem.reason


def test_a_running_thread_is_409(cleanup: Any) -> None:
    rt, entered, gate = team.gated(cleanup, HANG)
    running = agui.events(rt, body("t1", "run-1", [user("go")]), agent="slow")
    assert entered.wait(HANG)
    problem = refused(rt, body("t1", "run-2", [user("go"), user("more", id="u2")]), agent="slow")
    assert problem.status == 409 and "running" in problem.reason
    gate.set()
    assert list(running)[-1]["type"] == "RUN_FINISHED"


def test_two_requests_that_read_a_thread_alike_cannot_both_continue_it(rt: Any) -> None:
    list(agui.events(rt, body("t1", "run-1", [user("hi")]), agent="chatty"))
    again = body("t1", "run-2", [user("hi"), user("more", id="u2")])
    first, second = agui.prepare(rt, again, agent="chatty"), agui.prepare(rt, again, agent="chatty")
    list(agui.frames(agui._thread.start(first), 15))
    with pytest.raises(agui.AGUIInputError) as lost:
        agui._thread.start(second)
    assert lost.value.status == 409


def test_another_principal_does_not_find_the_thread(waiting: Any) -> None:
    rt, asked = waiting
    resume = [{"interruptId": asked, "status": "resolved"}]
    problem = refused(rt, body("t1", "run-2", [user("x")], resume=resume), principal="mallory")
    assert problem.status == 404
    assert refused(rt, body("t-none", "run-2", [user("x")], resume=resume)).status == 404
    # The same thread id is another conversation for another principal: hers is untouched.
    events = list(agui.events(rt, body("t1", "run-1", [user("hello")]), agent="chatty", principal="mallory"))
    assert events[-1]["result"] == "you said: hello"
    assert rt.inspect(rt.handles()[1].id).state == "suspended"
