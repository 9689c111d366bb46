"""Which era a server speaks, found once per connection (CONTRACT §18b "Era, once per server").

The client asks ``server/discover`` at 2026-07-28 first, over stdio and HTTP alike. A
``DiscoverResult`` naming that version, or an ``UnsupportedProtocolVersion`` error (-32022)
naming it, means the stateless protocol: no handshake, ``_meta`` on every request. Anything
else (another error, an HTTP status without such an error, no answer in time) means a
server of the handshake era: ``initialize`` offering 2025-11-25, agreeing to an older
version it knows. The fallback never keys on one error code: legacy servers answer the
probe with -32601, -32602, -32600, -32000 or nothing at all.

A modern server slow to start (the SDK's stdio server takes seconds) may see the probe only
after it timed out here; it then answers the ``initialize`` that follows with -32022 naming
2026-07-28, and is probed again.
"""

from __future__ import annotations

import logging
from typing import Any

import attrs

from .. import __version__
from . import _protocol as protocol
from ._rpc import HttpStatus, RemoteError, Session, TimedOut, TooLarge

log = logging.getLogger("toolnexus")

#: The longest the probe waits for its answer (less when the server's ``timeout`` is less).
PROBE_TIMEOUT_S = 5.0
CLIENT_INFO = {"name": "toolnexus", "version": __version__}


class EraError(Exception):
    """The server could not be agreed with (its message says why)."""


@attrs.define
class Agreed:
    """What a connection agreed: the version, and what a modern server said of itself."""

    version: str
    server_info: dict[str, Any] | None = None
    capabilities: dict[str, Any] = attrs.Factory(dict)

    @property
    def modern(self) -> bool:
        return self.version == protocol.MODERN


def request_meta() -> dict[str, Any]:
    """The ``_meta`` every modern request carries (a fresh dict each time)."""
    return {
        protocol.META_VERSION: protocol.MODERN,
        protocol.META_CAPABILITIES: {"elicitation": {"form": {}}},
        protocol.META_CLIENT: dict(CLIENT_INFO),
    }


def agree(session: Session, wire: Any, *, probe_timeout: float, connect_timeout: float, asks: bool) -> Agreed:
    """Probe, then fall back to the handshake (see the module docs). ``wire`` gets the
    version it must put on its messages (HTTP). ``asks``: the handshake declares that the
    client answers questions (``elicitation``).

    Raises:
        _rpc.Failed: the server could not be reached (a process that exits, a refused connection).
        EraError: the server speaks no version this client knows.
    """
    for attempt in (1, 2):
        agreed = _probe(session, wire, min(probe_timeout, PROBE_TIMEOUT_S))
        if agreed is not None:
            return agreed
        try:
            return _handshake(session, wire, connect_timeout, asks)
        except RemoteError as exc:
            if attempt == 1 and exc.code == protocol.UNSUPPORTED_VERSION and _names_modern(exc.data):
                log.debug("mcp server %s refused the handshake for 2026-07-28: probed again", session.server)
                continue
            raise EraError(str(exc)) from None
    raise AssertionError("unreachable")


def _probe(session: Session, wire: Any, timeout: float) -> Agreed | None:
    """The modern agreement, or None for a server of the handshake era."""
    _set_version(wire, protocol.MODERN)
    try:
        found = session.request("server/discover", {"_meta": request_meta()}, timeout=timeout, cancels=False)
    except RemoteError as exc:
        if exc.code == protocol.UNSUPPORTED_VERSION and _names_modern(exc.data):
            return Agreed(protocol.MODERN)
        _legacy(session, wire, f"error {exc.code}")
        return None
    except (TimedOut, HttpStatus, TooLarge) as exc:
        _legacy(session, wire, type(exc).__name__)
        return None
    versions = found.get("supportedVersions") if isinstance(found, dict) else None
    if not isinstance(versions, list) or protocol.MODERN not in versions:
        _legacy(session, wire, "a discover result without 2026-07-28")
        return None
    meta = found.get("_meta")
    info = meta.get(protocol.META_SERVER) if isinstance(meta, dict) else None
    capabilities = found.get("capabilities")
    return Agreed(
        protocol.MODERN,
        server_info=_server_info(info),
        capabilities=capabilities if isinstance(capabilities, dict) else {},
    )


def _legacy(session: Session, wire: Any, why: str) -> None:
    log.debug("mcp server %s answered the 2026-07-28 probe with %s: the handshake follows", session.server, why)
    _set_version(wire, None)


def _handshake(session: Session, wire: Any, timeout: float, asks: bool) -> Agreed:
    offered = protocol.HANDSHAKE_VERSIONS[0]
    capabilities = dict(protocol.ELICITATION) if asks else {}
    params = {"protocolVersion": offered, "capabilities": capabilities, "clientInfo": dict(CLIENT_INFO)}
    result = session.request("initialize", params, timeout=timeout, cancels=False)
    version = result.get("protocolVersion") if isinstance(result, dict) else None
    if version not in protocol.HANDSHAKE_VERSIONS:
        raise EraError(
            f"mcp server {session.server} answered protocol version {version!r} to this client's {offered}; "
            f"this client speaks {', '.join(protocol.PROTOCOL_VERSIONS)}"
        )
    _set_version(wire, version)
    session.notify("notifications/initialized")
    info = result.get("serverInfo") if isinstance(result, dict) else None
    offered_capabilities = result.get("capabilities") if isinstance(result, dict) else None
    return Agreed(version, _server_info(info), offered_capabilities if isinstance(offered_capabilities, dict) else {})


def _set_version(wire: Any, version: str | None) -> None:
    if hasattr(wire, "protocol_version"):
        wire.protocol_version = version


def _names_modern(data: Any) -> bool:
    supported = data.get("supported") if isinstance(data, dict) else None
    return isinstance(supported, list) and protocol.MODERN in supported


def _server_info(info: Any) -> dict[str, Any] | None:
    if not isinstance(info, dict) or not isinstance(info.get("name"), str):
        return None
    return {"name": info["name"], "version": str(info.get("version", ""))}
