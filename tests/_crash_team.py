"""Teams for the crash-safety tests, usable here and from child processes
(``python tests/_crash_team.py COMMAND ...`` prints one JSON line).

The *writing* team: a lead whose model writes a different ``task`` prompt on every call (as
a real model at a high temperature does) delegates to a writer, whose ``publish`` tool
needs an approval and, once approved, appends one line to the effects file. Every model
call of the lead appends one line to the calls file.

The *charging* team: a lead delegates ``charge`` to a worker whose ``charge`` tool appends
one line per execution to the effects file; a store wrapper can SIGKILL the process at a
chosen commit of the lead's ``task`` call.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
import uuid
from typing import Any, Iterator

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

if os.environ.get("TOOLNEXUS_TEST_CLOCK_SKEW"):  # this process's clock runs ahead of the others'
    _skew = float(os.environ["TOOLNEXUS_TEST_CLOCK_SKEW"])
    _real_time = time.time
    time.time = lambda: _real_time() + _skew  # type: ignore[assignment]

from _files import append, lines  # noqa: E402,F401 - lines: the tests read what the team wrote
from toolnexus import AgentDef, Budget, Runtime, Tool, make_request, suspend  # noqa: E402
from toolnexus.state import open_state  # noqa: E402
from toolnexus.testing import ScriptedModel, tool_messages  # noqa: E402
from toolnexus.wire import to_wire  # noqa: E402

USAGE = {"prompt_tokens": 30, "completion_tokens": 10, "total_tokens": 40}






# --- the writing team ----------------------------------------------------------------------------


def writing_registry(effects: str, lead_budget: Budget | None = None) -> dict[str, AgentDef]:
    def publish(args: dict[str, Any], ctx: Any) -> Any:
        if ctx.answer is None:
            return suspend(make_request("approval", f"publish {args.get('title', '?')}?"))
        append(effects, f"published {args.get('title')}")
        return "published"

    schema = {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]}
    writer = AgentDef("writer", "writes and publishes notes", model="m-writer", tools=[Tool("publish", "publish a note", schema, publish)])
    lead = AgentDef("lead", "edits", model="m-lead", team=("writer",), budget=lead_budget)
    return {"lead": lead, "writer": writer}


def writing_model(calls: str | None, down: str | None = None) -> ScriptedModel:
    """``down``: while this file exists, every model call fails (the server is down)."""

    def check_up() -> None:
        if down is not None and os.path.exists(down):
            raise ConnectionError("the model server is down")

    def lead(request: dict[str, Any]) -> dict[str, Any]:
        check_up()
        append(calls, "lead")
        found = tool_messages(request)
        if found:
            return {"content": f"lead: {found[-1]}"}
        prompt = f"write the launch note, take {uuid.uuid4().hex[:8]}"  # never the same twice
        return {"tool_calls": [{"id": f"call_{uuid.uuid4().hex[:6]}", "name": "task", "arguments": {"agent": "writer", "prompt": prompt}}]}

    def writer(request: dict[str, Any]) -> dict[str, Any]:
        check_up()
        append(calls, "writer")
        if tool_messages(request):
            return {"content": "the note is out"}
        return {"tool_calls": [{"id": "call_publish", "name": "publish", "arguments": {"title": "launch"}}]}

    return ScriptedModel({"m-lead": lead, "m-writer": writer}, usage=USAGE)


def writing_runtime(state: str | None, runtime_id: str, effects: str, calls: str | None, down: str | None = None, **options: Any) -> Runtime:
    extra: dict[str, Any] = {"state": state, "runtime_id": runtime_id} if state else {}
    budget = options.pop("lead_budget", None)
    return Runtime(writing_registry(effects, budget), generate=writing_model(calls, down), **extra, **options)


# --- the charging team, and a store that dies at a chosen commit -----------------------------------


def charging_registry(effects: str, slow_s: float = 0.0) -> dict[str, AgentDef]:
    def charge(args: dict[str, Any], ctx: Any) -> Any:
        time.sleep(slow_s)  # a window for a random kill to land in: the test's own scenario time
        append(effects, f"charged {args['order']} {ctx.idempotency_key}")
        return f"charged {args['order']}"

    schema = {"type": "object", "properties": {"order": {"type": "string"}}, "required": ["order"]}
    worker = AgentDef("worker", "charges orders", model="m-worker", tools=[Tool("charge", "charge an order", schema, charge)])
    lead = AgentDef("lead", "delegates", model="m-lead", team=("worker",))
    return {"lead": lead, "worker": worker}


def charging_model(slow_s: float = 0.0) -> ScriptedModel:
    def lead(request: dict[str, Any]) -> dict[str, Any]:
        time.sleep(slow_s)
        found = tool_messages(request)
        if found:
            return {"content": f"lead: {found[-1]}"}
        return {"tool_calls": [{"id": "call_task", "name": "task", "arguments": {"agent": "worker", "prompt": "charge A-1"}}]}

    def worker(request: dict[str, Any]) -> dict[str, Any]:
        time.sleep(slow_s)
        if tool_messages(request):
            return {"content": "charged"}
        return {"tool_calls": [{"id": "call_charge", "name": "charge", "arguments": {"order": "A-1"}}]}

    return ScriptedModel({"m-lead": lead, "m-worker": worker}, usage=USAGE)


class DyingStore:
    """A state store that SIGKILLs its process at one commit: the first transaction that
    writes the row of ``child`` dies right before its COMMIT (``before``) or right after
    it (``after``). Everything else is the wrapped store's."""

    def __init__(self, inner: Any, child: str, when: str) -> None:
        self._inner = inner
        self._child = child
        self._when = when
        self._depth = 0
        self._armed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def execute(self, sql: str, params: Any = ()) -> Any:
        if sql.startswith("INSERT INTO tn_handles") and len(params) > 1 and params[1] == self._child:
            self._armed = True
        return self._inner.execute(sql, params)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[None]:
        self._depth += 1
        try:
            with self._inner.transaction():
                yield
                if self._depth == 1 and self._armed and self._when == "before":
                    os.kill(os.getpid(), signal.SIGKILL)
        finally:
            self._depth -= 1
        if self._depth == 0 and self._armed and self._when == "after":
            os.kill(os.getpid(), signal.SIGKILL)


