"""Which way a request goes, decided once when the client is built (CONTRACT §8
``session``): the library's own session with no proxy goes straight to its connection
pool, whoever patched ``requests``; a host's session goes through ``Session.send`` (its
hooks run, and the host's own mock answers); a proxy goes through the adapter. A test's
``ScriptedRoute`` stands in front of every route while its block runs, and only then."""

from __future__ import annotations

import socket

import requests
import responses

from _helpers import HANG
from _rawserver import completion
from conftest import run_in_thread
from toolnexus import Client
from toolnexus.testing import ScriptedRoute


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


def test_a_client_built_while_requests_is_patched_still_goes_direct(servers):
    server = servers(lambda ex: ex.reply(completion("real")))
    with responses.RequestsMock(assert_all_requests_are_fired=False) as mock:
        mock.post(server.base_url + "/chat/completions", json=mocked_reply("patched"))
        with Client(base_url=server.base_url, model="m", retries=0) as client:
            assert route_of(client) == "direct"  # the package never asks who patched what
            assert run_in_thread(lambda: client.run("go"), HANG).text == "real"
    assert server.requests == 1


def test_a_host_session_mocked_by_the_host_is_honoured_through_session_send():
    session = requests.Session()
    with responses.RequestsMock() as mock:
        mock.post("https://llm.test/v1/chat/completions", json=mocked_reply("the host's mock"))
        with Client(base_url="https://llm.test/v1", model="m", retries=0, session=session) as client:
            assert route_of(client) == "requests"
            assert run_in_thread(lambda: client.run("go"), HANG).text == "the host's mock"
    session.close()


def test_a_scripted_route_serves_clients_built_before_it_until_its_block_ends(servers, via):
    server = servers(lambda ex: ex.reply(completion("real")))
    with Client(base_url=server.base_url, model="m", retries=0, **via) as client:
        route = route_of(client)
        with ScriptedRoute(lambda request: mocked_reply("scripted")) as scripted:
            assert run_in_thread(lambda: client.run("go"), HANG).text == "scripted"
        assert run_in_thread(lambda: client.run("go"), HANG).text == "real"
        assert route_of(client) == route  # the route chosen at build time is unchanged
    assert server.requests == 1
    assert [request.path for request in scripted.requests] == ["/v1/chat/completions"]


def test_a_scripted_route_for_one_base_url_lets_other_endpoints_through(servers):
    server = servers(lambda ex: ex.reply(completion("real")))
    with ScriptedRoute(lambda request: mocked_reply("scripted"), base_url="https://llm.test/v1"):
        with Client(base_url="https://llm.test/v1", model="m") as scripted:
            assert run_in_thread(lambda: scripted.run("go"), HANG).text == "scripted"
        with Client(base_url=server.base_url, model="m") as real:
            assert run_in_thread(lambda: real.run("go"), HANG).text == "real"
    assert server.requests == 1
