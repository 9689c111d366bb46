"""Shared test scaffolding: reply builders for the in-process model (``generate=``), scripted
model steps, a suspending tool and small runtime builders.

Test modules import what they use, e.g. ``from _helpers import HANG, call, calls, text``
(``tests/`` is on ``sys.path`` the same way as for ``from conftest import run_in_thread``).
The ``cleanup`` fixture that the runtime builders take lives in ``conftest.py``.
"""

from __future__ import annotations

import copy
import threading

from toolnexus import AgentDef, Client, Tool, make_request, suspend
from toolnexus.testing import ScriptedModel, last_user_text, tool_messages

HANG = 10.0  # seconds: anything that takes longer than this is hung
EMPTY_SCHEMA = {"type": "object", "properties": {}}


# --- replies of the in-process model ---------------------------------------------------------------


def text(content, usage=None):
    """A final-text reply, with ``usage`` when given."""
    reply = {"content": content}
    if usage:
        reply["usage"] = usage
    return reply


def calls(*items, usage=None):
    """A reply asking for the tool calls ``items`` (see :func:`call`), with ``usage`` when given."""
    reply = {"tool_calls": list(items)}
    if usage:
        reply["usage"] = usage
    return reply


def call(cid, name, arguments=None):
    """One tool call; ``arguments`` (a dict, or a raw JSON string) defaults to ``{}``."""
    return {"id": cid, "name": name, "arguments": {} if arguments is None else arguments}


def task(cid, agent, prompt):
    """One ``task`` call delegating ``prompt`` to ``agent``."""
    return call(cid, "task", {"agent": agent, "prompt": prompt})


# --- scripted models ---------------------------------------------------------------------------------


class Script:
    """A thread-safe in-process model that replies from a list and records every request."""

    def __init__(self, *replies):
        self._replies = list(replies)
        self._lock = threading.Lock()
        self.requests = []

    def __call__(self, request):
        with self._lock:
            self.requests.append(copy.deepcopy(request))
            return self._replies.pop(0)


def make_client(script, **options):
    """A ``Client`` for model ``m`` answered in-process by ``script``."""
    return Client(model="m", generate=script, **options)


class Gate:
    """A model step that blocks (ignoring cancellation) until released; ``entered`` is set when
    the call arrives."""

    def __init__(self, answer):
        self.answer = answer
        self.entered = threading.Event()
        self.release = threading.Event()

    def __call__(self, request):
        self.entered.set()
        self.release.wait(HANG)
        return self.answer


class Recorder:
    """A model step that records the last user text of every call (``inputs``), then echoes it."""

    def __init__(self):
        self.lock = threading.Lock()
        self.inputs = []

    def record(self, request):
        """Record ``request``'s last user text; return it and how many calls came before this one."""
        said = last_user_text(request)
        with self.lock:
            self.inputs.append(said)
            return said, len(self.inputs) - 1

    def __call__(self, request):
        said, _ = self.record(request)
        return text("echo:" + said)


# --- a tool that suspends ----------------------------------------------------------------------------


class Asker:
    """A tool that suspends until answered, then completes with the answer's data."""

    def __init__(self):
        self.requests = []

    def execute(self, args, ctx):
        if ctx.answer is None:
            request = make_request("approval", "may I?")
            self.requests.append(request)
            return suspend(request)
        return f"approved:{ctx.answer.data}"

    def tool(self):
        return Tool("ask", "Asks a human.", EMPTY_SCHEMA, self.execute)


def asker_step(request):
    """The model of an agent with the ``ask`` tool: call it once, then report what it said."""
    found = tool_messages(request)
    return text("finished:" + ",".join(found)) if found else calls(call("c1", "ask"))


def spawn_pending(rt, name="asker", prompt="go"):
    """Spawn ``name`` under the root and wake it with ``prompt``; its turn must stop pending."""
    h = rt.spawn(rt.root, name)
    rt.wake(h, prompt)
    assert rt.wait(h, timeout=HANG).status == "pending"
    return h


# --- runtimes (closed by the ``cleanup`` fixture) ----------------------------------------------------


def asker_runtime(cleanup, asker, **options):
    """A runtime with one agent ``asker`` whose ``ask`` tool is ``asker``'s, driven by ``asker_step``."""
    registry = {"asker": AgentDef("asker", "Asks.", model="asker", tools=[asker.tool()])}
    return cleanup.runtime(registry, generate=ScriptedModel({"asker": asker_step}), **options)


def gated_runtime(cleanup, step, **options):
    """A runtime with one agent ``slow`` whose model is ``step`` (typically a :class:`Gate`)."""
    return cleanup.runtime({"slow": AgentDef("slow", "Slow.", model="slow")}, generate=ScriptedModel({"slow": step}), **options)
