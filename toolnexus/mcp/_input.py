"""A server's questions as ``Request``s, and ``Answer``s as what the server is sent back
(CONTRACT §18b "MRTR ⇒ suspension", "The retry", "on_input").

A modern ``tools/call`` answered ``input_required`` becomes a ``Request`` of kind
``mcp_input`` that holds everything the retry needs — the tool, its arguments, the
server's questions verbatim and its opaque ``requestState`` — so that whichever process
gets the ``Answer`` can send the retry, after a restart too. A legacy server's
``elicitation/create`` during a call becomes the same kind of ``Request`` for ``on_input``.
"""

from __future__ import annotations

from typing import Any

from ..data import Answer, Request, make_request
from .. import ToolContext
from .._tools.tools import MCP_INPUT
from . import _protocol as protocol

#: ``input_required`` answers honoured in one call before it ends as an error result.
MAX_ROUNDS = 10
#: The key a legacy ``elicitation/create`` is filed under in a Request's ``inputRequests``.
LEGACY_KEY = "elicitation"


class Unanswerable(Exception):
    """A question this client cannot answer (its message is the call's error result)."""


def continued(ctx: ToolContext | None, tool: str) -> tuple[Request, Answer] | None:
    """The question of ``tool`` this call answers, when it is the retry of one."""
    if ctx is None or ctx.answer is None or ctx.request is None or ctx.request.kind != MCP_INPUT:
        return None
    data = ctx.request.data or {}
    return (ctx.request, ctx.answer) if data.get("tool") == tool else None


def question(server: str, tool: str, arguments: dict[str, Any], result: dict[str, Any], round: int) -> Request:
    """The ``Request`` an ``input_required`` result asks (``round``: how many so far).

    Raises:
        Unanswerable: it asks something other than a form or URL elicitation.
    """
    asked = result.get("inputRequests")
    if not isinstance(asked, dict) or not asked:
        raise Unanswerable(f"mcp server {server}: tool {tool} answered input_required without a question")
    for key, each in asked.items():
        method = each.get("method") if isinstance(each, dict) else None
        if method != protocol.ELICIT or not isinstance(each.get("params"), dict):
            raise Unanswerable(
                f"mcp server {server}: tool {tool} asked for {method or 'something'} ({key!r}); "
                "this client answers only elicitation/create"
            )
    state = result.get("requestState")
    return _request(server, tool, arguments, asked, state if isinstance(state, str) else None, round)


def legacy_question(server: str, params: Any, call: Any) -> Request:
    """The ``Request`` a legacy ``elicitation/create`` (``params``) asks during ``call``
    (the pending ``tools/call``'s params, if known)."""
    call = call if isinstance(call, dict) else {}
    asked = {LEGACY_KEY: {"method": protocol.ELICIT, "params": params if isinstance(params, dict) else {}}}
    tool = call.get("name") if isinstance(call.get("name"), str) else ""
    arguments = call.get("arguments") if isinstance(call.get("arguments"), dict) else {}
    return _request(server, tool, arguments, asked, None, 1)


def _request(
    server: str, tool: str, arguments: dict[str, Any], asked: dict[str, Any], state: str | None, round: int
) -> Request:
    first = next(iter(asked.values()))["params"]
    message = first.get("message") if isinstance(first.get("message"), str) else f"{tool} needs your input"
    schema = first.get("requestedSchema") if isinstance(first.get("requestedSchema"), dict) else None
    url = first.get("url") if first.get("mode") == "url" and isinstance(first.get("url"), str) else None
    data = {
        "server": server,
        "tool": tool,
        "arguments": arguments,
        "inputRequests": asked,
        "requestState": state,
        "message": message,
        "schema": schema,
        "round": round,
    }
    return make_request(MCP_INPUT, message, url=url, data=data)


def retry_params(request: Request, answer: Answer) -> dict[str, Any]:
    """The ``tools/call`` params of the retry: the same name and arguments, the answers to
    every question, the ``requestState`` byte for byte (left out when there was none).

    Raises:
        Unanswerable: an accepted form answer whose data is not an object.
    """
    data = request.data or {}
    params: dict[str, Any] = {"name": data.get("tool"), "arguments": data.get("arguments") or {}}
    params["inputResponses"] = responses(data.get("inputRequests") or {}, answer)
    if isinstance(data.get("requestState"), str):
        params["requestState"] = data["requestState"]
    return params


def responses(asked: dict[str, Any], answer: Answer) -> dict[str, Any]:
    """The answer to each question: ``answer.data[key]`` when its keys are the questions'
    keys, else ``answer.data`` itself (the one-question case).

    Raises:
        Unanswerable: an accepted form answer whose data is not an object.
    """
    given = answer.data
    by_key = isinstance(given, dict) and bool(given) and set(given) == set(asked)
    return {
        key: elicit_result(answer, given[key] if by_key else given, _is_form(each)) for key, each in asked.items()
    }


def elicit_result(answer: Answer | None, content: Any, form: bool = True) -> dict[str, Any]:
    """An ``ElicitResult``: accept (with the form's content), decline, or cancel (a cancelled
    or expired request).

    Raises:
        Unanswerable: an accepted form answer whose content is not an object.
    """
    if answer is None or not answer.ok:
        reason = answer.reason if answer is not None else None
        return {"action": "cancel" if reason in ("cancelled", "expired") else "decline"}
    if not form or content is None:
        return {"action": "accept"} if not form else {"action": "accept", "content": {}}
    if not isinstance(content, dict):
        raise Unanswerable(f"the answer to a form must be an object of its fields, not {type(content).__name__}")
    return {"action": "accept", "content": content}


def _is_form(asked: Any) -> bool:
    params = asked.get("params") if isinstance(asked, dict) else None
    return not (isinstance(params, dict) and params.get("mode") == "url")
