"""Tools the host runs: the model may call them, the runtime does not run them.

An AG-UI front end offers its own tools with each run (CONTRACT §21, "frontend tools"). A
call to one suspends on a ``Request`` of kind ``"frontend_tool"`` (``data``: the ``tool``,
the ``call`` id and its ``arguments``); the ``Answer`` is the host's result, ``data``
``{"content": <text, or content parts>, "error"?: <why it failed>}``, which the model gets
as that call's result (an error result when ``error`` is given). Only the spec is kept (a
name, a description, a JSON Schema), so a turn taken over in another process offers the
same tools.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from ..data import Request, ToolResult
from .tools import Tool, ToolContext, failure, success, suspend

#: The ``Request`` kind a call to a hosted tool suspends on.
KIND = "frontend_tool"


def hosted_tool(spec: dict[str, Any]) -> Tool:
    """The tool ``spec`` (``{"name", "description", "parameters"}``) as the model sees it.

    Raises:
        ConfigError: a name providers refuse, or a schema nested too deep.
    """
    name = str(spec["name"])

    def execute(args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        if ctx.answer is None:
            data = {"tool": name, "call": ctx.call_id or "", "arguments": args}
            asked = Request(id=f"req_{uuid.uuid4().hex}", kind=KIND, prompt=f"the front end runs {name}", data=data)
            return suspend(asked)
        given = ctx.answer.data if isinstance(ctx.answer.data, dict) else {"content": ctx.answer.data}
        text = _text(given.get("content"))
        error = given.get("error")
        if isinstance(error, str):
            return failure(f"{error}\n{text}" if text else error)
        return success(text)

    return Tool(name, str(spec.get("description") or ""), spec.get("parameters") or None, execute, source="host")


def _text(content: Any) -> str:
    """A result's content as the model reads it: text as it is, the text of content parts,
    anything else as JSON."""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(part, dict) for part in content):
        texts = [str(part.get("text")) for part in content if part.get("type") == "text"]
        if len(texts) == len(content):
            return "\n".join(texts)
    return json.dumps(content, ensure_ascii=False)
