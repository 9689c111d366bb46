"""Team files: a team of agents and its connection, in TOML, checked before anything runs.

An agent's ``output = "module:ClassName"`` names its typed output (an attrs class, a
dataclass, a ``TypedDict`` or a JSON Schema dict).

A team file is code: ``tools = ["module:attribute"]`` imports and runs Python, so load
only team files you trust as you would trust a script. Modules next to the team file are
importable, but only after installed packages (a stray ``requests.py`` beside it does not
shadow the real one).
"""

from __future__ import annotations

import importlib
import os
import re
import sys
import tomllib
import warnings
from typing import Any, Callable

import attrs

from .. import mcp
from .._model import pricing
from .. import _seconds as seconds
from .._model import styles
from .._team.agentdef import AgentDef, check_name
from .._model.engine import REFUSED_PARAMS
from ..data import Budget
from ..errors import ConfigError, ToolnexusError, WireError
from .._tools.tools import Tool, tool
from ..wire import check_json


class TeamFileError(ToolnexusError):
    """The team file cannot be read or does not describe a runnable team."""


@attrs.frozen
class Team:
    """A team file, checked: the entry agent, the connection options and the registry."""

    entry: str
    connection: dict[str, Any]
    registry: dict[str, AgentDef]
    #: Where runs are kept (``[state] path``, relative to the team file), if anywhere.
    state: str | None = None
    #: The MCP servers of ``[agents.NAME.mcp.SERVER]`` tables, connected (their tools listed).
    servers: tuple[mcp.MCPServer, ...] = ()
    #: ``[prices."MODEL"]`` tables (US dollars per million tokens), for ``Runtime(prices=)``.
    prices: dict[str, dict[str, float]] = attrs.Factory(dict)

    def close(self) -> None:
        """Close every MCP server of the team file (a runtime given its tools closes them too)."""
        for server in self.servers:
            server.close()


_TOP_KEYS = ("entry", "connection", "agents", "state", "prices")
_CONNECTION_KEYS = ("base_url", "model", "style", "api_key_env", "timeout", "retries", "request_params")
_AGENT_KEYS = (
    "does",
    "soul",
    "model",
    "team",
    "budget",
    "tools",
    "mcp",
    "output",
    "request_params",
    "reset_tool_choice",
    "a2a",
)
_STDIO_KEYS = ("command", "env", "cwd", "timeout", "max_message_bytes")
_HTTP_KEYS = ("url", "headers", "timeout", "max_message_bytes")
_BUDGET_KEYS = tuple(field.name for field in attrs.fields(Budget))
STYLES = styles.NAMES
#: ``api_key_env`` may only name a variable that holds a key: upper case, ending in
#: ``_KEY`` or ``_TOKEN`` (``OPENAI_API_KEY``, ``GROQ_API_KEY``, ``HF_TOKEN``), so a team file
#: cannot send ``DATABASE_URL`` or ``HOME`` to its endpoint as the bearer token.
KEY_VARIABLE = re.compile(r"[A-Z][A-Z0-9_]*_(KEY|TOKEN)")
_TOML_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)\s*$")
_END_OF_DOCUMENT = "(at end of document)"


