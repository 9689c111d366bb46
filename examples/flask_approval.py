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
spends no tokens until the answer arrives. One ``Runtime`` per app, closed at exit (or
call ``app.extensions["toolnexus"].close()``).

Self-check (scripted model, offline):   python examples/flask_approval.py
Against a real OpenAI-compatible endpoint:
    flask --app "examples/flask_approval:create_app(base_url='http://localhost:11434/v1', model='llama3.1')" run
"""

from __future__ import annotations

import atexit
import threading
import uuid
from typing import Any, Callable

import attrs
from flask import Flask, jsonify, request

from toolnexus import (
    AgentDef,
    AgentResult,
    Answer,
    Request,
    Runtime,
    ToolContext,
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


@attrs.define
class Run:
    handle_id: str
    result: AgentResult
    answering: bool = False

    @property
    def pending(self) -> Request | None:
        return self.result.pending if self.result.status == "pending" else None


class Runs:
    """The app's one Runtime and the runs it started, by run id."""

    def __init__(self, rt: Runtime, entry: str) -> None:
        self.rt = rt
        self.entry = entry
        self._lock = threading.Lock()  # guards: _runs and each Run's fields
        self._runs: dict[str, Run] = {}
        self._closed = False

    def start(self, prompt: str) -> tuple[str, Run]:
        result = self.rt.run_agent(self.entry, prompt)  # blocks this request's thread
        run_id = f"run_{uuid.uuid4().hex[:12]}"
        run = Run(handle_id=result.handle_id, result=result)
        with self._lock:
            self._runs[run_id] = run
        return run_id, run

    def get(self, run_id: str) -> Run | None:
        with self._lock:
            return self._runs.get(run_id)

    def claim(self, run_id: str, answer: Answer) -> tuple[int, dict[str, Any]] | Run:
        """Check the answer against the run's own pending request and mark it in hand."""
        with self._lock:
            run = self._runs.get(run_id)
            if run is None:
                return 404, {"error": f"no run {run_id!r}"}
            if run.pending is None or run.answering:
                return 409, {"error": f"run {run_id} is not waiting for an answer", "status": run.result.status}
            if answer.id != run.pending.id:
                return 409, {"error": f"answer {answer.id!r} does not match the pending request {run.pending.id!r}", "pending": to_wire(run.pending)}
            run.answering = True
            return run

    def answer(self, run: Run, answer: Answer) -> Run:
        try:
            self.rt.resume(answer)
            result = self.rt.wait(run.handle_id)
        except BaseException:
            with self._lock:
                run.answering = False
            raise
        if result.status != "pending":
            self.rt.close(run.handle_id)
        with self._lock:
            run.result, run.answering = result, False
        return run

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self.rt.close(self.rt.root)
        atexit.unregister(self.close)


def _reply(run_id: str, run: Run) -> Any:
    if run.pending is not None:
        body = {"run": run_id, "status": "pending", "pending": to_wire(run.pending)}
        return jsonify(body), 202, {"Location": f"/runs/{run_id}"}
    return jsonify({"run": run_id, "status": run.result.status, "result": to_wire(run.result)}), 200


def create_app(
    generate: Callable[[dict[str, Any]], Any] | None = None,
    base_url: str | None = None,
    *,
    model: str = "gpt-4o-mini",
    api_key: str | None = None,
    registry: dict[str, Any] | None = None,
    entry: str = "support",
    **runtime_options: Any,
) -> Flask:
    """The app; give ``generate`` (an in-process model) or ``base_url`` (an endpoint)."""
    rt = Runtime(registry or TEAM, generate=generate, base_url=base_url, model=model, api_key=api_key, **runtime_options)
    runs = Runs(rt, entry)
    atexit.register(runs.close)
    app = Flask(__name__)
    app.extensions["toolnexus"] = runs

    @app.post("/runs")
    def start_run() -> Any:
        body = request.get_json(silent=True)
        prompt = body.get("prompt") if isinstance(body, dict) else None
        if not isinstance(prompt, str) or not prompt.strip():
            return jsonify({"error": 'send JSON {"prompt": "..."}'}), 400
        run_id, run = runs.start(prompt)
        return _reply(run_id, run)

    @app.post("/runs/<run_id>/answer")
    def answer_run(run_id: str) -> Any:
        try:
            answer = from_json(Answer, request.get_data())  # strict: no NaN, no deep nesting
        except WireError as exc:
            return jsonify({"error": str(exc)}), 400
        claimed = runs.claim(run_id, answer)
        if not isinstance(claimed, Run):
            status, body = claimed
            return jsonify(body), status
        try:
            run = runs.answer(claimed, answer)
        except UnknownRequest as exc:  # cancelled meanwhile (e.g. interrupted)
            return jsonify({"error": str(exc)}), 409
        return _reply(run_id, run)

    @app.get("/runs/<run_id>")
    def show_run(run_id: str) -> Any:
        run = runs.get(run_id)
        if run is None:
            return jsonify({"error": f"no run {run_id!r}"}), 404
        return _reply(run_id, run)

    return app


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
        assert client.post("/runs/run_nope/answer", json={"id": "x", "ok": True}).status_code == 404
    finally:
        app.extensions["toolnexus"].close()
    print(f"  {result['text']}")
    print("OK flask approval flow: 202 pending -> 409 wrong id -> 200 done")


if __name__ == "__main__":
    self_check()