def charging_runtime(state: Any, runtime_id: str, effects: str, slow_s: float = 0.0, **options: Any) -> Runtime:
    return Runtime(charging_registry(effects, slow_s), generate=charging_model(slow_s), state=state, runtime_id=runtime_id, **options)


# --- the commands a test runs in a child process ---------------------------------------------------


def _main(argv: list[str]) -> None:
    command, state, runtime_id, effects = argv[:4]
    if command == "pending":  # the writing team, to its approval; then die without letting go
        calls = argv[4]
        rt = writing_runtime(state, runtime_id, effects, calls)
        result = rt.run_agent("lead", "write and publish the launch note")
        print(json.dumps({"status": result.status, "handle": result.handle_id, "pending": to_wire(result.pending)}), flush=True)
        os._exit(0)
    if command == "die-in-task":  # the charging team, killed at one commit of the lead's task call
        when = argv[4]
        store = DyingStore(open_state(state), "root/lead.1/worker.1", when)
        rt = charging_runtime(store, runtime_id, effects)
        lead = rt.spawn(rt.root, "lead")
        rt.wake(lead, "charge order A-1")
        result = rt.wait(lead, timeout=30)
        print(json.dumps({"survived": result.status}), flush=True)
        os._exit(3)
    if command == "charge":  # the charging team, slowed down, until it is killed
        slow_s = float(argv[4])
        rt = charging_runtime(state, runtime_id, effects, slow_s)
        lead = rt.spawn(rt.root, "lead")
        rt.wake(lead, "charge order A-1")
        print(json.dumps({"woken": lead.id}), flush=True)  # the killer counts its delay from here
        result = rt.wait(lead, timeout=30)
        print(json.dumps({"status": result.status}), flush=True)
        os._exit(0)
    if command == "watch":  # open the tree for a while and report whether it took a turn over
        seconds, lease = float(argv[4]), float(argv[5])
        registry = {**charging_registry(effects), "slow": AgentDef("slow", "holds", model="m-slow")}
        rt = Runtime(registry, generate=charging_model(), state=state, runtime_id=runtime_id, lease=lease)
        time.sleep(seconds)  # the scenario: this runtime's heartbeat sweeps a few times meanwhile
        recovered = [e for e in rt.events() if e["event"] == "recovered"]
        print(json.dumps({"recovered": recovered}), flush=True)
        rt.release()
        return
    raise SystemExit(f"unknown command {command}")


if __name__ == "__main__":
    _main(sys.argv[1:])
