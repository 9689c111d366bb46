"""The params of each served method, checked before anything is started or read: a
request whose params do not fit is ``-32602`` and changes nothing.

Unknown members are ignored (A2A readers do, for forward compatibility); an empty string
is an absent id, as proto3 has it.
"""

from __future__ import annotations

import re
from typing import Any

import attrs

from .._a2a import shapes
from .._a2a.rpc import INVALID_PARAMS, RpcError

#: Bytes as proto3's JSON writes them: base64, standard or URL-safe, padded or not.
_BASE64 = re.compile(r"[A-Za-z0-9+/_-]*={0,2}")


@attrs.frozen
class Sent:
    """A ``SendMessage``/``SendStreamingMessage`` request: the caller's message (as given)
    and what it asks of the answer."""

    message: dict[str, Any]
    task_id: str | None
    context_id: str | None
    return_immediately: bool = False
    history_length: int | None = None

    @property
    def parts(self) -> list[dict[str, Any]]:
        return list(self.message["parts"])


@attrs.frozen
class Named:
    """A request about one task: ``GetTask``, ``CancelTask``, ``SubscribeToTask``."""

    id: str
    history_length: int | None = None


def invalid(reason: str) -> RpcError:
    return RpcError(INVALID_PARAMS, f"Invalid params: {reason}")


def sent(params: Any) -> Sent:
    """The params of a message sent.

    Raises:
        RpcError: ``-32602`` no ``message``, no ``messageId``, no parts (or a part that is
            not one of text, data, url, raw), a role other than ``ROLE_USER``, a
            configuration that does not fit.
    """
    params = _object(params, "params")
    message = _object(params.get("message"), "message", required=True)
    _id(message, "messageId", required=True)
    role = message.get("role")
    if role != shapes.USER:
        shown = "missing" if role is None else f"{str(role)[:40]!r}"
        raise invalid(f"message.role must be {shapes.USER!r} (got {shown})")
    parts = message.get("parts")
    if not isinstance(parts, list) or not parts:
        raise invalid("message.parts must hold at least one part")
    for index, part in enumerate(parts):
        _part(part, f"message.parts[{index}]")
    _optional_object(message, "metadata", "message.metadata")
    configuration = _optional_object(params, "configuration", "configuration") or {}
    immediately = configuration.get("returnImmediately", False)
    if not isinstance(immediately, bool):
        raise invalid("configuration.returnImmediately must be true or false")
    return Sent(
        message=message,
        task_id=_id(message, "taskId"),
        context_id=_id(message, "contextId"),
        return_immediately=immediately,
        history_length=_history_length(configuration, "configuration.historyLength"),
    )


def named(params: Any) -> Named:
    """The params of a request about one task (its ``id``, and for ``GetTask`` how much
    history to show).

    Raises:
        RpcError: ``-32602`` no ``id``, or a ``historyLength`` that is not a count.
    """
    params = _object(params, "params")
    task_id = _id(params, "id", required=True)
    assert task_id is not None
    return Named(id=task_id, history_length=_history_length(params, "historyLength"))


def _object(value: Any, what: str, *, required: bool = False) -> dict[str, Any]:
    if value is None and not required and what == "params":
        return {}
    if not isinstance(value, dict):
        raise invalid(f"{what} must be an object" if value is not None else f"{what} is required")
    return value


def _optional_object(holder: dict[str, Any], key: str, what: str) -> dict[str, Any] | None:
    value = holder.get(key)
    if value is not None and not isinstance(value, dict):
        raise invalid(f"{what} must be an object")
    return value


def _id(holder: dict[str, Any], key: str, *, required: bool = False) -> str | None:
    value = holder.get(key)
    if value is None or value == "":
        if required:
            raise invalid(f"{key} is required")
        return None
    if not isinstance(value, str):
        raise invalid(f"{key} must be a string")
    return value


def _history_length(holder: dict[str, Any], what: str) -> int | None:
    value = holder.get(what.rsplit(".", 1)[-1])
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # a number through protobuf's JSON may come back as 5.0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise invalid(f"{what} must be a whole number, 0 or more")
    return value


def _part(part: Any, what: str) -> None:
    if not isinstance(part, dict):
        raise invalid(f"{what} must be an object")
    present = [key for key in shapes.CONTENT if key in part]
    if len(present) != 1:
        how = "none" if not present else " and ".join(present)
        raise invalid(f"{what} must have exactly one of text, data, url, raw (it has {how})")
    kind = present[0]
    if kind != "data" and not isinstance(part[kind], str):
        raise invalid(f"{what}.{kind} must be a string")
    if kind == "raw" and not _BASE64.fullmatch(part["raw"]):
        raise invalid(f"{what}.raw must be base64 (standard or URL-safe)")
    for key in ("filename", "mediaType"):
        if key in part and not isinstance(part[key], str):
            raise invalid(f"{what}.{key} must be a string")
    _optional_object(part, "metadata", f"{what}.metadata")
