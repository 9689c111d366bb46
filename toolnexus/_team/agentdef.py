"""What an agent is: ``AgentDef``, agent names, and a registry's normal form.

A registry value may be an ``AgentDef``, a plain dict of its fields, or a level-1 agent
(anything with a ``definition`` and a ``registry``, recognised by those two attributes so
that this module never imports the level-1 facade that imports it).
"""

from __future__ import annotations

import logging
import re
from typing import Any, Callable, Iterable, Mapping

import attrs

from .._a2a.peer import Peer, as_peer
from ..data import Answer, Budget, Request
from ..errors import ConfigError, WireError
from ..hooks import HooksLike
from .._tools.output import FINAL_RESULT, output_type
from .._tools.toolkit import as_tools
from .._tools.tools import Tool
from ..wire import check_json

log = logging.getLogger("toolnexus")


def _tools(tools: Any) -> tuple[Tool, ...]:
    """Tools, plain functions (made tools with ``@tool``'s rules) or a ``Toolkit``."""
    return tuple(as_tools(tools))


def _params(instance: AgentDef, field: attrs.Attribute[Any], value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, dict):
        raise ConfigError(f"agent {instance.name!r}: request_params must be a dict")
    refused = [key for key in ("messages", "tools", "stream") if key in value]
    if refused:
        raise ConfigError(f"agent {instance.name!r}: request_params may not set {', '.join(refused)}")
    try:
        check_json(value, f"agent {instance.name!r}: request_params")
    except WireError as exc:
        raise ConfigError(str(exc)) from None


def _typed(instance: AgentDef, field: attrs.Attribute[Any], value: Any) -> None:
    output_type(value)  # a T without a schema is refused here, when the agent is defined


def _members(team: Iterable[Any]) -> tuple[Any, ...]:
    return tuple(team)


_NAME = re.compile(r"[A-Za-z0-9_-]+")


def check_name(name: object) -> str:
    """An agent name is letters, digits, ``_`` and ``-``: it becomes a segment of handle
    ids (``root/boss.1/worker.2``), so a ``/`` or ``.`` would let it forge another's id."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigError(f"agent name {name!r} must be letters, digits, '_' or '-' (no '/', '.' or spaces)")
    return name


def _valid_name(instance: AgentDef, field: attrs.Attribute[str], value: str) -> None:
    check_name(value)


@attrs.frozen
class AgentDef:
    """What an agent is: its job, its soul (system prompt), its tools and its team.

    ``model="inherit"`` uses the runtime's model. A non-empty ``team`` gives the agent a
    ``task`` tool that can delegate to exactly those agents. With ``output=T`` each turn
    ends with a value of ``T`` (``AgentResult.output``), which a lead receives as JSON.
    """

    name: str = attrs.field(validator=_valid_name)
    does: str
    model: str = attrs.field(default="inherit", kw_only=True)
    soul: str = attrs.field(default="", kw_only=True)
    tools: tuple[Tool, ...] = attrs.field(default=(), kw_only=True, converter=_tools)
    team: tuple[Any, ...] = attrs.field(default=(), kw_only=True, converter=_members)
    budget: Budget | None = attrs.field(default=None, kw_only=True)
    wait_for: Callable[[Request], Answer] | None = attrs.field(default=None, kw_only=True)
    on_spawn: Callable[..., Any] | None = attrs.field(default=None, kw_only=True)
    on_close: Callable[..., Any] | None = attrs.field(default=None, kw_only=True)
    hooks: HooksLike = attrs.field(default=None, kw_only=True)
    on_metric: Callable[[dict[str, Any]], Any] | None = attrs.field(default=None, kw_only=True)
    #: An attrs class, a dataclass, a ``TypedDict`` or a JSON Schema dict: the agent's turns
    #: end with a value of it (typed output).
    output: Any = attrs.field(default=None, kw_only=True, validator=_typed)
    #: Request parameters for this agent's model calls (``temperature``, a ``tool_choice``
    #: that names one of its tools...), merged over the runtime's into every request.
    request_params: dict[str, Any] | None = attrs.field(default=None, kw_only=True, validator=_params)
    #: A ``tool_choice`` that forces a call holds only until the turn has called a tool, then
    #: is sent as ``auto`` (so the model can answer: forced on every step it never could).
    reset_tool_choice: bool = attrs.field(default=False, kw_only=True)
    #: A remote A2A agent as this teammate (the base URL of its Agent Card, or an
    #: ``a2a.Peer`` with credentials): its turns are tasks of that agent, not model calls.
    a2a: Peer | None = attrs.field(default=None, kw_only=True, converter=as_peer)

    def __attrs_post_init__(self) -> None:
        if self.team and any(getattr(own, "name", None) == "task" for own in self.tools):
            raise ConfigError(
                f"agent {self.name!r} has a team, so its tool name 'task' is taken by delegation:"
                " rename its own 'task' tool"
            )
        if self.output is not None and any(own.name == FINAL_RESULT for own in self.tools):
            raise ConfigError(
                f"agent {self.name!r} has output, which needs the tool name {FINAL_RESULT!r}:"
                f" rename its own {FINAL_RESULT!r} tool"
            )
        if self.a2a is not None:
            _check_remote(self)

    @property
    def team_names(self) -> tuple[str, ...]:
        return tuple(member.name if _is_agent(member) else str(member) for member in self.team)


def _check_remote(definition: AgentDef) -> None:
    """A remote teammate is all the remote agent: nothing of a model's may go with it."""
    local = [
        name
        for name, given in (
            ("model", definition.model not in ("inherit", "", None)),
            ("tools", bool(definition.tools)),
            ("team", bool(definition.team)),
            ("soul", bool(definition.soul)),
            ("output", definition.output is not None),
        )
        if given
    ]
    if local:
        raise ConfigError(
            f"agent {definition.name!r} is a remote A2A agent (a2a=), so it cannot also have {', '.join(local)}"
        )


