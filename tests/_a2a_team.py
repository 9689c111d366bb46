"""The team the A2A tests serve, in this process and under gunicorn
(``_a2a_team:app('STATE')`` builds the WSGI app of each worker process on that SQLite state).

``lead`` reads the first word of its prompt: ``ask ...`` delegates to ``asker``, whose
``approve`` tool suspends on an approval (``{"amount": 5}``) until answered; ``wait`` calls
a tool that blocks until the run is interrupted (at most ``WAIT_S``); ``break`` makes the
model fail; anything else is answered at once (``lead heard: <prompt>``).

Callers authenticate with ``Authorization: Bearer <name>`` for the names in ``USERS``;
every answer says which process served it (``X-Served-By``).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from toolnexus import AgentDef, Runtime, Tool, make_request, suspend  # noqa: E402
from toolnexus import a2a  # noqa: E402
from toolnexus.testing import ScriptedModel, last_user_text, tool_messages  # noqa: E402

USERS = ("alice", "bob")
#: The longest a ``wait`` run blocks in its tool when nothing interrupts it.
WAIT_S = 30.0
USAGE = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}


def registry(runtime: Callable[[], Runtime] | None = None) -> dict[str, AgentDef]:
    """The team; ``runtime`` (the runtime the team runs on) lets ``hold`` also see an
    interrupt made by another process, which sets no event here."""

    def approve(args: dict[str, Any], ctx: Any) -> Any:
        if ctx.answer is None:
            return suspend(make_request("approval", "ship it?", data={"amount": 5}))
        return f"approved with {ctx.answer.data}"

    def hold(args: dict[str, Any], ctx: Any) -> Any:
        deadline = time.monotonic() + WAIT_S
        while not ctx.cancelled.wait(0.1) and time.monotonic() < deadline:
            if runtime is not None and runtime().inspect(ctx.handle_id).state != "running":
                break  # interrupted by another process
        return "held"

    return {
        "lead": AgentDef("lead", "answers, or asks asker to ship", model="m-lead", team=("asker", "worker"),
                         tools=[Tool("hold", "wait until stopped", None, hold)]),
        "asker": AgentDef("asker", "asks for approval before shipping", model="m-asker",
                          tools=[Tool("approve", "ask a person", None, approve)]),
        "worker": AgentDef("worker", "does small jobs", model="m-worker"),
    }


def lead(request: dict[str, Any]) -> dict[str, Any]:
    prompt = last_user_text(request)
    results = tool_messages(request)
    if results:
        return {"content": f"lead: {results[-1]}"}
    word = prompt.split(None, 1)[0] if prompt.strip() else ""
    if word == "ask":
        return {"tool_calls": [{"id": "t1", "name": "task", "arguments": {"agent": "asker", "prompt": prompt}}]}
    if word == "wait":
        return {"tool_calls": [{"id": "h1", "name": "hold", "arguments": {}}]}
    if word == "break":
        raise RuntimeError("the model broke")
    return {"content": f"lead heard: {prompt}"}


def asker(request: dict[str, Any]) -> dict[str, Any]:
    results = tool_messages(request)
    if results:
        return {"content": f"asker: {results[-1]}"}
    return {"tool_calls": [{"id": "a1", "name": "approve", "arguments": {}}]}


def model() -> ScriptedModel:
    return ScriptedModel({"m-lead": lead, "m-asker": asker, "m-worker": lambda r: {"content": "ok"}}, usage=USAGE)


def bearer(request: Any) -> str | None:
    """The caller named by ``Authorization: Bearer <name>`` (a WSGI environ, or a
    framework's request), when it is one of ``USERS``."""
    if isinstance(request, dict):
        header = request.get("HTTP_AUTHORIZATION", "")
    else:
        header = request.headers.get("Authorization", "")
    scheme, _, name = header.partition(" ")
    return name if scheme == "Bearer" and name in USERS else None


def per_process(build: Callable[[], Runtime]) -> Callable[[], Runtime]:
    """A runtime built on first use in each process (after gunicorn forks its workers)."""
    lock = threading.Lock()
    held: dict[int, Runtime] = {}

    def runtime() -> Runtime:
        with lock:
            if os.getpid() not in held:
                held[os.getpid()] = build()
            return held[os.getpid()]

    return runtime


def app(state: str | None) -> Any:
    """The WSGI app of one gunicorn worker: ``lead`` over A2A on the SQLite ``state`` (in
    each process's memory with ``None``)."""
    runtime = per_process(lambda: Runtime(registry(runtime), generate=model(), state=state))
    served = a2a.wsgi_app(runtime, agent="lead", authorize=bearer)

    def wsgi(environ: dict[str, Any], start_response: Any) -> Any:
        def start(status: str, headers: list[tuple[str, str]], *rest: Any) -> Any:
            return start_response(status, [*headers, ("X-Served-By", str(os.getpid()))], *rest)

        return served(environ, start)

    return wsgi
