"""Replies as real servers frame them (CONTRACT §13): whatever way a reply is cut into
packets, framed (``Content-Length``, chunked, end of connection) or preceded (an interim
``100 Continue``), the client reads it whole, keeps the connection only when the reply
leaves it reusable, and turns a reply that is not HTTP into an ``LLMError``; on both
routes (the client's own session, which goes direct, and a host-supplied session)."""

from __future__ import annotations

import socket

import pytest

from _helpers import HANG
from _rawserver import completion
from conftest import run_in_thread
from toolnexus import Client, LLMError


def route_of(client):
    return client._engine.model.transport.route


def ask_twice(server, via, **options):
    """Two runs on one client; returns their texts."""
    with Client(base_url=server.base_url, model="m", retries=0, **via, **options) as client:
        assert route_of(client) == ("requests" if via else "direct")
        return [run_in_thread(lambda: client.run("go"), HANG).text for _ in range(2)]


def in_pieces(ex, data, size):
    """Send ``data`` in pieces of ``size`` bytes, each its own write (Nagle off)."""
    ex.conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    for start in range(0, len(data), size):
        ex.send(data[start:start + size])


def head(length=None, extra=""):
    size = f"Content-Length: {length}\r\n" if length is not None else ""
    return f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n{size}{extra}\r\n".encode()


def chunked(body, sizes=(7, 1, 30)):
    """``body`` in chunks of the given sizes (the rest in one last chunk), with a chunk
    extension on the first and a trailer field after the last."""
    out, start = [], 0
    for index, size in enumerate(sizes):
        piece = body[start:start + size]
        start += size
        extension = b";name=value" if index == 0 else b""
        out.append(b"%x%s\r\n%s\r\n" % (len(piece), extension, piece))
    if start < len(body):
        out.append(b"%X\r\n%s\r\n" % (len(body) - start, body[start:]))
    return b"".join(out) + b"0\r\nX-Trailer: yes\r\n\r\n"


@pytest.mark.parametrize("size", [1, 5, 64])
def test_a_reply_that_arrives_in_small_pieces_is_read_whole_and_the_connection_kept(servers, size, via):
    body = completion("pieces")
    server = servers(lambda ex: in_pieces(ex, head(len(body)) + body, size))
    assert ask_twice(server, via) == ["pieces", "pieces"]
    assert server.accepted == 1


def test_a_chunked_reply_with_extensions_and_trailers_is_read_whole(servers, via):
    body = completion("chunks")
    server = servers(lambda ex: in_pieces(ex, head(extra="Transfer-Encoding: chunked\r\n") + chunked(body), 9))
    assert ask_twice(server, via) == ["chunks", "chunks"]
    assert server.accepted == 1


def test_an_interim_continue_before_the_reply_is_skipped(servers, via):
    body = completion("after continue")
    server = servers(lambda ex: ex.send(b"HTTP/1.1 100 Continue\r\n\r\n" + head(len(body)) + body))
    assert ask_twice(server, via) == ["after continue", "after continue"]


def test_headers_folded_or_ended_by_bare_newlines_are_read(servers, via):
    body = completion("lenient")
    reply = b"HTTP/1.1 200 OK\nContent-Type: application/json\nX-Long: one\n two\nContent-Length: %d\n\n%s" % (len(body), body)
    server = servers(lambda ex: ex.send(reply))
    assert ask_twice(server, via) == ["lenient", "lenient"]


def test_a_reply_asking_to_close_the_connection_gets_a_fresh_one_next_time(servers, via):
    body = completion("bye")
    server = servers(lambda ex: ex.send(head(len(body), "Connection: close\r\n") + body))
    assert ask_twice(server, via) == ["bye", "bye"]
    assert server.accepted == 2


def test_a_reply_without_a_length_is_read_to_the_end_of_the_connection(servers, via):
    body = completion("to the end")

    def script(ex):
        ex.send(head() + body)
        ex.hang_up()

    server = servers(script)
    assert ask_twice(server, via) == ["to the end", "to the end"]
    assert server.accepted == 2


def test_bytes_past_the_declared_length_are_not_read_as_the_next_reply(servers, via):
    body = completion("exact")
    server = servers(lambda ex: ex.send(head(len(body)) + body + b"HTTP/1.1 200 OK\r\n"))
    assert ask_twice(server, via) == ["exact", "exact"]
    if not via:  # through urllib3, bytes buffered past a reply are dropped with it instead
        assert server.accepted == 2  # the connection with stray bytes was not reused


def test_an_http_10_reply_closes_its_connection(servers, via):
    body = completion("old")
    server = servers(lambda ex: ex.send(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)))
    assert ask_twice(server, via) == ["old", "old"]
    assert server.accepted == 2


