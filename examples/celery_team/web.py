"""The web side: a Flask app that starts and answers runs and returns at once.

    POST /runs               {"prompt": "..."}   202 {"run", "status": "running"}
    GET  /runs/<run>[?wait=S]                    the run's tree and, once settled, its result
                                                 (waits up to S seconds for it to settle)
    POST /runs/<run>/answer  {"id", "ok"}         202: the answer is accepted, the run goes on
                                                 409: not the pending request (nothing changes)

The turns run on the Celery workers; this process only commits them as queued, sends
their messages and reads the shared state. Any web process (and host) may answer or read
a run another one started.

    flask --app web:create_app run -p 8000       (from this folder)
    gunicorn -w 2 -b 127.0.0.1:8000 "web:create_app()"
"""

from __future__ import annotations

import atexit
from typing import Any

from flask import Flask, jsonify, request

from team import ENTRY, make_runtime  # first: it puts examples/ on the path

from flask_approval import posted_prompt  # noqa: E402
from toolnexus import Answer, HandleView, Runtime, ToolnexusError, UnknownHandle, UnknownRequest, WireError
from toolnexus.wire import from_wire, to_wire

_RUN_PREFIX = "root/"
_MAX_WAIT_S = 30.0


def create_app() -> Flask:
    rt = make_runtime()
    atexit.register(rt.release)  # the runs stay in the state for every other process
    app = Flask(__name__)
    app.extensions["toolnexus"] = rt

    def handle_of(run_id: str) -> str | None:
        if "/" in run_id:
            return None
        try:
            rt.inspect(_RUN_PREFIX + run_id)
        except UnknownHandle:
            return None
        return _RUN_PREFIX + run_id

    @app.post("/runs")
    def start_run() -> Any:
        prompt = posted_prompt()
        if prompt is None:
            return jsonify({"error": 'send JSON {"prompt": "..."}'}), 400
        handle = rt.spawn(rt.root, ENTRY)
        rt.wake(handle, prompt)  # committed as queued; a worker runs it
        run_id = handle.id.removeprefix(_RUN_PREFIX)
        return jsonify({"run": run_id, "status": "running"}), 202, {"Location": f"/runs/{run_id}"}

    @app.get("/runs/<run_id>")
    def show_run(run_id: str) -> Any:
        handle = handle_of(run_id)
        if handle is None:
            return jsonify({"error": f"no run {run_id!r}"}), 404
        wait_s = min(max(request.args.get("wait", 0.0, type=float), 0.0), _MAX_WAIT_S)
        result = rt.wait(handle, timeout=wait_s)
        view = rt.inspect(handle)
        tree = [to_wire(each) for each in subtree(rt, handle)]
        body: dict[str, Any] = {"run": run_id, "status": "running" if result.status == "timeout" else result.status, "tree": tree}
        if result.status != "timeout":
            body["result"] = to_wire(result)
        if view.pending is not None:
            body["pending"] = to_wire(view.pending)
        return jsonify(body)

    @app.post("/runs/<run_id>/answer")
    def answer_run(run_id: str) -> Any:
        handle = handle_of(run_id)
        if handle is None:
            return jsonify({"error": f"no run {run_id!r}"}), 404
        try:
            answer = from_wire(Answer, request.get_json(silent=True))
        except WireError as exc:
            return jsonify({"error": str(exc)}), 400
        pending = rt.inspect(handle).pending
        if pending is None or pending.id != answer.id:
            return jsonify({"error": f"run {run_id} is not waiting for request {answer.id!r}"}), 409
        try:
            rt.resume(answer)  # exactly one answer per request wins, across processes
        except UnknownRequest as exc:
            return jsonify({"error": str(exc)}), 409
        except ToolnexusError as exc:
            return jsonify({"error": str(exc)}), 503
        return jsonify({"run": run_id, "status": "running"}), 202, {"Location": f"/runs/{run_id}"}

    return app


def subtree(rt: Runtime, handle_id: str) -> list[HandleView]:
    """The run's handle and its descendants, parents first."""
    view = rt.inspect(handle_id)
    return [view] + [each for child in view.children for each in subtree(rt, child)]
