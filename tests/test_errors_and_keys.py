"""Errors say where and why; keys and credential headers never show (CONTRACT §13 "Keys",
"Real servers": every ``LLMError`` names the endpoint and the cause)."""

from __future__ import annotations

import json
import logging
import socket

import pytest

from _helpers import HANG
from _rawserver import RawServer
from conftest import run_in_thread
from toolnexus import Client, ConfigError, LLMError, Runtime
from toolnexus.testing import ScriptedReply

KEY = "sk-secret-key-0123456789"
AZURE_KEY = "azure-credential-9876543210"
BASE = "https://api.example.test/v1"
URL = f"{BASE}/chat/completions"


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def failure(**options):
    with Client(model="m", **options) as client:
        with pytest.raises(LLMError) as caught:
            run_in_thread(lambda: client.run("go"), HANG)
    return caught.value


def shown(error, infos=(), log=""):
    """Everything a host could see of a failure, in one string."""
    return " ".join([str(error), repr(error), error.body_excerpt, *(json.dumps(i) for i in infos), log])


# --- keys at construction ---------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [f"{KEY}\n", f" {KEY}", f"{KEY}\x00", f"{KEY}\u2013x"])
def test_an_unsendable_api_key_is_a_config_error_that_does_not_show_it(bad):
    with pytest.raises(ConfigError) as caught:
        Client(base_url=BASE, model="m", api_key=bad)
    assert KEY not in str(caught.value) and KEY not in repr(caught.value)


def test_the_runtime_refuses_an_unsendable_api_key_too():
    with pytest.raises(ConfigError) as caught:
        Runtime({}, base_url=BASE, api_key=f"{KEY}\r\n")
    assert KEY not in str(caught.value)


def test_a_header_value_with_a_line_break_is_a_config_error_that_does_not_show_it():
    with pytest.raises(ConfigError) as caught:
        Client(base_url=BASE, model="m", headers={"api-key": f"{AZURE_KEY}\n"})
    assert AZURE_KEY not in str(caught.value)


# --- credentials in replies ---------------------------------------------------------------------------


def echo_headers(status):
    """A reply that is not a completion and echoes the request headers back."""
    return lambda request: ScriptedReply(status=status, json={"echo": dict(request.headers)})


def test_an_echoed_key_and_credential_headers_are_shown_as_stars_everywhere(scripted, caplog):
    scripted.add(echo_headers(503))
    scripted.add(echo_headers(200))
    infos = []
    caplog.set_level(logging.DEBUG, logger="toolnexus")
    headers = {"api-key": AZURE_KEY, "X-Session-Token": "tok-abcdef123456", "X-Team": "blue"}
    error = failure(base_url=BASE, api_key=KEY, headers=headers, retries=1, retry_base=0.001, on_error=lambda i: infos.append(i))
    everything = shown(error, infos, caplog.text)
    for secret in (KEY, AZURE_KEY, "tok-abcdef123456"):
        assert secret not in everything
    assert "***" in error.body_excerpt
    assert "blue" in error.body_excerpt  # ordinary headers stay readable


# --- where and why ------------------------------------------------------------------------------------


def test_connection_refused_names_the_url_and_the_cause():
    port = free_port()
    error = failure(base_url=f"http://127.0.0.1:{port}/v1", retries=0)
    assert error.status is None
    assert f"http://127.0.0.1:{port}/v1/chat/completions" in str(error)
    assert "connection refused" in str(error)
    assert error.url == f"http://127.0.0.1:{port}/v1/chat/completions"


def test_connection_refused_says_how_to_reach_a_model_server():
    port = free_port()
    error = failure(base_url=f"http://127.0.0.1:{port}/v1", retries=0)
    assert error.cause == "connection refused"
    assert "is a model server listening there?" in str(error)
    assert "base_url=" in str(error) and "generate=" in str(error)


def test_the_url_in_a_message_has_no_credentials_or_query():
    port = free_port()
    error = failure(base_url=f"http://user:hunter22@127.0.0.1:{port}/v1?api_key=q-secret", retries=0)
    assert "hunter22" not in str(error) and "q-secret" not in str(error)
    assert f"127.0.0.1:{port}/v1" in str(error)


def test_an_http_failure_names_the_status_and_keeps_the_providers_reason(scripted):
    reason = "x" * 600 + " the model 'nope' does not exist"
    scripted.add(status=404, json={"error": {"message": reason}})
    error = failure(base_url=BASE, api_key=KEY, retries=0)
    assert error.status == 404
    assert URL in str(error) and "HTTP 404" in str(error)
    assert "does not exist" in error.body_excerpt


def test_a_retry_is_logged_at_info_with_the_status_and_the_wait(scripted, caplog):
    scripted.add(status=503, body="busy")
    scripted.add(json={"choices": [{"message": {"role": "assistant", "content": "ok"}}]})
    caplog.set_level(logging.INFO, logger="toolnexus")
    with Client(base_url=BASE, model="m", api_key=KEY, retry_base=0.001) as client:
        assert client.run("go").text == "ok"
    retries = [r for r in caplog.records if r.levelno == logging.INFO and "retry" in r.getMessage()]
    assert len(retries) == 1
    line = retries[0].getMessage()
    assert "HTTP 503" in line and URL in line and "retry 1 of 2 in" in line


def test_a_refused_connection_is_retried_and_the_retry_logged(caplog):
    port = free_port()
    caplog.set_level(logging.INFO, logger="toolnexus")
    failure(base_url=f"http://127.0.0.1:{port}/v1", retries=1, retry_base=0.001)
    assert any("connection refused" in r.getMessage() and "retry 1 of 1" in r.getMessage() for r in caplog.records)


def test_an_unreadable_200_names_the_url_and_keeps_the_key_out():
    def script(ex):
        ex.reply(json.dumps({"unexpected": KEY}).encode())

    with RawServer(script) as server:
        error = failure(base_url=server.base_url, api_key=KEY, retries=0)
    assert error.status == 200
    assert server.base_url in str(error)
    assert KEY not in shown(error)
