"""A Flask app with a durable approval flow: an agent team runs inline in the view.

    POST /runs               {"prompt": "..."}
        200 {"run", "status": "done", "result": AgentResult}      finished right away
        202 {"run", "status": "pending", "pending": Request}      a person must answer
    POST /runs/<run>/answer  {"id": <request id>, "ok": true|false, "reason"?: "declined"}
        200 {"run", "status", "result": AgentResult}              resumed and finished
        202 {"run", "status": "pending", "pending": Request}      it asks again
        409 the answer does not match the pending request (nothing changes; answer again)
        404 no such run
    GET  /runs/<run>         where the run stands

No event loop, no background queue: the view calls ``Runtime.run_agent`` and blocks its
worker thread until the team settles or suspends. A suspended team holds no thread and
spends no tokens until the answer arrives.

With ``state="runs.db"`` (a SQLite file, or a ``postgresql://`` URL) the runs live in the
state, not in the process: a run id is its handle's place in the stored tree, so any
worker process of a multi-process server can answer a run another one started, and a
pending run survives a restart. Each worker builds its own ``Runtime`` (gunicorn calls the
factory after fork) and lets go of the tree at exit.

Self-check (scripted model, offline):   python examples/flask_approval.py
Several worker processes, offline:
    gunicorn -w 2 --chdir examples "flask_approval:offline_app('runs.db')"
Against a real OpenAI-compatible endpoint:
    flask --app "examples/flask_approval:create_app(base_url='http://localhost:11434/v1', model='llama3.1', state='runs.db')" run
"""

from __future__ import annotations

import atexit
import os
import threading
from typing import Any, Callable

from flask import Flask, jsonify, request

from toolnexus import (
    AgentDef,
    AgentResult,
    Answer,
    Runtime,
    ToolContext,
    UnknownHandle,
    UnknownRequest,
    WireError,
    make_request,
    success,
    suspend,
    tool,
)
from toolnexus.testing import ScriptedModel, last_user_text, tool_messages
from toolnexus.wire import from_json, to_wire


@tool
def issue_refund(order_id: str, amount: float, ctx: ToolContext):
    """Refund an order. Every refund needs a person's approval."""
    if ctx.answer is None:
        return suspend(make_request("approval", f"Refund {amount:.2f} EUR on order {order_id}?", data={"order_id": order_id, "amount": amount}))
    return success(f"refunded {amount:.2f} EUR on order {order_id}", order_id=order_id)


TEAM = {
    "support": AgentDef(
        "support",
        "Answers customers; hands refunds to billing",
        soul="You answer customer emails. Delegate refunds to billing with the task tool.",
        team=("billing",),
    ),
    "billing": AgentDef("billing", "Issues refunds", soul="You issue refunds with the issue_refund tool.", tools=(issue_refund,)),
}

_RUN_PREFIX = "root/"


class Runs:
    """The app's one Runtime; a run is a handle under its root, found by id in the tree."""

    def __init__(self, rt: Runtime, entry: str, durable: bool) -> None:
        self.rt = rt
        self.entry = entry
        self._durable = durable
        self._lock = threading.Lock()  # guards: _closed
        self._closed = False

    def start(self, prompt: str) -> tuple[str, AgentResult]:
        result = self.rt.run_agent(self.entry, prompt)  # blocks this request's thread
        return result.handle_id.removeprefix(_RUN_PREFIX), result

    def get(self, run_id: str) -> AgentResult | None:
        """The run's latest result, or ``None`` for an unknown run."""
        if "/" in run_id:
            return None
        try:
            return self.rt.wait(_RUN_PREFIX + run_id, timeout=0)
        except UnknownHandle:
            return None

    def answer(self, run_id: str, answer: Answer) -> tuple[int, dict[str, Any]] | AgentResult:
        """Resume the run with ``answer`` if it is the one its pending request waits for."""
        handle = _RUN_PREFIX + run_id
        latest = self.get(run_id)
        if latest is None:
            return 404, {"error": f"no run {run_id!r}"}
        pending = self.rt.inspect(handle).pending
        if pending is None:
            return 409, {"error": f"run {run_id} is not waiting for an answer", "status": latest.status}
        if answer.id != pending.id:
            return 409, {"error": f"answer {answer.id!r} does not match the pending request {pending.id!r}", "pending": to_wire(pending)}
        try:
            self.rt.resume(answer)  # exactly one resume per request wins, across processes
        except UnknownRequest as exc:
            return 409, {"error": str(exc)}
        result = self.rt.wait(handle)
        if result.status != "pending":
            self.rt.close(handle)
        return result

    def close(self) -> None:
        """Let go at exit: a durable tree stays for the other workers; a memory one closes."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self._durable:
            self.rt.release()
        else:
            self.rt.close(self.rt.root)
        atexit.unregister(self.close)


def posted_prompt() -> str | None:
    """The request's JSON ``{"prompt": "..."}``, or ``None`` when it has no usable prompt."""
    body = request.get_json(silent=True)
    prompt = body.get("prompt") if isinstance(body, dict) else None
    return prompt if isinstance(prompt, str) and prompt.strip() else None


