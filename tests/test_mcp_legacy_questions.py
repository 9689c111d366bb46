"""A server of the handshake era asks during a call (``elicitation/create``): ``on_input``
answers it on the calling thread, and without ``on_input`` it is declined (CONTRACT §18b
"on_input"). Against the SDK's 1.x server (stdio, and HTTP with sessions) and the reference
server from npm."""

from __future__ import annotations

import pytest

from _mcp import everything_command, mcp1_command, mcp1_http_server
from conftest import HANG_TIMEOUT
from toolnexus import Answer
from toolnexus import mcp


def approving(asked: list, **answer):
    def on_input(request):
        asked.append(request)
        return Answer(id=request.id, **answer)

    return on_input


@pytest.fixture(scope="module")
def legacy_url():
    with mcp1_http_server() as endpoint:
        yield endpoint


@pytest.fixture(params=["stdio", "http"])
def connect(request, closing):
    """``connect(on_input)``: the 1.x server over stdio or over HTTP with a session."""
    if request.param == "stdio":
        return lambda on_input=None: closing(mcp.stdio(mcp1_command(), timeout=HANG_TIMEOUT, on_input=on_input))
    url = request.getfixturevalue("legacy_url")
    return lambda on_input=None: closing(mcp.http(url, timeout=HANG_TIMEOUT, on_input=on_input))


def test_on_input_answers_the_servers_question_during_the_call(connect):
    asked: list = []
    server = connect(approving(asked, ok=True, data={"approve": True, "note": "fine"}))
    assert server.call("confirm", {"action": "deploy"}).output == "deploy: approve=True note=fine"
    assert server.protocol_version == "2025-11-25"
    (request,) = asked
    assert request.kind == "mcp_input" and request.prompt == "Approve deploy?"
    assert request.data["tool"] == "confirm" and request.data["arguments"] == {"action": "deploy"}
    assert request.data["schema"]["required"] == ["approve"] and request.data["requestState"] is None


@pytest.mark.parametrize(("reason", "action"), [("declined", "decline"), ("cancelled", "cancel")])
def test_a_no_from_on_input_is_a_decline_or_a_cancel(connect, reason, action):
    server = connect(approving([], ok=False, reason=reason))
    assert server.call("confirm", {"action": "deploy"}).output == f"deploy: {action}"


def test_without_on_input_the_question_is_declined(connect):
    assert connect().call("confirm", {"action": "deploy"}).output == "deploy: decline"


def test_the_reference_servers_question_is_answered_by_on_input(closing):
    asked: list = []
    on_input = approving(asked, ok=True, data={"name": "Ada", "check": True})
    server = closing(mcp.stdio(everything_command(), name="everything", on_input=on_input))
    assert "trigger-elicitation-request" in {each.name for each in server.tools()}  # offered to a client that answers
    output = server.call("trigger-elicitation-request", {}).output
    assert "User provided the requested information" in output and "Name: Ada" in output
    assert asked[0].data["schema"]["required"] == ["name"]


def test_the_reference_server_offers_its_question_only_to_a_client_that_answers(closing):
    server = closing(mcp.stdio(everything_command(), name="everything"))
    assert "trigger-elicitation-request" not in {each.name for each in server.tools()}


def test_a_decline_reaches_the_reference_server(closing):
    server = closing(mcp.stdio(everything_command(), name="everything", on_input=approving([], ok=False, reason="declined")))
    server.tools()
    assert "declined" in server.call("trigger-elicitation-request", {}).output
