"""The words of the protocol both eras share with this package: versions, ``_meta`` keys,
error codes, and the HTTP header values of MCP 2026-07-28 (client and server alike)."""

from __future__ import annotations

import base64
from typing import Any

#: The stateless revision: no handshake, ``_meta`` on every request.
MODERN = "2026-07-28"
#: The versions spoken after an ``initialize`` handshake, newest first; a client offers the first.
HANDSHAKE_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
#: Every version this package speaks, newest first.
PROTOCOL_VERSIONS = (MODERN, *HANDSHAKE_VERSIONS)

META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT = "io.modelcontextprotocol/clientInfo"
META_SERVER = "io.modelcontextprotocol/serverInfo"
META_SUBSCRIPTION = "io.modelcontextprotocol/subscriptionId"

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
HEADER_MISMATCH = -32020
MISSING_CAPABILITY = -32021
UNSUPPORTED_VERSION = -32022

COMPLETE = "complete"
INPUT_REQUIRED = "input_required"
#: The one question a client of this package can be asked (it declares only form elicitation).
ELICIT = "elicitation/create"
#: What a client that may be asked questions declares (``on_input`` given, or always modern).
ELICITATION: dict[str, Any] = {"elicitation": {"form": {}}}

HEADER_VERSION = "MCP-Protocol-Version"
HEADER_METHOD = "Mcp-Method"
HEADER_NAME = "Mcp-Name"
_ENCODED = ("=?base64?", "?=")


def named(method: str, params: Any) -> str | None:
    """What ``Mcp-Name`` carries for a request: the tool or prompt name, the resource URI."""
    if not isinstance(params, dict):
        return None
    key = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}.get(method)
    value = params.get(key) if key else None
    return value if isinstance(value, str) else None


def header_value(text: str) -> str:
    """``text`` as an HTTP header value: as it is when it is plain printable ASCII without
    surrounding spaces, else ``=?base64?<base64 of its UTF-8>?=``."""
    plain = text.isascii() and text.isprintable() and text == text.strip()
    if plain and not (text.startswith(_ENCODED[0]) and text.endswith(_ENCODED[1])):
        return text
    return _ENCODED[0] + base64.b64encode(text.encode("utf-8")).decode("ascii") + _ENCODED[1]


def header_text(value: str) -> str | None:
    """A header value as the text it carries (``header_value`` undone); None when its
    base64 form is not valid."""
    if not (value.startswith(_ENCODED[0]) and value.endswith(_ENCODED[1])):
        return value
    try:
        return base64.b64decode(value[len(_ENCODED[0]) : -len(_ENCODED[1])], validate=True).decode("utf-8")
    except ValueError:
        return None


def error_reply(request_id: Any, code: int, message: str, data: Any = None) -> dict[str, Any]:
    """A JSON-RPC error reply."""
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": error}