@pytest.mark.parametrize("reply", [
    b"ICY 200 OK\r\n\r\n",
    b"HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Length: 5, 6\r\n\r\nhello",
    b"HTTP/1.1 200 OK\r\nX-Big: " + b"x" * 70000 + b"\r\n\r\n",
], ids=["not HTTP", "four-digit status", "length not a number", "two lengths", "headers too long"])
def test_a_reply_that_is_not_http_is_an_llm_error_naming_it(servers, reply, via):
    server = servers(lambda ex: ex.send(reply))
    with pytest.raises(LLMError) as caught:
        ask_twice(server, via)
    assert "malformed reply" in str(caught.value)
    assert caught.value.status is None


def test_a_connection_closed_before_any_reply_is_an_llm_error(servers, via):
    server = servers(lambda ex: ex.hang_up())
    with pytest.raises(LLMError) as caught:
        ask_twice(server, via)
    assert "connection" in caught.value.cause


def test_a_chunk_longer_than_its_declared_size_is_an_llm_error(servers, via):
    def script(ex):
        ex.send(head(extra="Transfer-Encoding: chunked\r\n") + b"2\r\nabcdef\r\n0\r\n\r\n")
        ex.hang_up()

    server = servers(script)
    with pytest.raises(LLMError) as caught:
        ask_twice(server, via)
    assert "chunked" in str(caught.value)


def test_a_429_read_by_the_direct_path_still_gives_its_retry_after(servers):
    busy = b'{"error": "slow down"}'

    def script(ex):
        if ex.index == 1:
            ex.reply(busy, status=429, extra="Retry-After: 0\r\n")
        else:
            ex.reply(completion("later"))

    server = servers(script)
    with Client(base_url=server.base_url, model="m", retries=1, retry_base=60) as client:
        assert run_in_thread(lambda: client.run("go"), HANG).text == "later"
    assert server.requests == 2


def test_a_kept_alive_connection_the_server_closed_is_replaced_at_once(servers, via):
    import threading

    body = completion("again")
    hung_up = threading.Semaphore(0)

    def script(ex):
        ex.reply(body)  # no "Connection: close", yet the server hangs up after the reply
        ex.hang_up()
        hung_up.release()

    server = servers(script)
    texts = []
    with Client(base_url=server.base_url, model="m", retries=0, **via) as client:
        for _ in range(3):
            texts.append(run_in_thread(lambda: client.run("go"), HANG).text)
            # closed while idle, before the next request (a server that hangs up on a
            # request already sent is another case: a POST cannot be sent again blindly)
            assert hung_up.acquire(timeout=HANG)
    assert texts == ["again"] * 3
    assert server.requests == 3
    assert server.accepted == 3


def test_an_interrupt_is_not_taken_for_a_closed_connection_and_retried(servers, via):
    """A kept-alive connection shut down by ``interrupt`` ends the turn; it is not
    replaced and the request is not sent again."""
    import threading

    from toolnexus import AgentDef, Runtime

    body = completion("first")
    headers_read = threading.Event()

    def script(ex):
        if ex.index == 1:
            ex.reply(body)
        else:
            headers_read.set()
            ex.stall()

    server = servers(script)
    rt = Runtime({"m": AgentDef("m", "Talks over HTTP.")}, base_url=server.base_url, model="m", retries=0, **via)
    try:
        assert run_in_thread(lambda: rt.run_agent("m", "go"), HANG).text == "first"
        h = rt.spawn(rt.root, "m")
        rt.wake(h, "again")
        assert headers_read.wait(HANG)
        rt.interrupt(h)
        assert run_in_thread(lambda: rt.wait(h, timeout=HANG), HANG).status == "interrupted"
        assert server.requests == 2
    finally:
        run_in_thread(lambda: rt.close(rt.root), HANG)


def test_work_given_to_while_waiting_runs_once_while_the_reply_is_awaited(servers):
    """``post_json(while_waiting=...)`` runs its work after the request is out and before
    the reply is read: a server that answers only once that work has run still answers."""
    import threading

    from toolnexus._model.transport import Transport

    ran = threading.Event()
    calls = []

    def script(ex):
        if ran.wait(HANG):  # the client runs its work before it reads the reply
            ex.reply(completion("overlapped"))

    server = servers(script)

    def work():
        calls.append(1)
        ran.set()

    transport = Transport(url=server.base_url + "/chat/completions", headers={}, retries=0)
    try:
        reply = run_in_thread(lambda: transport.post_json({"model": "m", "messages": []}, while_waiting=work), HANG)
    finally:
        transport.close()
    assert reply["choices"][0]["message"]["content"] == "overlapped"
    assert calls == [1]
