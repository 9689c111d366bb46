"""The MCP server's protocol, whatever carries it (HTTP or stdio): one JSON-RPC message in,
its reply and HTTP status out (CONTRACT §18b "Server").

Both eras on one endpoint. A request is of the 2026-07-28 era when its
``MCP-Protocol-Version`` header names a version other than the handshake ones, or when its
``_meta`` names a protocol version; every other request is of the handshake era
(``initialize`` agreed to the client's version when it is one of 2025-11-25, 2025-06-18,
2025-03-26, else 2025-11-25; no session). Nothing is kept between requests: a suspended
call's continuation lives in the sealed ``requestState`` (``_sealed``) and, for an agent,
in the runtime's state.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any, Mapping

import attrs

from .. import __version__
from ..data import Answer, Request
from ..wire import from_wire, to_wire
from . import _protocol as protocol
from . import _sealed
from ._exposed import Asked, Exposed, Outcome, Stale

log = logging.getLogger("toolnexus")

#: Versions of the handshake era this server agrees to (2024-11-05 gets 2025-11-25).
AGREED = protocol.HANDSHAKE_VERSIONS[:3]
_STATUS = {
    protocol.PARSE_ERROR: 400,
    protocol.INVALID_REQUEST: 400,
    protocol.INVALID_PARAMS: 400,
    protocol.HEADER_MISMATCH: 400,
    protocol.MISSING_CAPABILITY: 400,
    protocol.UNSUPPORTED_VERSION: 400,
    protocol.METHOD_NOT_FOUND: 404,
}
#: The form asked when a request names no object schema of its own: an approval.
APPROVAL_SCHEMA = {
    "type": "object",
    "properties": {"approve": {"type": "boolean"}, "note": {"type": "string"}},
    "required": ["approve"],
}
_BAD_STATE = "Invalid or expired requestState"


@attrs.frozen
class Reply:
    """What to answer: an HTTP status and a JSON-RPC message (None: nothing, a 202)."""

    status: int
    message: dict[str, Any] | None


class Refusal(Exception):
    """A request answered with a JSON-RPC error."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.data = data


def error(request_id: Any, code: int, message: str, data: Any = None) -> Reply:
    """A JSON-RPC error with the HTTP status the SDK gives it."""
    return Reply(_STATUS.get(code, 200), protocol.error_reply(request_id, code, message, data))


@attrs.frozen
class _Call:
    """One request being answered: its id, params, principal and era."""

    id: Any
    params: dict[str, Any]
    principal: str
    modern: bool