def load_team(path: str) -> Team:
    """Read and check a team file.

    Raises:
        TeamFileError: the file is missing, is not valid TOML (the message names the
            line and the problem), nests too deeply, or names unknown keys, agents or tools.
    """
    try:
        with open(path, "rb") as handle:
            text = handle.read().decode("utf-8")
    except OSError as exc:
        raise TeamFileError(f"{path}: cannot read the team file: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise TeamFileError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    try:
        return _check_team(path, tomllib.loads(text))
    except tomllib.TOMLDecodeError as exc:
        raise TeamFileError(f"{path}: {_toml_problem(exc, text)}") from None
    except RecursionError:  # tomllib reads nested arrays and tables by recursion, as JSON writes them
        raise TeamFileError(f"{path}: arrays or tables nested too deeply to read") from None


def _toml_problem(exc: tomllib.TOMLDecodeError, text: str) -> str:
    """``line L, column C: invalid TOML: <problem>`` from tomllib's error (Python 3.11+
    puts the position in the message; 3.14 also has ``lineno``/``colno``)."""
    message = getattr(exc, "msg", None) or str(exc)
    line, column = getattr(exc, "lineno", None), getattr(exc, "colno", None)
    match = _TOML_POSITION.search(message)
    if match:
        message = message[: match.start()]
        line, column = line or int(match.group(1)), column or int(match.group(2))
    elif message.endswith(_END_OF_DOCUMENT):
        message = message[: -len(_END_OF_DOCUMENT)].rstrip()
        line = line or text.count("\n") + (0 if text.endswith("\n") else 1)
        column = column or len(text.rstrip("\n").rsplit("\n", 1)[-1]) + 1
    if line is None:
        return f"invalid TOML: {message}"
    return f"line {line}, column {column}: invalid TOML: {message}"


def _check_team(path: str, data: dict[str, Any]) -> Team:
    def fail(problem: str) -> TeamFileError:
        return TeamFileError(f"{path}: {problem}")

    _unknown(data, _TOP_KEYS, "the top level", fail)
    connection = data.get("connection", {})
    if not isinstance(connection, dict):
        raise fail("[connection] must be a table")
    _unknown(connection, _CONNECTION_KEYS, "[connection]", fail, deprecated=("timeout_ms",))
    connection = _in_seconds(connection, "[connection]", fail)
    _check_connection(connection, fail)
    _check_request_params(connection.get("request_params"), fail)
    prices = _prices(data.get("prices"), fail)
    agents = data.get("agents")
    if not isinstance(agents, dict) or not agents:
        raise fail("no agents: define at least one [agents.NAME] table")
    base = os.path.dirname(os.path.abspath(path))
    servers: list[mcp.MCPServer] = []
    try:
        registry = {name: _agent_def(name, spec, base, fail, servers) for name, spec in agents.items()}
    except BaseException:
        for server in servers:
            server.close()
        raise
    for name, definition in registry.items():
        for member in definition.team:
            if member not in registry:
                raise fail(
                    f"[agents.{name}]: team member {member!r} is not defined (agents: {', '.join(sorted(registry))})"
                )
    entry = data.get("entry")
    if entry is None:
        if len(registry) != 1:
            raise fail(f'say which agent runs first, e.g. entry = "{next(iter(registry))}"')
        entry = next(iter(registry))
    if not isinstance(entry, str) or entry not in registry:
        raise fail(f"entry {entry!r} is not defined (agents: {', '.join(sorted(registry))})")
    state = _state_path(data.get("state"), base, fail)
    return Team(
        entry=entry, connection=dict(connection), registry=registry, state=state, servers=tuple(servers), prices=prices
    )


def _prices(section: Any, fail: Callable[[str], TeamFileError]) -> dict[str, dict[str, float]]:
    """``[prices."MODEL"]`` with ``input``, ``output`` and optionally ``cached_input``."""
    if section is None:
        return {}
    if not isinstance(section, dict):
        raise fail('[prices] must hold one table per model, e.g. [prices."gpt-4o"] with input = 2.5 and output = 10')
    try:
        pricing.table(section)
    except ConfigError as exc:
        raise fail(f"[prices]: {exc}") from None
    return {model: dict(spec) for model, spec in section.items()}


def _state_path(section: Any, base: str, fail: Callable[[str], TeamFileError]) -> str | None:
    """``[state] path = "runs.db"``: a SQLite file beside the team file, or a postgresql:// URL."""
    if section is None:
        return None
    if not isinstance(section, dict):
        raise fail("[state] must be a table")
    _unknown(section, ("path",), "[state]", fail)
    path = section.get("path")
    if not isinstance(path, str) or not path:
        raise fail('[state] needs path = "FILE" (a SQLite file) or a postgresql:// URL')
    if path.startswith(("postgresql://", "postgres://")):
        return path
    return os.path.join(base, path)


def _check_connection(connection: dict[str, Any], fail: Callable[[str], TeamFileError]) -> None:
    for key in ("base_url", "model", "style", "api_key_env"):
        if key in connection and not isinstance(connection[key], str):
            raise fail(f"[connection]: {key} must be a string")
    key_env = connection.get("api_key_env")
    if key_env is not None and not KEY_VARIABLE.fullmatch(key_env):
        raise fail(
            f"[connection]: api_key_env {key_env!r} is not a key variable: name one in upper case "
            "that ends in _KEY or _TOKEN (e.g. OPENAI_API_KEY); its value is sent to the endpoint"
        )
    retries = connection.get("retries")
    if retries is not None and (type(retries) is not int or retries < 0):
        raise fail("[connection]: retries must be a whole number >= 0")
    try:
        seconds.optional_duration("timeout", connection.get("timeout"))
    except ConfigError as exc:
        raise fail(f"[connection]: {exc}") from None


def _in_seconds(table: dict[str, Any], where: str, fail: Callable[[str], TeamFileError]) -> dict[str, Any]:
    """``table`` with a key first named in milliseconds (``timeout_ms``, ``max_wall_ms``)
    turned into its name in seconds, with a ``DeprecationWarning``."""
    out = dict(table)
    for old, (new, per_second) in seconds.RENAMED.items():
        if old not in out:
            continue
        if new in out:
            raise fail(f"{where}: give {new} or {old}, not both")
        value = out.pop(old)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise fail(f"{where}: {old} must be a number")
        out[new] = value / per_second
        warnings.warn(
            f"{where}: {old} is deprecated and goes in the next release: write {new} = {out[new]:g} (seconds)",
            DeprecationWarning,
            stacklevel=2,
        )
    return out


def _check_request_params(params: Any, fail: Callable[[str], TeamFileError]) -> None:
    """``[connection.request_params]``: a table merged into every request body, as JSON."""
    if params is None:
        return
    where = "[connection] request_params"
    if not isinstance(params, dict):
        raise fail(f"{where} must be a table, e.g. [connection.request_params] with max_tokens = 512")
    refused = [key for key in REFUSED_PARAMS if key in params]
    if refused:
        raise fail(f"{where} may not set {', '.join(refused)}")
    try:
        check_json(params, where)
    except WireError as exc:
        raise fail(f"{exc} (nan and inf are not JSON; dates and times are not either)") from None


def _flag(value: Any, where: str, fail: Callable[[str], TeamFileError]) -> bool:
    if not isinstance(value, bool):
        raise fail(f"{where}: reset_tool_choice must be true or false")
    return value


def _unknown(
    table: dict[str, Any],
    known: tuple[str, ...],
    where: str,
    fail: Callable[[str], TeamFileError],
    deprecated: tuple[str, ...] = (),
) -> None:
    unknown = sorted(set(table) - set(known) - set(deprecated))
    if unknown:
        raise fail(f"{where}: unknown key(s) {', '.join(unknown)} (known: {', '.join(known)})")


def _agent_def(
    name: str, spec: Any, base: str, fail: Callable[[str], TeamFileError], servers: list[mcp.MCPServer]
) -> AgentDef:
    where = f"[agents.{name}]"
    if not isinstance(spec, dict):
        raise fail(f"{where} must be a table")
    _unknown(spec, _AGENT_KEYS, where, fail)
    does = spec.get("does")
    if not isinstance(does, str) or not does.strip():
        raise fail(f'{where}: "does" (one line: what this agent does) is required')
    for key in ("soul", "model", "a2a"):
        if key in spec and not isinstance(spec[key], str):
            raise fail(f"{where}: {key} must be a string")
    team = spec.get("team", [])
    if not isinstance(team, list) or not all(isinstance(member, str) for member in team):
        raise fail(f"{where}: team must be a list of agent names")
    budget = spec.get("budget")
    if budget is not None:
        if not isinstance(budget, dict):
            raise fail(f"{where}: budget must be a table, e.g. [agents.{name}.budget]")
        _unknown(budget, _BUDGET_KEYS, f"[agents.{name}.budget]", fail, deprecated=("max_wall_ms",))
        budget = _in_seconds(budget, f"[agents.{name}.budget]", fail)
        for key, value in budget.items():
            if key in ("max_cost", "max_wall"):
                if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                    unit = "US dollars" if key == "max_cost" else "seconds"
                    raise fail(f"[agents.{name}.budget]: {key} must be a number of {unit} >= 0")
            elif type(value) is not int or value < 0:
                raise fail(f"[agents.{name}.budget]: {key} must be a whole number >= 0")
        try:
            budget = Budget(**budget)
        except ConfigError as exc:
            raise fail(f"[agents.{name}.budget]: {exc}") from None
    tools = spec.get("tools", [])
    if not isinstance(tools, list) or not all(isinstance(ref, str) for ref in tools):
        raise fail(f'{where}: tools must be a list of "module:attribute" strings')
    output = spec.get("output")
    if output is not None and not isinstance(output, str):
        raise fail(f'{where}: output must be a "module:ClassName" string')
    try:
        check_name(name)
        own = [_import_tool(ref, base, where, fail) for ref in tools]
        return AgentDef(
            name,
            does,
            soul=spec.get("soul", ""),
            request_params=spec.get("request_params"),
            reset_tool_choice=_flag(spec.get("reset_tool_choice", False), where, fail),
            model=spec.get("model", "inherit"),
            team=tuple(team),
            budget=budget,
            tools=(*own, *_mcp_tools(name, spec.get("mcp"), base, fail, servers)),
            output=_imported(output, base, where, "output", fail) if output is not None else None,
            a2a=spec.get("a2a"),
        )
    except ConfigError as exc:
        raise fail(f"{where}: {exc}") from None


def _import_tool(ref: str, base: str, where: str, fail: Callable[[str], TeamFileError]) -> Tool:
    """``"module:attribute"``: a ``Tool`` or a plain function."""
    value = _imported(ref, base, where, "tool", fail)
    if isinstance(value, Tool):
        return value
    if callable(value):
        return tool(value)
    raise fail(f"{where}: {ref!r} is neither a Tool nor a function")


def _imported(ref: str, base: str, where: str, what: str, fail: Callable[[str], TeamFileError]) -> Any:
    """The value ``"module:attribute"`` names. Importing it runs that module's code.
    Modules next to the team file are importable, after installed ones."""
    module_name, _, attribute = ref.partition(":")
    if not module_name or not attribute:
        raise fail(f'{where}: {what} {ref!r} must look like "module:attribute"')
    if base not in sys.path:
        sys.path.append(base)  # last: the team's folder never shadows an installed package
    try:
        value: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            value = getattr(value, part)
    except Exception as exc:
        raise fail(f"{where}: cannot load {what} {ref!r}: {type(exc).__name__}: {exc}") from None
    return value


def _mcp_tools(
    agent: str, tables: Any, base: str, fail: Callable[[str], TeamFileError], servers: list[mcp.MCPServer]
) -> list[Tool]:
    """``[agents.NAME.mcp.SERVER]``: ``command`` (and ``env``, ``cwd``) or ``url`` (and
    ``headers``), each server connected now and its tools given to the agent."""
    if tables is None:
        return []
    if not isinstance(tables, dict):
        raise fail(f"[agents.{agent}.mcp] must hold tables, e.g. [agents.{agent}.mcp.files]")
    tools: list[Tool] = []
    for label, spec in tables.items():
        where = f"[agents.{agent}.mcp.{label}]"
        server = _mcp_server(label, spec, base, where, fail)
        servers.append(server)
        try:
            tools.extend(server.tools())
        except mcp.MCPError as exc:
            raise fail(f"{where}: {exc}") from None
    return tools


def _mcp_server(label: str, spec: Any, base: str, where: str, fail: Callable[[str], TeamFileError]) -> mcp.MCPServer:
    if not isinstance(spec, dict) or ("command" in spec) == ("url" in spec):
        raise fail(f'{where} needs command = ["program", "arg"...] or url = "http://..." (one of them)')
    _unknown(spec, _STDIO_KEYS if "command" in spec else _HTTP_KEYS, where, fail)
    timeout = spec.get("timeout", 30)
    limit = spec.get("max_message_bytes", mcp.DEFAULT_MAX_MESSAGE_BYTES)
    try:
        if "url" in spec:
            if not isinstance(spec["url"], str) or not _string_table(spec.get("headers", {})):
                raise fail(f"{where}: url must be a string and headers a table of strings")
            headers = spec.get("headers")
            return mcp.http(spec["url"], headers=headers, timeout=timeout, name=label, max_message_bytes=limit)
        command, cwd = spec["command"], spec.get("cwd")
        if not isinstance(command, list) or not command or not all(isinstance(part, str) for part in command):
            raise fail(f'{where}: command must be a list of strings, e.g. ["npx", "-y", "some-server"]')
        if not _string_table(spec.get("env", {})) or (cwd is not None and not isinstance(cwd, str)):
            raise fail(f"{where}: env must be a table of strings and cwd a string")
        folder = os.path.join(base, cwd) if cwd is not None else base
        env = spec.get("env")
        return mcp.stdio(command, env=env, cwd=folder, timeout=timeout, name=label, max_message_bytes=limit)
    except ConfigError as exc:
        raise fail(f"{where}: {exc}") from None


def _string_table(value: Any) -> bool:
    return isinstance(value, dict) and all(
        isinstance(key, str) and isinstance(each, str) for key, each in value.items()
    )
