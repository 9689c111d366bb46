"""A small team for the durable-state tests, usable from this process and from child
processes (``python tests/_durable_team.py COMMAND ...`` prints one JSON line).

boss delegates ``deploy`` to worker; worker's ``approve`` tool suspends until answered and,
once approved, appends one line to the effects file (a side effect counted by the tests).
Every model call is appended to the calls file, so a test can count them across processes.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import uuid
from typing import Any, Callable

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _files import append, lines  # noqa: E402,F401 - lines: the tests read what the team wrote
from toolnexus import AgentDef, Runtime, Tool, make_answer, make_request, suspend  # noqa: E402
from toolnexus.testing import ScriptedModel, tool_messages  # noqa: E402
from toolnexus.wire import to_wire  # noqa: E402

@pytest.fixture(params=["sqlite", "postgresql"])
def state(request: Any, tmp_path: Any) -> str:
    """Where a durable test's tree lives: a SQLite file, or the test PostgreSQL server
    (each test uses a fresh runtime id there)."""
    if request.param == "sqlite":
        return str(tmp_path / "state.db")
    from _services import service_url

    return service_url("postgresql")


@pytest.fixture
def files(tmp_path: Any) -> Any:
    """The effects and model-call logs of one test, and its own runtime id."""

    class Files:
        effects = str(tmp_path / "effects.txt")
        calls = str(tmp_path / "calls.txt")
        runtime_id = f"t-{uuid.uuid4().hex[:10]}"

    return Files()


USAGE = {"prompt_tokens": 30, "completion_tokens": 10, "total_tokens": 40}






def registry(effects: str | None = None) -> dict[str, AgentDef]:
    def approve(args: dict[str, Any], ctx: Any) -> Any:
        if ctx.answer is None:
            return suspend(make_request("approval", "approve deploy?"))
        append(effects, f"deployed {ctx.handle_id}")
        return "approved"

    worker = AgentDef("worker", "deploys", model="m-worker", tools=[Tool("approve", "ask for approval", None, approve)])
    boss = AgentDef("boss", "delegates", model="m-boss", team=("worker",))
    echo = AgentDef("echo", "answers at once", model="m-echo")
    return {"boss": boss, "worker": worker, "echo": echo}


def model(calls: str | None = None) -> ScriptedModel:
    def boss(request: dict[str, Any]) -> dict[str, Any]:
        append(calls, "boss")
        found = tool_messages(request)
        if found:
            return {"content": f"boss: {found[-1]}"}
        return {"tool_calls": [{"id": "call_task", "name": "task", "arguments": {"agent": "worker", "prompt": "deploy"}}]}

    def worker(request: dict[str, Any]) -> dict[str, Any]:
        append(calls, "worker")
        found = tool_messages(request)
        if found:
            return {"content": f"deployed: {found[-1]}"}
        return {"tool_calls": [{"id": "call_approve", "name": "approve", "arguments": {}}]}

    def echo(request: dict[str, Any]) -> dict[str, Any]:
        append(calls, "echo")
        return {"content": "echoed"}

    return ScriptedModel({"m-boss": boss, "m-worker": worker, "m-echo": echo}, usage=USAGE)


def runtime(state: str, runtime_id: str, effects: str | None = None, calls: str | None = None, **options: Any) -> Runtime:
    return Runtime(registry(effects), generate=model(calls), state=state, runtime_id=runtime_id, **options)


# --- a team that dies mid-turn: SIGKILL at a chosen point -------------------------------------

CRASH_POINTS = ("lead-after-reply", "worker-after-reply", "tool-before-effect", "tool-after-effect", "worker-second-call")


def crash_registry(effects: str, retry: str = "never", crash: str | None = None) -> dict[str, AgentDef]:
    """lead delegates ``charge A-1`` to worker; worker's ``charge`` tool records one line
    ``<idempotency key> <order>`` per execution in the effects file."""

    def die(point: str) -> None:
        if crash == point:
            os.kill(os.getpid(), signal.SIGKILL)

    def charge(args: dict[str, Any], ctx: Any) -> Any:
        die("tool-before-effect")
        append(effects, f"{ctx.idempotency_key} {args['order']}")
        die("tool-after-effect")
        return f"charged {args['order']}"

    def after(name: str) -> Any:
        return {"after_llm": lambda response, model, turn: die(f"{name}-after-reply") if turn == 1 else None}

    schema = {"type": "object", "properties": {"order": {"type": "string"}}, "required": ["order"]}
    worker = AgentDef("worker", "charges orders", model="m-worker", tools=[Tool("charge", "charge an order", schema, charge, retry=retry)], hooks=after("worker"))
    lead = AgentDef("lead", "delegates", model="m-lead", team=("worker",), hooks=after("lead"))
    return {"lead": lead, "worker": worker}


def crash_model(calls: str | None, crash: str | None = None) -> ScriptedModel:
    def lead(request: dict[str, Any]) -> dict[str, Any]:
        append(calls, "lead")
        found = tool_messages(request)
        if found:
            return {"content": f"lead: {found[-1]}"}
        return {"tool_calls": [{"id": "call_task", "name": "task", "arguments": {"agent": "worker", "prompt": "charge A-1"}}]}

    def worker(request: dict[str, Any]) -> dict[str, Any]:
        found = tool_messages(request)
        if found and crash == "worker-second-call":
            os.kill(os.getpid(), signal.SIGKILL)
        append(calls, "worker")
        if found:
            return {"content": f"worker: {found[-1]}"}
        return {"tool_calls": [{"id": "call_charge", "name": "charge", "arguments": {"order": "A-1"}}]}

    return ScriptedModel({"m-lead": lead, "m-worker": worker}, usage=USAGE)


#: The crash team's models are priced, so a recovered run's cost can be compared.
CRASH_PRICES = {"m-lead": {"input": 1.0, "output": 2.0}, "m-worker": {"input": 3.0, "output": 5.0}}


def crash_runtime(state: str, runtime_id: str, effects: str, calls: str | None, retry: str = "never", crash: str | None = None, **options: Any) -> Runtime:
    registry = crash_registry(effects, retry, crash)
    return Runtime(registry, generate=crash_model(calls, crash), state=state, runtime_id=runtime_id, prices=CRASH_PRICES, **options)


def stalling_runtime(state: str, runtime_id: str, calls: str, gate: Callable[[], None]) -> Runtime:
    """``slow`` agent: its tool waits for ``gate()``, then the model is asked again; an
    interrupt from another process must stop it before that second call."""

    def hold(args: dict[str, Any], ctx: Any) -> Any:
        append(calls, "tool")
        gate()  # the test process decides when the tool ends
        return "held"

    def slow(request: dict[str, Any]) -> dict[str, Any]:
        append(calls, "slow")
        if tool_messages(request):
            return {"content": "finished"}
        return {"tool_calls": [{"id": "call_hold", "name": "hold", "arguments": {}}]}

    registry = {"slow": AgentDef("slow", "holds", model="m-slow", tools=[Tool("hold", "hold on", None, hold)])}
    return Runtime(registry, generate=ScriptedModel({"m-slow": slow}, usage=USAGE), state=state, runtime_id=runtime_id)


def _stdin_gate() -> None:
    """Say on standard output that the tool has started, then wait for the test's line."""
    print(json.dumps({"entered": True}), flush=True)
    sys.stdin.readline()


