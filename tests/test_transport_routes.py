"""Which way a request goes, decided once when the client is built (CONTRACT §8
``session``): the library's own session with no proxy goes straight to its connection
pool; a host's session goes through ``Session.send`` (its hooks run); a proxy, or an
``HTTPAdapter.send`` replaced by a mocking library at build time, goes through the adapter.
A mock activated after a client was built does not change that client's route."""

from __future__ import annotations

import socket

import requests
import responses

from _helpers import HANG
from _rawserver import completion
from conftest import run_in_thread
from toolnexus import Client


def route_of(client):
    return client._engine.model.transport.route


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def mocked_reply(text):
    return {"choices": [{"message": {"role": "assistant", "content": text}}], "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


def test_the_own_session_without_a_proxy_goes_direct(servers):
    server = servers(lambda ex: ex.reply(completion("direct")))
    with Client(base_url=server.base_url, model="m") as client:
        assert route_of(client) == "direct"
        assert run_in_thread(lambda: client.run("go"), HANG).text == "direct"


def test_a_host_session_goes_through_session_send_and_its_hooks_run(servers):
    server = servers(lambda ex: ex.reply(completion("hooked")))
    seen = []
    session = requests.Session()
    session.hooks["response"].append(lambda response, **kwargs: seen.append(response.status_code))
    try:
        with Client(base_url=server.base_url, model="m", session=session) as client:
            assert route_of(client) == "requests"
            assert run_in_thread(lambda: client.run("go"), HANG).text == "hooked"
    finally:
        session.close()
    assert seen == [200]


def test_a_proxy_from_the_environment_is_used_through_the_adapter(servers, monkeypatch):
    proxy = servers(lambda ex: ex.reply(completion("via proxy")))
    target = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there: only the proxy answers
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
    monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{proxy.port}")
    with Client(base_url=target, model="m", retries=0) as client:
        assert route_of(client) == "requests"
        assert run_in_thread(lambda: client.run("go"), HANG).text == "via proxy"
    assert proxy.last_request.startswith(f"POST {target}/chat/completions HTTP/1.1".encode())


def test_a_mock_activated_after_a_client_was_built_does_not_change_its_route(servers):
    server = servers(lambda ex: ex.reply(completion("real")))
    with Client(base_url=server.base_url, model="m", retries=0) as before:
        with responses.RequestsMock() as mock:
            mock.post(server.base_url + "/chat/completions", json=mocked_reply("mocked"))
            with Client(base_url=server.base_url, model="m", retries=0) as under:
                assert route_of(before) == "direct" and route_of(under) == "requests"
                assert run_in_thread(lambda: before.run("go"), HANG).text == "real"
                assert run_in_thread(lambda: under.run("go"), HANG).text == "mocked"
    assert server.requests == 1


def test_a_client_built_under_a_mock_reaches_the_server_once_the_mock_stops(servers):
    server = servers(lambda ex: ex.reply(completion("real")))
    mock = responses.RequestsMock()
    mock.start()
    try:
        mock.post(server.base_url + "/chat/completions", json=mocked_reply("mocked"))
        client = Client(base_url=server.base_url, model="m", retries=0)
        assert run_in_thread(lambda: client.run("go"), HANG).text == "mocked"
    finally:
        mock.stop()
        mock.reset()
    try:
        assert route_of(client) == "requests"
        assert run_in_thread(lambda: client.run("go"), HANG).text == "real"
    finally:
        client.close()
    assert server.requests == 1
