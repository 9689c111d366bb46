"""What ``toolnexus.mcp.wsgi_app`` answers a request it will not serve (CONTRACT §18b
"Errors", "authorize"; §20): each error with its JSON-RPC code and HTTP status, refusals
before anything runs, a requestState that is not this call's, and a body over the limit —
after which the app keeps serving."""

from __future__ import annotations

import base64
import json
import time

import pytest
import requests

from _mcp_served_app import add, ask_approval, build
from _wsgi_server import wsgi_serving
from toolnexus import ConfigError, tool
from toolnexus import mcp

SECRET = "a-test-secret-of-the-errors"
META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
}


def modern(method: str, params: dict | None = None, *, id: int = 1, name: str | None = None, **headers: str) -> tuple[dict, dict]:
    body = {"jsonrpc": "2.0", "id": id, "method": method, "params": {**(params or {}), "_meta": META}}
    sent = {"Accept": "application/json, text/event-stream", "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": method}
    if name is not None:
        sent["Mcp-Name"] = name
    return body, {**sent, **headers}


@pytest.fixture(scope="module")
def url():
    app = build(None, secret=SECRET, token="s3cret", max_body=64 * 1024)
    with wsgi_serving(app) as base:
        yield base + "/mcp"
    app.close()


def post(url: str, body, headers: dict, *, token: str | None = "s3cret", raw: bytes | None = None) -> requests.Response:
    headers = {"Content-Type": "application/json", **headers}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = raw if raw is not None else json.dumps(body).encode()
    return requests.post(url, data=data, headers=headers, timeout=30)


def error_of(reply: requests.Response) -> tuple[int, int]:
    return reply.status_code, reply.json()["error"]["code"]


def ask(url: str, arguments: dict | None = None, **headers: str) -> dict:
    """The first round of ``ask_approval``: its ``input_required`` result."""
    body, sent = modern("tools/call", {"name": "ask_approval", "arguments": arguments or {"action": "deploy"}}, name="ask_approval")
    return post(url, body, {**sent, **headers}).json()["result"]


def retry(url: str, asked: dict, response: dict | None, *, arguments: dict | None = None, state: str | None = None, token: str = "s3cret"):
    params = {"name": "ask_approval", "arguments": arguments or {"action": "deploy"}, "requestState": state or asked["requestState"]}
    if response is not None:
        params["inputResponses"] = {key: response for key in asked["inputRequests"]}
    body, sent = modern("tools/call", params, id=2, name="ask_approval")
    return post(url, body, sent, token=token)


# --- who asks ----------------------------------------------------------------------------------


def test_a_request_without_the_bearer_token_is_refused_401_with_a_json_rpc_body(url):
    body, headers = modern("tools/list")
    for token in (None, "wrong"):
        reply = post(url, body, headers, token=token)
        assert reply.status_code == 401 and reply.headers["WWW-Authenticate"] == "Bearer"
        assert reply.json()["error"]["code"] == -32000 and reply.json()["id"] is None


def test_an_authorize_hook_that_refuses_runs_nothing(tmp_path):
    ran = []

    @tool
    def effect() -> str:
        """Leaves a mark."""
        ran.append(1)
        return "done"

    app = mcp.wsgi_app([effect], authorize=lambda environ: None, secret=SECRET)
    with wsgi_serving(app) as base:
        body, headers = modern("tools/call", {"name": "effect", "arguments": {}}, name="effect")
        assert post(base, body, headers, token=None).status_code == 401
    assert ran == []


def test_a_server_with_neither_authorize_nor_public_is_refused():
    with pytest.raises(ConfigError, match="authorize"):
        mcp.wsgi_app([add])


# --- the errors of §18b ------------------------------------------------------------------------


def test_a_body_that_is_not_json_is_a_parse_error(url):
    assert error_of(post(url, None, modern("tools/list")[1], raw=b"{not json")) == (400, -32700)


@pytest.mark.parametrize("body", [[{"jsonrpc": "2.0", "id": 1, "method": "tools/list"}], {"jsonrpc": "2.0", "id": 1}, {"jsonrpc": "2.0", "id": 1, "result": {}}])
def test_a_body_that_is_not_one_request_is_invalid(url, body):
    assert error_of(post(url, body, modern("tools/list")[1])) == (400, -32600)


@pytest.mark.parametrize("meta", [{}, {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}])
def test_a_modern_request_without_its_version_or_capabilities_is_invalid_params(url, meta):
    body, headers = modern("tools/list")
    body["params"]["_meta"] = meta
    assert error_of(post(url, body, headers)) == (400, -32602)


def test_an_unknown_version_is_unsupported_naming_both(url):
    body, headers = modern("tools/list", **{"MCP-Protocol-Version": "2099-01-01"})
    reply = post(url, body, headers)
    assert error_of(reply) == (400, -32022)
    assert reply.json()["error"]["data"] == {"supported": ["2026-07-28"], "requested": "2099-01-01"}