def _main(argv: list[str]) -> None:
    command, state, runtime_id, effects, calls = argv[:5]
    if command == "stall":
        rt = stalling_runtime(state, runtime_id, calls, _stdin_gate)
        handle = rt.spawn(rt.root, "slow")
        rt.wake(handle, "hold on")
        result = rt.wait(handle, timeout=60)
        print(json.dumps({"status": result.status, "state": rt.inspect(handle).state}), flush=True)
        rt.release()
        return
    if command == "crash":
        point, retry = argv[5], argv[6]
        rt = crash_runtime(state, runtime_id, effects, calls, retry, point)
        lead = rt.spawn(rt.root, "lead")
        rt.wake(lead, "charge order A-1")
        result = rt.wait(lead, timeout=30)
        print(json.dumps({"survived": result.status}), flush=True)
        os._exit(3)
    rt = runtime(state, runtime_id, effects, calls)
    if command == "pending":
        # Run the team to its approval request, print it, and die without letting go.
        result = rt.run_agent("boss", "ship it")
        print(json.dumps({"status": result.status, "handle": result.handle_id, "pending": to_wire(result.pending)}), flush=True)
        os._exit(0)
    if command == "resume":
        request_id, barrier = argv[5], argv[6]
        while not os.path.exists(barrier):  # both racers start together
            pass
        try:
            rt.resume(make_answer(request_id, True))
            outcome = "resumed"
        except Exception as exc:  # noqa: BLE001 - reported to the test
            outcome = type(exc).__name__
            print(f"{outcome}: {exc}", file=sys.stderr)
        handle = argv[7]
        final = rt.wait(handle, timeout=20) if outcome == "resumed" else None
        print(json.dumps({"outcome": outcome, "final": to_wire(final) if final else None}), flush=True)
        rt.release()
        return
    if command == "forget":
        # Finish a run and end the script without letting go: the interpreter must exit.
        rt.run_agent("echo", "hello")
        print(json.dumps({"left": True}), flush=True)
        return
    if command == "echoes":
        count = int(argv[5])
        done = sum(rt.run_agent("echo", f"hello {n}").status == "done" for n in range(count))
        print(json.dumps({"done": done}), flush=True)
        rt.release()
        return
    raise SystemExit(f"unknown command {command}")


if __name__ == "__main__":
    _main(sys.argv[1:])
