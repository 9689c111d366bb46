"""Every duration an option takes is in seconds, a float, as ``requests``, ``threading``
and ``concurrent.futures`` take them. The names first given in milliseconds (and
``max_retry_after_s``) still work for a release: each warns with a ``DeprecationWarning``
that names the option to use instead and the value it would be."""

from __future__ import annotations

import math
import warnings
from typing import Any, Mapping

from .errors import ConfigError

#: The old name -> the option it became and how many of its units make one second.
RENAMED: dict[str, tuple[str, float]] = {
    "timeout_ms": ("timeout", 1000.0),
    "retry_base_ms": ("retry_base", 1000.0),
    "max_retry_after_s": ("max_retry_after", 1.0),
    "shutdown_ms": ("shutdown_timeout", 1000.0),
    "lease_ms": ("lease", 1000.0),
    "resend_after_ms": ("resend_after", 1000.0),
    "max_wall_ms": ("max_wall", 1000.0),
}

#: Each option's default, as the signatures that take it write it.
DEFAULTS: dict[str, float | None] = {
    "timeout": None,
    "retry_base": 0.5,
    "max_retry_after": 60.0,
    "shutdown_timeout": 5.0,
    "lease": 15.0,
    "resend_after": 30.0,
    "max_wall": None,
}


def durations(owner: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The durations a constructor was given (``arguments``: its ``locals()``) that have an
    old name among its parameters, each old name given turned into its new one as ``renamed``
    does. Each old name is a keyword of its own, so a type checker still sees a misspelt one."""
    given = {new: arguments[new] for old, (new, _) in RENAMED.items() if old in arguments and new in arguments}
    old = {name: arguments[name] for name in RENAMED if arguments.get(name) is not None}
    return renamed(owner, old, given, stacklevel=4)


def renamed(
    owner: str, old: Mapping[str, Any], given: dict[str, Any], *, warn: bool = True, stacklevel: int = 3
) -> dict[str, Any]:
    """``given`` (the new options as passed) with the old names in ``old`` turned into them.

    An old name that ``owner`` never took is the ``TypeError`` Python would raise for it;
    an old name next to its new one given as well is a ``TypeError`` too (which one was
    meant cannot be known). ``warn=False`` reads stored values without a word.
    """
    for name, value in old.items():
        target, per_second = RENAMED.get(name, ("", 0.0))
        if target not in given:
            raise TypeError(f"{owner}() got an unexpected keyword argument {name!r}")
        if given[target] != DEFAULTS[target]:
            raise TypeError(f"{owner}(): give {target}= or {name}=, not both")
        converted = None if value is None else _number(name, value) / per_second
        if warn:
            warnings.warn(
                f"{owner}({name}=...) is deprecated and goes in the next "
                f"release: use {target}= in seconds ({target}={converted!r})",
                DeprecationWarning,
                stacklevel=stacklevel,
            )
        given[target] = converted
    return given


def optional_duration(name: str, value: Any) -> float | None:
    """A duration option that may be unset (``None``): else as ``duration``."""
    return None if value is None else duration(name, value)


def duration(name: str, value: Any, *, zero: bool = False) -> float:
    """A duration option: a finite number of seconds, above zero (or at least zero with
    ``zero``). Anything else is a ``ConfigError``."""
    seconds = _number(name, value)
    if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not zero):
        least = ">= 0" if zero else "> 0"
        raise ConfigError(f"{name} must be a finite number of seconds {least}, not {value!r}")
    return seconds


def _number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{name} must be a number of seconds, not {type(value).__name__}")
    return float(value)
