"""What an MCP server lists and answers, as toolnexus values: ``Tool``s and ``ToolResult``s."""

from __future__ import annotations

import json
import logging
from typing import Any, Callable

from ..data import ToolResult
from ..errors import ConfigError
from .._tools.tools import Tool, ToolContext

log = logging.getLogger("toolnexus")

Execute = Callable[[dict[str, Any], ToolContext], ToolResult]


def tool_of(server: str, listed: Any, execute: Callable[[str], Execute], resource: Any) -> Tool | None:
    """One entry of ``tools/list`` as a ``Tool`` (its name sanitised, its description and
    ``inputSchema`` kept), or None when it cannot be one (logged)."""
    if not isinstance(listed, dict) or not isinstance(listed.get("name"), str):
        log.warning("mcp server %s listed a tool without a name; skipped", server)
        return None
    name = listed["name"]
    schema = listed.get("inputSchema")
    description = listed.get("description") or listed.get("title") or ""
    try:
        return Tool(
            name,
            description if isinstance(description, str) else str(description),
            schema if isinstance(schema, dict) else None,
            execute(name),
            source="mcp",
            resource=resource,
        )
    except ConfigError as exc:
        log.warning("mcp server %s: tool %r skipped: %s", server, name, exc)
        return None


def tool_result(result: Any) -> ToolResult:
    """A ``tools/call`` result: the text items joined by newlines (other items as a short
    placeholder, kept whole in ``metadata["content"]``), ``isError``, ``structuredContent``
    in ``metadata["structured"]``."""
    if not isinstance(result, dict):
        text = f"the server sent a tools/call result that is not an object: {_as_json(result)[:200]}"
        return ToolResult(output=text, is_error=True)
    parts: list[str] = []
    others: list[Any] = []
    content = result.get("content")
    for item in content if isinstance(content, list) else ():
        if isinstance(item, dict) and item.get("type") == "text":
            parts.append(str(item.get("text", "")))
        else:
            parts.append(placeholder(item))
            others.append(item)
    metadata: dict[str, Any] = {}
    if others:
        metadata["content"] = others
    structured = result.get("structuredContent")
    if structured is not None:
        metadata["structured"] = structured
        if not parts:  # no text for the model: it gets the structured value as JSON
            parts.append(_as_json(structured))
    return ToolResult(output="\n".join(parts), is_error=result.get("isError") is True, metadata=metadata or None)


def _as_json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except (ValueError, RecursionError):  # nested deeper than the encoder goes
        return "[structured content nested too deeply to show]"


def placeholder(item: Any) -> str:
    """``[image: image/png]``, ``[audio: audio/wav]``, ``[resource: file:///a.txt]``..."""
    if not isinstance(item, dict):
        return "[content]"
    kind = str(item.get("type") or "content")
    if kind in ("image", "audio"):
        return f"[{kind}: {item.get('mimeType') or 'unknown type'}]"
    if kind == "resource_link":
        return f"[resource link: {item.get('uri') or item.get('name') or 'no uri'}]"
    if kind == "resource":
        inner = item.get("resource")
        uri = inner.get("uri") if isinstance(inner, dict) else None
        return f"[resource: {uri or 'no uri'}]"
    return f"[{kind}]"
