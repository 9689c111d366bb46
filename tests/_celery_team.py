"""A Celery app and a small team for the Celery tests, shared by the test process (the
"web" side) and the worker subprocesses the tests start (``celery -A _celery_team worker``).

Settings come from environment variables (``TN_CELERY_*``), so each test runs its own tree
on its own queue. Every model call appends ``<agent> <pid>`` to the calls file, so a test
counts calls across processes. With the arm file present, the boss's second model call
hangs once (after writing its pid to the hang file): the point where a test kills the
worker that runs it.

Agents: ``boss`` delegates ``help`` to ``helper``; ``a1`` … ``a8`` each delegate to the next.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable, Mapping

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from celery import Celery  # noqa: E402

from toolnexus import AgentDef, Budget, Runtime  # noqa: E402
from toolnexus.celery import RECOMMENDED_SETTINGS, CeleryDispatcher, install  # noqa: E402
from toolnexus.testing import ScriptedModel, tool_messages  # noqa: E402

CHAIN = 8
HANG_S = 60.0


def _append(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as out:
        out.write(line + "\n")


def calls(path: str) -> list[str]:
    """The agents whose model was called, in order (``<agent> <pid>`` lines)."""
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [line.split()[0] for line in f if line.strip()]


def registry() -> dict[str, AgentDef]:
    team = {
        "boss": AgentDef("boss", "delegates", model="m-boss", team=("helper",)),
        "helper": AgentDef("helper", "helps", model="m-helper"),
    }
    for level in range(1, CHAIN + 1):
        below = (f"a{level + 1}",) if level < CHAIN else ()
        team[f"a{level}"] = AgentDef(f"a{level}", f"level {level}", model=f"m-a{level}", team=below, budget=Budget(max_depth=CHAIN + 1))
    return team


def model(settings: Mapping[str, str]) -> ScriptedModel:
    log, arm, hang = settings["TN_CELERY_CALLS"], settings.get("TN_CELERY_ARM", ""), settings.get("TN_CELERY_HANG", "")

    def boss(request: dict[str, Any]) -> dict[str, Any]:
        _append(log, f"boss {os.getpid()}")
        found = tool_messages(request)
        if not found:
            return {"tool_calls": [{"id": "call_help", "name": "task", "arguments": {"agent": "helper", "prompt": "help"}}]}
        if arm and os.path.exists(arm) and _first(hang):
            time.sleep(HANG_S)  # the test kills this worker meanwhile
        return {"content": f"boss: {found[-1]}"}

    def helper(request: dict[str, Any]) -> dict[str, Any]:
        _append(log, f"helper {os.getpid()}")
        return {"content": "helped"}

    def level(n: int) -> Callable[[dict[str, Any]], dict[str, Any]]:
        def reply(request: dict[str, Any]) -> dict[str, Any]:
            _append(log, f"a{n} {os.getpid()}")
            found = tool_messages(request)
            if n < CHAIN and not found:
                return {"tool_calls": [{"id": f"call_a{n}", "name": "task", "arguments": {"agent": f"a{n + 1}", "prompt": "go"}}]}
            return {"content": f"a{n}({found[-1] if found else 'bottom'})"}

        return reply

    scripts: dict[str, Any] = {"m-boss": boss, "m-helper": helper}
    scripts.update({f"m-a{n}": level(n) for n in range(1, CHAIN + 1)})
    return ScriptedModel(scripts)


def _first(path: str) -> bool:
    """True for the first caller only: it writes its pid into ``path``."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as out:
        out.write(str(os.getpid()))
    return True


def build(settings: Mapping[str, str]) -> tuple[Celery, CeleryDispatcher, Callable[[], Runtime]]:
    """The Celery app, its dispatcher and the runtime factory for ``settings``."""
    app = Celery("toolnexus_tests", broker=settings["TN_CELERY_BROKER"])
    app.conf.update(RECOMMENDED_SETTINGS, broker_connection_retry_on_startup=True, broker_connection_timeout=1, worker_hijack_root_logger=False)

    def runtime() -> Runtime:
        return Runtime(
            registry(),
            generate=model(settings),
            state=settings["TN_CELERY_STATE"],
            runtime_id=settings["TN_CELERY_RUNTIME_ID"],
            dispatcher=dispatcher,
            lease=float(settings.get("TN_CELERY_LEASE_MS", "3000")) / 1000,
        )

    dispatcher = install(app, runtime, queue=settings["TN_CELERY_QUEUE"], resend_after=float(settings.get("TN_CELERY_RESEND_MS", "1500")) / 1000)
    return app, dispatcher, runtime


if "TN_CELERY_BROKER" in os.environ:  # a worker process: ``celery -A _celery_team worker``
    app, dispatcher, runtime = build(os.environ)
