"""A Flask app with a durable approval flow, on ``toolnexus.flask`` (the extension builds
the app's one runtime per process; its blueprint has the routes):

    POST /runs?wait=5        {"prompt": "..."}
        200 {"run", "status": "pending", "pending": Request, "result", "tree"}   a person must answer
        200 {"run", "status": "done", "result": AgentResult, "tree"}            finished right away
    GET  /runs/<run>?wait=S  where the run stands (202 while it still runs)
    POST /runs/<run>/answer  {"id": <request id>, "ok": true|false, "reason"?: "declined"}
        202 the answer is taken and the run goes on (read it with GET ?wait=)
        409 the answer does not match the pending request, or another one won (nothing changes)
        404 no such run; 400 a body that is not an Answer
    GET  /runs/<run>/events  the run's events as Server-Sent Events

The routes are the app's to guard: ``create_app(authorize=...)`` is called inside every
request and returns the caller's principal (here, whoever the app's login says it is), or
``None`` to refuse with 401. A run belongs to whoever started it: its id is random, and
anyone else gets 404 for it on every route. Bodies must be ``application/json`` (else 415).

No event loop: the team runs on the runtime's worker threads, the view waits on it
(``?wait=``) and returns. A suspended team holds no thread and spends no tokens until the
answer arrives.

With ``state="runs.db"`` (a SQLite file, or a ``postgresql://`` URL) the runs live in the
state, not in the process (its id and owner too), so any worker process of a
multi-process server can answer a run another one started, and a pending run survives a
restart. Each worker builds its own ``Runtime`` (after gunicorn's
fork, on its first request) and lets go of the tree at exit.

Self-check (scripted model, offline):   python examples/flask_approval.py
Several worker processes, offline (``offline_app`` is open to anyone: ``public=True``):
    gunicorn -w 2 --chdir examples "flask_approval:offline_app('/tmp/toolnexus-runs.db')"
Against a real OpenAI-compatible endpoint, behind the app's login (here a made-up header
check; use your app's session or token check):
    flask --app "examples/flask_approval:create_app(base_url='http://localhost:11434/v1', model='llama3.1',
                 state='/tmp/toolnexus-runs.db', authorize=flask_approval.signed_in)" run
"""

from __future__ import annotations

import os
from typing import Any, Callable

from flask import Flask, session

from toolnexus import AgentDef, ToolContext, make_request, success, suspend, tool
from toolnexus.flask import Toolnexus
from toolnexus.testing import ScriptedModel, last_user_text, tool_messages


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

def signed_in() -> str | None:
    """The principal of a request: the user the app's login put in its session (``None``,
    not signed in: 401)."""
    user = session.get("user")
    return user if isinstance(user, str) and user else None


def create_app(
    generate: Callable[[dict[str, Any]], Any] | None = None,
    base_url: str | None = None,
    *,
    model: str = "gpt-4o-mini",
    api_key: str | None = None,
    registry: dict[str, Any] | None = None,
    entry: str = "support",
    state: str | None = None,
    authorize: Callable[[], str | None] | None = None,
    public: bool = False,
    **runtime_options: Any,
) -> Flask:
    """The app; give ``generate`` (an in-process model) or ``base_url`` (an endpoint), a
    ``state`` to keep runs across processes and restarts, and ``authorize`` (who asks; the
    routes refuse to start without it unless ``public=True``)."""
    if state is not None:
        runtime_options["state"] = state
    app = Flask(__name__)
    Toolnexus(
        app, registry=registry or TEAM, entry=entry, generate=generate, base_url=base_url, model=model, api_key=api_key,
        authorize=authorize, public=public, **runtime_options,
    )

    @app.after_request
    def served_by(response: Any) -> Any:
        response.headers["X-Served-By"] = str(os.getpid())  # which worker process answered
        return response

    return app


def offline_app(state: str) -> Flask:
    """The app on the scripted model, runs kept in ``state``: for a multi-process server.
    A self-check with no key and no real model, so it is open: ``public=True`` (anyone who
    can reach it can start, read and answer every run). Never deploy it as it is."""
    return create_app(generate=scripted_model(), state=state, public=True)


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
    app = create_app(generate=scripted_model(), public=True)  # offline, in this process only
    client = app.test_client()
    try:
        started = client.post("/runs?wait=5", json={"prompt": "Please refund my order A-1001."})
        assert started.status_code == 200 and started.get_json()["status"] == "pending", started.get_json()
        run, pending = started.get_json()["run"], started.get_json()["pending"]
        assert pending["kind"] == "approval" and pending["data"]["path"][0] == "root"

        wrong = client.post(f"/runs/{run}/answer", json={"id": "req_wrong", "ok": True})
        assert wrong.status_code == 409, wrong.get_json()

        accepted = client.post(f"/runs/{run}/answer", json={"id": pending["id"], "ok": True})
        assert accepted.status_code == 202, accepted.get_json()
        done = client.get(f"/runs/{run}?wait=5")
        result = done.get_json()["result"]
        assert result["status"] == "done" and "refunded 19.90 EUR" in result["text"], result

        quick = client.post("/runs?wait=5", json={"prompt": "Where is my parcel?"})
        assert quick.status_code == 200 and quick.get_json()["status"] == "done"
        assert client.post("/runs/nope.1/answer", json={"id": "x", "ok": True}).status_code == 404
    finally:
        with app.app_context():
            app.extensions["toolnexus"].let_go()
    print(f"  {result['text']}")
    print("OK flask approval flow: pending -> 409 wrong id -> 202 accepted -> done")


if __name__ == "__main__":
    self_check()