def _reply(run_id: str, result: AgentResult) -> Any:
    headers = {"X-Served-By": str(os.getpid())}
    if result.status == "pending" and result.pending is not None:
        body = {"run": run_id, "status": "pending", "pending": to_wire(result.pending)}
        return jsonify(body), 202, {"Location": f"/runs/{run_id}", **headers}
    return jsonify({"run": run_id, "status": result.status, "result": to_wire(result)}), 200, headers


def create_app(
    generate: Callable[[dict[str, Any]], Any] | None = None,
    base_url: str | None = None,
    *,
    model: str = "gpt-4o-mini",
    api_key: str | None = None,
    registry: dict[str, Any] | None = None,
    entry: str = "support",
    state: str | None = None,
    **runtime_options: Any,
) -> Flask:
    """The app; give ``generate`` (an in-process model) or ``base_url`` (an endpoint), and a
    ``state`` to keep runs across processes and restarts."""
    if state is not None:
        runtime_options["state"] = state
    rt = Runtime(registry or TEAM, generate=generate, base_url=base_url, model=model, api_key=api_key, **runtime_options)
    runs = Runs(rt, entry, durable=state is not None)
    atexit.register(runs.close)
    app = Flask(__name__)
    app.extensions["toolnexus"] = runs

    @app.post("/runs")
    def start_run() -> Any:
        prompt = posted_prompt()
        if prompt is None:
            return jsonify({"error": 'send JSON {"prompt": "..."}'}), 400
        run_id, result = runs.start(prompt)
        return _reply(run_id, result)

    @app.post("/runs/<run_id>/answer")
    def answer_run(run_id: str) -> Any:
        try:
            answer = from_json(Answer, request.get_data())  # strict: no NaN, no deep nesting
        except WireError as exc:
            return jsonify({"error": str(exc)}), 400
        outcome = runs.answer(run_id, answer)
        if not isinstance(outcome, AgentResult):
            status, body = outcome
            return jsonify(body), status
        return _reply(run_id, outcome)

    @app.get("/runs/<run_id>")
    def show_run(run_id: str) -> Any:
        result = runs.get(run_id)
        if result is None:
            return jsonify({"error": f"no run {run_id!r}"}), 404
        return _reply(run_id, result)

    return app


def offline_app(state: str) -> Flask:
    """The app on the scripted model, runs kept in ``state``: for a multi-process server."""
    return create_app(generate=scripted_model(), state=state)


def scripted_model() -> ScriptedModel:
    """An offline stand-in for the model: refunds go to billing, anything else is answered."""

    def support(request: dict[str, Any]) -> dict[str, Any]:
        results = tool_messages(request)
        if results:
            return {"content": f"Dear customer, {results[-1]}."}
        if "refund" not in last_user_text(request).lower():
            return {"content": "Dear customer, thanks for writing; no action was needed."}
        prompt = "Refund order A-1001 (19.90 EUR)"
        return {"tool_calls": [{"id": "call_task", "name": "task", "arguments": {"agent": "billing", "prompt": prompt}}]}

    def billing(request: dict[str, Any]) -> dict[str, Any]:
        results = tool_messages(request)
        if results:
            return {"content": results[-1]}
        return {"tool_calls": [{"id": "call_refund", "name": "issue_refund", "arguments": {"order_id": "A-1001", "amount": 19.9}}]}

    def route(request: dict[str, Any]) -> dict[str, Any]:
        tools = {t["function"]["name"] for t in request["tools"]}
        return support(request) if "task" in tools else billing(request)

    return ScriptedModel({"gpt-4o-mini": route}, usage={"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60})


def self_check() -> None:
    app = create_app(generate=scripted_model())
    client = app.test_client()
    try:
        started = client.post("/runs", json={"prompt": "Please refund my order A-1001."})
        assert started.status_code == 202, started.get_json()
        run, pending = started.get_json()["run"], started.get_json()["pending"]
        assert pending["kind"] == "approval" and pending["data"]["path"][0] == "root"

        wrong = client.post(f"/runs/{run}/answer", json={"id": "req_wrong", "ok": True})
        assert wrong.status_code == 409, wrong.get_json()

        done = client.post(f"/runs/{run}/answer", json={"id": pending["id"], "ok": True})
        assert done.status_code == 200, done.get_json()
        result = done.get_json()["result"]
        assert result["status"] == "done" and "refunded 19.90 EUR" in result["text"], result

        quick = client.post("/runs", json={"prompt": "Where is my parcel?"})
        assert quick.status_code == 200 and quick.get_json()["status"] == "done"
        assert client.post("/runs/nope.1/answer", json={"id": "x", "ok": True}).status_code == 404
    finally:
        app.extensions["toolnexus"].close()
    print(f"  {result['text']}")
    print("OK flask approval flow: 202 pending -> 409 wrong id -> 200 done")


if __name__ == "__main__":
    self_check()