class Responder:
    """Answers MCP messages for ``exposed`` (see the module docs)."""

    def __init__(
        self,
        exposed: dict[str, Exposed],
        *,
        secret: bytes,
        name: str,
        version: str | None,
        ttl_ms: int,
        state_ttl_s: float,
    ) -> None:
        self.exposed = exposed
        self._secret = secret
        self.info = {"name": name, "version": version or __version__}
        self._ttl_ms = ttl_ms
        self._state_ttl_s = state_ttl_s

    def respond(self, message: Any, principal: str, headers: Mapping[str, str] | None = None) -> Reply:
        """The reply to one decoded message (``headers``: the HTTP request's, lower-case
        names; None over stdio)."""
        if not isinstance(message, dict) or not isinstance(message.get("method"), str):
            return error(None, protocol.INVALID_REQUEST, "Body must be one JSON-RPC request or notification object")
        request_id, method = message.get("id"), message["method"]
        if "id" in message and (isinstance(request_id, bool) or not isinstance(request_id, (str, int))):
            return error(None, protocol.INVALID_REQUEST, "A request id must be a string or an integer")
        params = message.get("params", {})
        if not isinstance(params, dict):
            return error(request_id, protocol.INVALID_PARAMS, "Invalid request parameters")
        try:
            modern = _era(method, params, headers)
            if "id" not in message:
                return Reply(202, None)  # a notification: nothing to answer
            call = _Call(request_id, params, principal, modern)
            result = self._modern(method, call) if modern else self._legacy(method, call)
        except Refusal as refused:
            return error(request_id, refused.code, str(refused), refused.data)
        except Exception:
            log.exception("mcp server %s: %s failed", self.info["name"], method)
            return error(request_id, protocol.INTERNAL_ERROR, "Internal error")
        return Reply(200, {"jsonrpc": "2.0", "id": request_id, "result": result})

    # --- the methods ------------------------------------------------------------------------

    def _modern(self, method: str, call: _Call) -> dict[str, Any]:
        if method == "server/discover":
            result: dict[str, Any] = {
                "supportedVersions": [protocol.MODERN],
                "capabilities": {"tools": {"listChanged": False}},
                "ttlMs": self._ttl_ms,
                "cacheScope": "public",
            }
        elif method == "tools/list":
            result = {"tools": self._listed(), "ttlMs": self._ttl_ms, "cacheScope": "public"}
        elif method == "tools/call":
            result = self._call(call)
        else:
            raise Refusal(protocol.METHOD_NOT_FOUND, f"Method not found: {method}")
        return {"resultType": protocol.COMPLETE, **result, "_meta": {protocol.META_SERVER: dict(self.info)}}

    def _legacy(self, method: str, call: _Call) -> dict[str, Any]:
        if method == "initialize":
            offered = call.params.get("protocolVersion")
            version = offered if offered in AGREED else protocol.HANDSHAKE_VERSIONS[0]
            capabilities = {"tools": {"listChanged": False}}
            return {"protocolVersion": version, "capabilities": capabilities, "serverInfo": dict(self.info)}
        if method == "ping":
            return {}
        if method == "tools/list":
            return {"tools": self._listed()}
        if method == "tools/call":
            return self._call(call)
        raise Refusal(protocol.METHOD_NOT_FOUND, f"Method not found: {method}")

    def _listed(self) -> list[dict[str, Any]]:
        return [entry.listed() for entry in self.exposed.values()]

    # --- a call, and its answer -------------------------------------------------------------

    def _call(self, call: _Call) -> dict[str, Any]:
        name, arguments = call.params.get("name"), call.params.get("arguments", {})
        if not isinstance(name, str) or not isinstance(arguments, dict):
            raise Refusal(protocol.INVALID_PARAMS, "Invalid request parameters")
        entry = self.exposed.get(name)
        if entry is None:  # as the SDK answers it: a result, not an error
            return _complete_text(f"Unknown tool: {name}", is_error=True)
        state = call.params.get("requestState") if call.modern else None
        if state is None:
            key = uuid.uuid4().hex
            return self._ended(entry, call, arguments, entry.call(arguments, key, call.principal), key)
        payload = self._opened(state, entry, arguments, call.principal)
        request = from_wire(Request, payload["request"])
        responses = call.params.get("inputResponses")
        response = responses.get(request.id) if isinstance(responses, dict) else None
        if response is None:  # not answered: the same question again
            return {"resultType": protocol.INPUT_REQUIRED, "inputRequests": _asked(request), "requestState": state}
        answer = _answer_of(request, response)
        asked = Asked(key=payload["key"], principal=call.principal, run=payload.get("run"))
        try:
            outcome = entry.answer(arguments, request, answer, asked)
        except Stale:
            raise Refusal(protocol.INVALID_PARAMS, _BAD_STATE, {"reason": "request_not_open"}) from None
        return self._ended(entry, call, arguments, outcome, payload["key"])

    def _ended(
        self, entry: Exposed, call: _Call, arguments: dict[str, Any], outcome: Outcome, key: str
    ) -> dict[str, Any]:
        if outcome.asked is None:
            assert outcome.result is not None
            result = outcome.result
            complete = _complete_text(result.output, is_error=result.is_error)
            structured = (result.metadata or {}).get("structured")
            if structured is not None:
                complete["structuredContent"] = structured
            return complete
        request = outcome.asked
        if not call.modern or not _asks(call.params):
            if outcome.run is not None:
                entry.let_go(outcome.run, call.principal)  # nobody can answer it: the run is not left waiting
            if call.modern:
                required = {"requiredCapabilities": dict(protocol.ELICITATION)}
                undeclared = "Client did not declare the form elicitation capability"
                raise Refusal(protocol.MISSING_CAPABILITY, undeclared, required)
            return _complete_text(f"pending: {request.prompt}", is_error=True)
        payload = {
            "tool": entry.name,
            "args": _sealed.digest(arguments),
            "request": to_wire(request),
            "principal": call.principal,
            "runtime": entry.tree() if outcome.run is not None else None,
            "run": outcome.run,
            "key": key,
            "exp": _sealed.expiry(self._state_ttl_s),
        }
        sealed = _sealed.seal(self._secret, payload)
        return {"resultType": protocol.INPUT_REQUIRED, "inputRequests": _asked(request), "requestState": sealed}

    def _opened(self, state: Any, entry: Exposed, arguments: dict[str, Any], principal: str) -> dict[str, Any]:
        """The payload of a requestState that this server sealed for this very call.

        Raises:
            Refusal: -32602, whatever is wrong with it (one answer for every case).
        """
        payload = _sealed.opened(self._secret, state)
        good = (
            payload is not None
            and payload.get("tool") == entry.name
            and payload.get("args") == _sealed.digest(arguments)
            and payload.get("principal") == principal
            and isinstance(payload.get("key"), str)
            and (payload.get("run") is None or payload.get("runtime") == entry.tree())
        )
        if not good:
            raise Refusal(protocol.INVALID_PARAMS, _BAD_STATE, {"reason": "invalid_request_state"})
        assert payload is not None
        return payload


