"""A2A 1.0 values as JSON (the proto3 JSON mapping ``a2a-sdk`` 1.3.0 reads and writes):
lowerCamelCase names, enums as their proto names, absent fields left out, never ``null``.

A ``Part`` is one of ``{"text"}``, ``{"data"}``, ``{"url"}``, ``{"raw"}`` (base64), with
optional ``metadata``, ``filename``, ``mediaType``. Numbers inside ``data`` that crossed an
``a2a-sdk`` peer come back as floats (``google.protobuf.Value`` is a double).
"""

from __future__ import annotations

import datetime
import json
import time
from typing import Any, Iterable

SUBMITTED = "TASK_STATE_SUBMITTED"
WORKING = "TASK_STATE_WORKING"
COMPLETED = "TASK_STATE_COMPLETED"
FAILED = "TASK_STATE_FAILED"
CANCELED = "TASK_STATE_CANCELED"
INPUT_REQUIRED = "TASK_STATE_INPUT_REQUIRED"
REJECTED = "TASK_STATE_REJECTED"
AUTH_REQUIRED = "TASK_STATE_AUTH_REQUIRED"

#: States a task never leaves.
TERMINAL = frozenset({COMPLETED, FAILED, CANCELED, REJECTED})
#: States in which a task waits for its caller.
INTERRUPTED = frozenset({INPUT_REQUIRED, AUTH_REQUIRED})

USER = "ROLE_USER"
AGENT = "ROLE_AGENT"

#: The members of a ``Part`` that carry its content: exactly one of them.
CONTENT = ("text", "data", "url", "raw")
#: The media types a toolnexus agent takes and gives.
MODES = ["text/plain", "application/json"]


def timestamp(at: float | None = None) -> str:
    """An RFC 3339 UTC time with milliseconds, as the specification asks
    (``2026-01-02T03:04:05.678Z``)."""
    moment = datetime.datetime.fromtimestamp(time.time() if at is None else at, datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def text_part(text: str) -> dict[str, Any]:
    return {"text": text}


def data_part(value: Any) -> dict[str, Any]:
    return {"data": value}


def content_of(part: dict[str, Any]) -> str | None:
    """Which content member a part has (``None`` when it has none)."""
    return next((key for key in CONTENT if key in part), None)


def text_of(parts: Iterable[dict[str, Any]]) -> str:
    """The text parts' text, joined with nothing between (chunks of one text may arrive as
    several parts)."""
    return "".join(part["text"] for part in parts if isinstance(part.get("text"), str))


def first_data(parts: Iterable[dict[str, Any]]) -> tuple[bool, Any]:
    """``(found, value)`` of the first data part."""
    for part in parts:
        if "data" in part:
            return True, part["data"]
    return False, None


def prompt_of(parts: Iterable[dict[str, Any]]) -> str:
    """What a message tells an agent: its text parts, its data parts as their JSON and its
    url parts' URLs, one a line, in order (raw bytes have no text to give)."""
    lines: list[str] = []
    for part in parts:
        if isinstance(part.get("text"), str):
            lines.append(part["text"])
        elif "data" in part:
            lines.append(json.dumps(part["data"], ensure_ascii=False))
        elif isinstance(part.get("url"), str):
            lines.append(part["url"])
    return "\n".join(lines)


def message(
    message_id: str, role: str, parts: list[dict[str, Any]], *, task_id: str | None = None,
    context_id: str | None = None,
) -> dict[str, Any]:
    """A ``Message``."""
    ids = {"contextId": context_id, "taskId": task_id}
    return {"messageId": message_id, "role": role, "parts": parts, **{key: v for key, v in ids.items() if v}}


def status(state: str, at: str, note: dict[str, Any] | None = None) -> dict[str, Any]:
    """A ``TaskStatus``: its state, when it was seen, and the agent's message about it."""
    made: dict[str, Any] = {"state": state, "timestamp": at}
    if note is not None:
        made["message"] = note
    return made


def artifact(artifact_id: str, name: str, parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"artifactId": artifact_id, "name": name, "parts": parts}
