"""JSON-RPC 2.0 as A2A 1.0 speaks it: the error codes, the envelope of a request, and the
answers (every one HTTP 200, as ``a2a-sdk`` answers, whatever went wrong).

A served request is checked in this order, so that the most basic fault is the one reported:
the body is JSON (``-32700``), it is a request object (``-32600``), its method is one of
A2A's (``-32601``), the ``A2A-Version`` header is ``1.x`` (``-32009``), its params fit the
method (``-32602``), then the task it names exists for this caller (``-32001``).
"""

from __future__ import annotations

import re
from typing import Any

from ..errors import ToolnexusError

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
#: A request the served layer turned away (who asks, body size or type, stream cap); its
#: HTTP status says which.
REFUSED = -32000
TASK_NOT_FOUND = -32001
TASK_NOT_CANCELABLE = -32002
PUSH_NOT_SUPPORTED = -32003
UNSUPPORTED_OPERATION = -32004
CONTENT_TYPE_NOT_SUPPORTED = -32005
INVALID_AGENT_RESPONSE = -32006
VERSION_NOT_SUPPORTED = -32009

#: The methods this server answers.
SERVED = ("SendMessage", "SendStreamingMessage", "GetTask", "CancelTask", "SubscribeToTask")
#: A2A methods it knows but does not offer, and the error each gets.
NOT_OFFERED = {
    "ListTasks": UNSUPPORTED_OPERATION,
    "GetExtendedAgentCard": UNSUPPORTED_OPERATION,
    "CreateTaskPushNotificationConfig": PUSH_NOT_SUPPORTED,
    "GetTaskPushNotificationConfig": PUSH_NOT_SUPPORTED,
    "ListTaskPushNotificationConfigs": PUSH_NOT_SUPPORTED,
    "DeleteTaskPushNotificationConfig": PUSH_NOT_SUPPORTED,
}
#: The protocol version this edition speaks (the header's value on every call it makes).
VERSION = "1.0"
_COMPATIBLE = re.compile(r"1(\.\d{1,9}){0,2}")


class RpcError(ToolnexusError):
    """A JSON-RPC error to answer: ``code`` and ``message`` as the protocol has them."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def error_reply(request_id: Any, code: int, message: str) -> dict[str, Any]:
    """A JSON-RPC error response."""
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def result_reply(request_id: Any, result: Any) -> dict[str, Any]:
    """A JSON-RPC success response."""
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


def envelope(body: Any) -> tuple[Any, str, Any]:
    """``(id, method, params)`` of a request object.

    Raises:
        RpcError: ``-32600`` not a single request object (a batch, a string, a wrong
            ``jsonrpc``, an id that is neither a string, an integer nor null, no method);
            ``-32601`` a method A2A does not have. The id of a request that fails here is
            answered as ``null`` unless it was a valid id.
    """
    if isinstance(body, list):
        raise RpcError(INVALID_REQUEST, "Batch requests are not supported")
    if not isinstance(body, dict):
        raise RpcError(INVALID_REQUEST, "Invalid Request: a request is a JSON object")
    if body.get("jsonrpc") != "2.0":
        raise RpcError(INVALID_REQUEST, "Invalid Request: 'jsonrpc' must be exactly '2.0'")
    request_id = body.get("id")
    if isinstance(request_id, bool) or not isinstance(request_id, (str, int, type(None))):
        raise RpcError(INVALID_REQUEST, "Invalid Request: id must be a string, integer, or null")
    method = body.get("method")
    if not isinstance(method, str) or not method:
        raise RpcError(INVALID_REQUEST, "Invalid Request: 'method' must be a non-empty string")
    if method in NOT_OFFERED:
        code = NOT_OFFERED[method]
        what = "Push notifications are" if code == PUSH_NOT_SUPPORTED else f"{method} is"
        raise RpcError(code, f"{what} not supported by this agent")
    if method not in SERVED:
        raise RpcError(METHOD_NOT_FOUND, f"Method not found: {method[:80]!r}")
    return request_id, method, body.get("params")


def valid_id(body: Any) -> Any:
    """The request's id when it is one a reply may echo, else ``None``."""
    found = body.get("id") if isinstance(body, dict) else None
    return found if isinstance(found, (str, int)) and not isinstance(found, bool) else None


def check_version(given: str | None) -> None:
    """Refuse a caller that does not speak A2A 1.x (a missing header means 0.3).

    Raises:
        RpcError: ``-32009``.
    """
    shown = (given or "").strip() or "0.3"
    if not _COMPATIBLE.fullmatch(shown):
        raise RpcError(
            VERSION_NOT_SUPPORTED,
            f"A2A version {shown[:20]!r} is not supported by this handler. Expected version {VERSION!r}.",
        )