@pytest.mark.parametrize(
    "headers",
    [{"Mcp-Method": "tools/list"}, {"Mcp-Name": "other"}, {"Mcp-Name": None}, {"MCP-Protocol-Version": None}, {"Mcp-Method": None}],
)
def test_a_header_missing_or_not_matching_the_body_is_a_header_mismatch(url, headers):
    body, sent = modern("tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}}, name="add")
    sent = {key: value for key, value in {**sent, **headers}.items() if value is not None}
    assert error_of(post(url, body, sent)) == (400, -32020)


def test_a_base64_header_is_read_as_its_text(url):
    body, sent = modern("tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}}, name="=?base64?" + base64.b64encode(b"add").decode() + "?=")
    assert post(url, body, sent).json()["result"]["content"][0]["text"] == "3"


def test_an_unknown_method_is_method_not_found_404(url):
    assert error_of(post(url, *modern("prompts/list"))) == (404, -32601)


def test_a_notification_is_accepted_202_without_a_body(url):
    body, headers = modern("notifications/cancelled", {"requestId": 3})
    del body["id"]
    reply = post(url, body, headers)
    assert reply.status_code == 202 and reply.content == b""


@pytest.mark.parametrize("verb", ["GET", "DELETE"])
def test_other_verbs_than_post_are_405(url, verb):
    reply = requests.request(verb, url, headers={"Authorization": "Bearer s3cret"}, timeout=30)
    assert reply.status_code == 405 and reply.headers["Allow"] == "POST"


def test_a_body_over_max_body_is_413_unread_and_the_app_keeps_serving(url):
    body, headers = modern("tools/call", {"name": "add", "arguments": {"a": 1, "b": 2, "pad": "x" * 70000}}, name="add")
    reply = post(url, body, headers)
    assert reply.status_code == 413 and reply.json()["error"]["code"] == -32000
    fine, headers = modern("tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}}, name="add")
    assert post(url, fine, headers).json()["result"]["content"][0]["text"] == "3"


def test_a_body_that_is_not_declared_json_is_415(url):
    body, headers = modern("tools/list")
    assert post(url, body, {**headers, "Content-Type": "text/plain"}).status_code == 415


def test_an_unknown_tool_is_an_error_result_as_the_sdk_answers(url):
    result = post(url, *modern("tools/call", {"name": "nope", "arguments": {}}, name="nope")).json()["result"]
    assert result["isError"] and result["content"][0]["text"] == "Unknown tool: nope"


# --- the requestState --------------------------------------------------------------------------


def test_no_answer_for_the_question_asks_it_again(url):
    asked = ask(url)
    again = retry(url, asked, None).json()["result"]
    assert again["resultType"] == "input_required" and again["inputRequests"] == asked["inputRequests"]


@pytest.mark.parametrize("change", ["tampered", "other arguments", "other principal", "expired"])
def test_a_request_state_that_is_not_this_calls_is_refused_and_nothing_runs(url, change, tmp_path):
    asked = ask(url)
    accept = {"action": "accept", "content": {"approve": True}}
    if change == "tampered":
        head, mac = asked["requestState"].split(".")
        payload = json.loads(base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)))
        payload["principal"] = "someone"
        forged = base64.urlsafe_b64encode(json.dumps(payload).encode()).rstrip(b"=").decode() + "." + mac
        reply = retry(url, asked, accept, state=forged)
    elif change == "other arguments":
        reply = retry(url, asked, accept, arguments={"action": "drop tables"})
    elif change == "other principal":
        app = mcp.wsgi_app([ask_approval], authorize=lambda environ: environ.get("HTTP_X_USER"), secret=SECRET)
        with wsgi_serving(app) as base:
            mine = ask(base, **{"X-User": "ada"})
            body, sent = modern("tools/call", {"name": "ask_approval", "arguments": {"action": "deploy"}, "requestState": mine["requestState"],
                                               "inputResponses": {k: accept for k in mine["inputRequests"]}}, name="ask_approval")
            reply = post(base, body, {**sent, "X-User": "eve"}, token=None)
    else:
        app = build(None, secret=SECRET, token="s3cret", state_ttl_s=0.05)
        with wsgi_serving(app) as base:
            mine = ask(base + "/mcp")
            time.sleep(0.1)  # the requestState's expiry passes
            reply = retry(base + "/mcp", mine, accept)
        app.close()
    assert error_of(reply) == (400, -32602)
    assert reply.json()["error"]["message"] == "Invalid or expired requestState"


def test_an_answer_that_is_not_an_elicit_result_is_invalid_params(url):
    assert error_of(retry(url, ask(url), {"action": "maybe"})) == (400, -32602)


def test_a_modern_client_that_declared_no_questions_gets_missing_capability(url):
    body, headers = modern("tools/call", {"name": "ask_approval", "arguments": {"action": "x"}}, name="ask_approval")
    body["params"]["_meta"] = {**META, "io.modelcontextprotocol/clientCapabilities": {}}
    reply = post(url, body, headers)
    assert error_of(reply) == (400, -32021)
    assert reply.json()["error"]["data"] == {"requiredCapabilities": {"elicitation": {"form": {}}}}
