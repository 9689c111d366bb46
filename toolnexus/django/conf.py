"""``settings.TOOLNEXUS`` and the process's one runtime.

The runtime is built on first use in each process (after a server such as gunicorn has
forked its workers) and let go of when the interpreter exits: a stored tree stays for the
other processes, a memory-only runtime closes. With a state, the first request of a
process builds it before the view runs, so that the runtime's registration in the state
commits on its own rather than with a view's transaction that may roll back.
"""

from __future__ import annotations

import atexit
import inspect
import os
import threading
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import import_string

from .._team.level1 import Agent
from .._team.runtime import Runtime
from ..errors import ConfigError
from .hygiene import closing_connections

#: Keys whose value may be given as a dotted import path.
_IMPORTABLE = ("registry", "generate", "hooks", "on_metric", "around_tool", "clock", "store", "session")

_lock = threading.Lock()  # guards: _current, _pid (held while the runtime is built)
_current: Runtime | None = None
_pid = 0
_built_lock = threading.Lock()  # guards: _built (a leaf)
#: id(runtime) -> (the store built for it, closed when it is let go of; its runtime_id)
_built: dict[int, tuple[Any, str]] = {}


def runtime() -> Runtime:
    """This process's runtime, built from ``settings.TOOLNEXUS`` on first use."""
    global _current, _pid
    with _lock:
        if _current is None or _pid != os.getpid():  # a forked child builds its own
            _current, _pid = build_runtime(), os.getpid()
        return _current


def build_runtime(**overrides: Any) -> Runtime:
    """A new runtime from ``settings.TOOLNEXUS`` with ``overrides`` on top.

    ``inline`` defaults to True; with ``inline=False`` and no ``around_tool`` of the
    project's own, ``closing_connections`` wraps every tool call.

    Raises:
        ImproperlyConfigured: no registry, an unknown key or a path that does not import.
    """
    options = {**_setting(), **overrides}
    problem = _unknown_keys(options)
    if problem is not None:
        raise ImproperlyConfigured(problem)
    for key in _IMPORTABLE:
        if isinstance(options.get(key), str):
            options[key] = import_string(options[key])
    registry = options.pop("registry", None)
    if isinstance(registry, Agent):
        registry = registry.registry
    if not registry:
        raise ImproperlyConfigured(
            'TOOLNEXUS["registry"] must name the agents (a mapping, an Agent or a dotted path to one)'
        )
    options.setdefault("inline", True)
    if not options["inline"]:
        options.setdefault("around_tool", closing_connections)
    database = _django_database(options.get("state"))
    store = None
    if database is not None:
        from .state import open_django_state

        store = options["state"] = open_django_state(database)
    try:
        rt = Runtime(registry, **options)
    except BaseException:
        if store is not None:
            store.close()
        raise
    with _built_lock:
        _built[id(rt)] = (store, str(options.get("runtime_id", "default")))
    return rt


def in_database(rt: Runtime) -> bool:
    """Whether ``rt`` was built here with ``"state": "django"``."""
    with _built_lock:
        built = _built.get(id(rt))
    return built is not None and built[0] is not None


def tree_of(rt: Runtime) -> str:
    """The ``runtime_id`` a runtime built here holds (``"default"`` unless set)."""
    with _built_lock:
        built = _built.get(id(rt))
    return built[1] if built is not None else "default"


def let_go(rt: Runtime, *, close: bool = False) -> None:
    """Release ``rt`` (a stored tree stays for the other processes; a memory-only runtime
    closes), or close its whole tree with ``close``; then close the store built for it."""
    if close:
        rt.close(rt.root)
    else:
        rt.release()
    with _built_lock:
        store = _built.pop(id(rt), (None, ""))[0]
    if store is not None:
        store.close()


def let_go_of_current() -> None:
    """Let go of this process's runtime now (its next use builds a new one): before a test
    database is dropped, so that no connection of the state is left on it."""
    rt = install(None)
    if rt is not None:
        let_go(rt)


def state_database() -> str:
    """The database alias of ``"state": "django"`` (or ``"django:ALIAS"``); "default" otherwise."""
    return _django_database(_setting().get("state")) or "default"


def _django_database(state: Any) -> str | None:
    if not isinstance(state, str) or not (state == "django" or state.startswith("django:")):
        return None
    return state.partition(":")[2] or "default"


def build_before_request(**kwargs: Any) -> None:
    """``request_started`` receiver: with a state, build this process's runtime now, outside
    any transaction of the view."""
    if _setting().get("state") is not None:
        runtime()


def install(rt: Runtime | None) -> Runtime | None:
    """Make ``rt`` this process's runtime (None: build again on next use); returns the old one."""
    global _current, _pid
    with _lock:
        previous, _current, _pid = _current, rt, os.getpid()
    return previous


def settings_problem() -> str | None:
    """What is wrong with ``settings.TOOLNEXUS``, without building anything."""
    try:
        options = _setting()
    except ImproperlyConfigured as exc:
        return str(exc)
    if "registry" not in options:
        return 'TOOLNEXUS has no "registry" (the agents: a mapping, an Agent or a dotted path to one)'
    return _unknown_keys(options)


def _setting() -> dict[str, Any]:
    value = getattr(settings, "TOOLNEXUS", None)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ImproperlyConfigured(f"TOOLNEXUS must be a dict of Runtime keywords, not {type(value).__name__}")
    return dict(value)


def worker_threads_with_database_state() -> bool:
    """Worker threads with the state in a SQLite database of the project (whose one write
    lock a view's transaction holds)."""
    from django.db import connections

    from .state import dialect_of

    options = _setting()
    database = _django_database(options.get("state"))
    if database is None or options.get("inline") is not False or database not in connections:
        return False
    try:
        return not dialect_of(database).supports_concurrent_writers
    except ConfigError:  # a backend the state does not run on: opening the state says so
        return False


def _unknown_keys(options: dict[str, Any]) -> str | None:
    known = set(inspect.signature(Runtime).parameters) - {"self"}
    unknown = sorted(set(options) - known)
    if unknown:
        return f"TOOLNEXUS: unknown key(s) {', '.join(unknown)}; the keys are Runtime's keywords"
    return None


@atexit.register
def _close_at_exit() -> None:
    with _lock:
        rt = _current if _pid == os.getpid() else None
    if rt is not None:
        let_go(rt)