def model_of(definition: AgentDef, default: str) -> str:
    """The model an agent's turns use: its own, or ``default`` (the runtime's) when it inherits."""
    return default if definition.model in ("inherit", "", None) else definition.model


_DEF_KEYS = {f.name for f in attrs.fields(AgentDef)}


def as_def(name: str, value: Any) -> AgentDef:
    """A registry value as an ``AgentDef``: an ``AgentDef``, an ``Agent`` or a plain dict."""
    if isinstance(value, AgentDef):
        return value
    if _is_agent(value):
        definition: AgentDef = value.definition
        return definition
    if isinstance(value, Mapping):
        unknown = set(value) - _DEF_KEYS
        if unknown:
            raise ConfigError(f"agent {name!r}: unknown key(s) {', '.join(sorted(unknown))}")
        fields = dict(value)
        fields.setdefault("name", name)
        fields.setdefault("does", "")
        budget = fields.get("budget")
        if isinstance(budget, Mapping):
            unknown = set(budget) - {f.name for f in attrs.fields(Budget)}
            if unknown:
                raise ConfigError(f"agent {name!r}: unknown budget key(s) {', '.join(sorted(unknown))}")
            fields["budget"] = Budget(**budget)
        return AgentDef(**fields)
    raise ConfigError(f"agent {name!r}: expected an AgentDef, Agent or dict, got {type(value).__name__}")


def normalize_registry(registry: Mapping[str, Any]) -> dict[str, AgentDef]:
    """Every value as an ``AgentDef``; ``Agent`` team members bring their own registries."""
    out: dict[str, AgentDef] = {}
    for name, value in registry.items():
        check_name(name)
        if _is_agent(value):
            for inner_name, inner in value.registry.items():
                out.setdefault(inner_name, inner)
        out[name] = as_def(name, value)
    return out




def _is_agent(value: Any) -> bool:
    """A level-1 ``Agent``: its definition plus a registry of its team."""
    return not isinstance(value, (AgentDef, Mapping)) and hasattr(value, "definition") and hasattr(value, "registry")


def call_lifecycle(callback: Callable[..., Any] | None, *args: Any) -> None:
    """Call an agent's ``on_spawn``/``on_close`` (outside every lock); what it raises is
    logged and ignored: a host's callback never breaks the tree."""
    if callback is None:
        return
    try:
        callback(*args)
    except Exception:
        log.warning("lifecycle callback %r raised; ignored", callback, exc_info=True)
