"""``settings.TOOLNEXUS`` and the process's one runtime.

The runtime is built on first use in each process (after a server such as gunicorn has
forked its workers) and closed when the interpreter exits.
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

from ..agent import Agent
from ..runtime import Runtime
from .hygiene import closing_connections

#: Keys whose value may be given as a dotted import path.
_IMPORTABLE = ("registry", "generate", "hooks", "on_metric", "around_tool", "clock", "store", "session")

_lock = threading.Lock()  # guards: _current, _pid
_current: Runtime | None = None
_pid = 0


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
        raise ImproperlyConfigured('TOOLNEXUS["registry"] must name the agents (a mapping, an Agent or a dotted path to one)')
    options.setdefault("inline", True)
    if not options["inline"]:
        options.setdefault("around_tool", closing_connections)
    return Runtime(registry, **options)


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
        rt.close(rt.root)
