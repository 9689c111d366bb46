"""A served MCP endpoint's parts, built once from what the app asks (CONTRACT §18b "Server"):
the exposed tools, the runtime their agents run on (the app's, or a private one built from
``runtime_options``), the secret and the ``Responder``. Shared by ``wsgi_app`` and
``toolnexus mcp serve``."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Iterable

from ..errors import ConfigError
from . import _sealed
from ._exposed import ExposedLike, RuntimeLike, exposed_tools
from ._responder import Responder

if TYPE_CHECKING:
    from .. import Runtime

#: The largest request body (a stdio line) taken unless told otherwise: 4 MiB.
MAX_BODY = 4 * 1024 * 1024


class Served:
    """A responder and what it owns: a private runtime closes with ``close()``."""

    def __init__(self, responder: Responder, own_runtime: Runtime | None) -> None:
        self.responder = responder
        self._own_runtime = own_runtime

    def close(self) -> None:
        """Close the private runtime, if one was built (the app's own is the app's to close)."""
        if self._own_runtime is not None:
            self._own_runtime.close(self._own_runtime.root)


def build(
    exposed: Iterable[ExposedLike] | ExposedLike,
    *,
    runtime: RuntimeLike | None,
    secret: str | bytes | None,
    name: str,
    version: str | None,
    ttl_ms: int,
    state_ttl_s: float,
    runtime_options: dict[str, Any],
) -> Served:
    """The parts of one endpoint.

    Raises:
        ConfigError: see ``_exposed.exposed_tools``; a ``runtime`` with ``runtime_options``;
            a ``ttl_ms``, ``state_ttl_s`` or ``secret`` that is not usable.
    """
    from .. import Agent, Tool

    items = [exposed] if isinstance(exposed, (Tool, Agent, str)) else list(exposed)
    if runtime is not None and runtime_options:
        raise ConfigError(f"mcp server: runtime options ({', '.join(sorted(runtime_options))}) go with no runtime=")
    if isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int) or ttl_ms < 0:
        raise ConfigError(f"mcp server: ttl_ms must be a whole number of milliseconds >= 0, not {ttl_ms!r}")
    if isinstance(state_ttl_s, bool) or not isinstance(state_ttl_s, (int, float)) or not (0 < state_ttl_s < math.inf):
        raise ConfigError(f"mcp server: state_ttl_s must be a positive number of seconds, not {state_ttl_s!r}")
    if secret is not None and (not isinstance(secret, (str, bytes)) or len(secret) < 16):
        raise ConfigError("mcp server: secret must be a str or bytes of at least 16 characters")
    own = None
    agents = [item for item in items if isinstance(item, (Agent, str))]
    if runtime is None and agents:
        runtime = own = _private_runtime(agents, runtime_options)
    try:
        tools = exposed_tools(items, runtime)
    except BaseException:
        if own is not None:
            own.close(own.root)
        raise
    key = _sealed.secret_bytes(secret) if secret is not None else _sealed.new_secret()
    responder = Responder(tools, secret=key, name=name, version=version, ttl_ms=ttl_ms, state_ttl_s=state_ttl_s)
    return Served(responder, own)


def _private_runtime(agents: list[Any], runtime_options: dict[str, Any]) -> Runtime:
    from .. import Agent, Runtime

    registry: dict[str, Any] = {}
    for item in agents:
        if not isinstance(item, Agent):
            raise ConfigError(f"mcp server: agent name {item!r} needs runtime= (a runtime whose registry has it)")
        registry.update(item.registry)
    return Runtime(registry, **runtime_options)