def _era(method: str, params: dict[str, Any], headers: Mapping[str, str] | None) -> bool:
    """Whether the request is of the 2026-07-28 era (see the module docs); a modern one
    that is not well formed is refused.

    Raises:
        Refusal: -32602 (no ``_meta`` version or capabilities), -32022 (a version this
            server does not speak), -32020 (a header missing or not matching the body).
    """
    header = headers.get("mcp-protocol-version") if headers is not None else None
    meta = params.get("_meta")
    named = meta.get(protocol.META_VERSION) if isinstance(meta, dict) else None
    said_modern = header is not None and header not in protocol.HANDSHAKE_VERSIONS
    if not (said_modern or (named is not None and method != "initialize")):
        return False
    for version in (header, named):
        if version is not None and version != protocol.MODERN:
            supported = {"supported": [protocol.MODERN], "requested": version}
            raise Refusal(protocol.UNSUPPORTED_VERSION, f"Unsupported protocol version: {version}", supported)
    if named is None or not isinstance(meta.get(protocol.META_CAPABILITIES), dict):  # type: ignore[union-attr]
        needed = "_meta with its protocolVersion and clientCapabilities"
        raise Refusal(protocol.INVALID_PARAMS, f"A 2026-07-28 request needs {needed}")
    if headers is not None:
        _check_headers(method, params, headers)
    return True


def _check_headers(method: str, params: dict[str, Any], headers: Mapping[str, str]) -> None:
    expected = {"MCP-Protocol-Version": protocol.MODERN, "Mcp-Method": method}
    name = protocol.named(method, params)
    if name is not None:
        expected["Mcp-Name"] = name
    for header, value in expected.items():
        given = headers.get(header.lower())
        if given is None or protocol.header_text(given) != value:
            said = "is missing" if given is None else "does not match the body"
            raise Refusal(protocol.HEADER_MISMATCH, f"Header {header} {said}")


def _asks(params: dict[str, Any]) -> bool:
    """Whether the client said it answers form questions (``elicitation``, form or bare)."""
    meta = params.get("_meta")
    caps = meta.get(protocol.META_CAPABILITIES) if isinstance(meta, dict) else None
    elicitation = caps.get("elicitation") if isinstance(caps, dict) else None
    return isinstance(elicitation, dict) and (not elicitation or "form" in elicitation)


def _asked(request: Request) -> dict[str, Any]:
    """A ``Request`` as the one question of an ``input_required`` result."""
    schema = (request.data or {}).get("schema")
    own = isinstance(schema, dict) and schema.get("type") == "object" and isinstance(schema.get("properties"), dict)
    form = schema if own else APPROVAL_SCHEMA
    params = {"mode": "form", "message": request.prompt, "requestedSchema": form}
    return {request.id: {"method": protocol.ELICIT, "params": params}}


def _answer_of(request: Request, response: Any) -> Answer:
    """An ``ElicitResult`` as the ``Answer`` to ``request``.

    Raises:
        Refusal: -32602, not an ``ElicitResult``.
    """
    action = response.get("action") if isinstance(response, dict) else None
    content = response.get("content") if isinstance(response, dict) else None
    if action == "accept" and (content is None or isinstance(content, dict)):
        return Answer(id=request.id, ok=True, data=content)
    if action in ("decline", "cancel"):
        return Answer(id=request.id, ok=False, reason="declined" if action == "decline" else "cancelled")
    raise Refusal(protocol.INVALID_PARAMS, "Invalid request parameters", "inputResponses: not an ElicitResult")


def _complete_text(text: str, *, is_error: bool) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": is_error}
