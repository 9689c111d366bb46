"""Cassettes (CONTRACT §23 "Record real exchanges for tests"): exchanges recorded once to
JSONL against a live server, replayed after with that server stopped; both wire styles,
plain and streamed; no request header and no key in the file; a request with no recording
is a ``CassetteMismatch`` naming the first differing field; the modes, ``ignore``, many
threads and a team run; the ``tn_cassette`` pytest fixture."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pytest

from _helpers import HANG
from conftest import run_in_thread
from toolnexus import AgentDef, CassetteMismatch, Client, ConfigError, LLMError, Runtime, tool
from toolnexus import testing
from toolnexus.testing import ScriptedLLMServer, ScriptedRoute, cassette, responder_by_model, text_completion

KEY = "sk-cassette-SECRET-4242"
ANSWER = "It is sunny in Oslo today"


@tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"{city}: sunny"


def openai_responder():
    return responder_by_model({"m": [{"calls": [("call_1", "weather", {"city": "Oslo"})]}, {"text": ANSWER}]})


def anthropic_responder():
    def respond(body):
        answered = any(
            isinstance(m["content"], list) and m["content"][0].get("type") == "tool_result" for m in body["messages"]
        )
        usage = {"input_tokens": 12, "output_tokens": 6}
        if answered:
            content = [{"type": "text", "text": ANSWER}]
            return {
                "id": "msg_2",
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": content,
                "stop_reason": "end_turn",
                "usage": usage,
            }
        content = [{"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Oslo"}}]
        return {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": content,
            "stop_reason": "tool_use",
            "usage": usage,
        }

    return respond


RESPONDERS = {"openai": openai_responder, "anthropic": anthropic_responder}


def client(base_url, style, **options):
    return Client(
        base_url=base_url, model="m", style=style, api_key=KEY, system_prompt="Be brief.", retry_base=0.001, **options
    )


def ask(base_url, style, streamed, prompt="Weather in Oslo?", **options):
    """One run with a tool call; with ``streamed``, through ``Client.stream`` (the text
    pieces are returned too)."""
    with client(base_url, style, **options) as c:
        if not streamed:
            return c.run(prompt, [weather]), []
        with c.stream(prompt, [weather]) as stream:
            pieces = [event.data["delta"] for event in stream if event.kind == "text"]
        return stream.result, pieces


def dead_url():
    """An endpoint where nothing listens any more (a server that was stopped)."""
    with ScriptedLLMServer() as server:
        url = server.base_url
    return url


def lines(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


# --- record, then replay with the server stopped ---------------------------------------------------


@pytest.mark.parametrize("streamed", [False, True], ids=["plain", "streamed"])
@pytest.mark.parametrize("style", ["openai", "anthropic"])
def test_a_recording_replays_with_the_server_stopped(tmp_path, style, streamed):
    path = tmp_path / "weather.jsonl"
    server = ScriptedLLMServer(RESPONDERS[style]())
    with server, cassette(path) as recording:
        live, live_pieces = run_in_thread(lambda: ask(server.base_url, style, streamed), HANG)
    assert (live.text, recording.recorded, recording.replayed, server.requests_seen) == (ANSWER, 2, 0, 2)
    with cassette(path) as replaying:  # the file exists: "once" replays only
        again, pieces = run_in_thread(lambda: ask(server.base_url, style, streamed), HANG)
    assert (again.text, again.tool_calls[0].output, again.usage) == (ANSWER, "Oslo: sunny", live.usage)
    assert (replaying.recorded, replaying.replayed) == (0, 2)
    assert pieces == live_pieces and (len(pieces) > 1) is streamed  # a stream replayed event by event


def test_the_file_holds_one_exchange_a_line_and_a_stream_as_received(tmp_path):
    path = tmp_path / "c.jsonl"
    with ScriptedLLMServer(RESPONDERS["anthropic"]()) as server, cassette(path):
        run_in_thread(lambda: ask(server.base_url, "anthropic", True), HANG)
    first, second = lines(path)
    assert list(first) == ["method", "path", "body", "status", "content_type", "response"]
    assert (first["method"], first["path"], first["status"], first["content_type"]) == (
        "POST",
        "/v1/messages",
        200,
        "text/event-stream",
    )
    assert first["body"]["stream"] is True and first["body"]["messages"] == [
        {"role": "user", "content": "Weather in Oslo?"}
    ]
    assert first["response"].startswith("event: message_start\ndata: ") and first["response"].endswith(
        'event: message_stop\ndata: {"type": "message_stop"}\n\n'
    )
    assert second["body"]["messages"][-1]["content"][0]["type"] == "tool_result"


def test_no_request_header_and_no_key_is_written(tmp_path):
    path = tmp_path / "c.jsonl"
    headers = {"X-Api-Token": "tok-77665544", "X-Team": "team-blue-9"}

    def echo(request):  # a server that echoes the credentials it was sent
        return text_completion(
            request.json(), f"you sent {request.headers['Authorization']} and {request.headers['X-Api-Token']}"
        )

    with ScriptedRoute(echo), cassette(path):
        result = client("https://llm.test/v1", "openai", headers=headers).run("hi")
    assert KEY in result.text  # the reply did carry it
    text = path.read_text(encoding="utf-8")
    for secret in (KEY, "tok-77665544", "team-blue-9", "Authorization", "x-api-key", "X-Team"):
        assert secret not in text
    assert "you sent *** and ***" in text


def test_a_replayed_stream_decodes_like_a_live_one_with_its_usage(tmp_path):
    path = tmp_path / "c.jsonl"
    with ScriptedLLMServer(responder_by_model({"m": [{"text": "one two three"}]})) as server, cassette(path):
        live, _ = ask(server.base_url, "openai", True, prompt="count")
    with cassette(path, "none"):
        again, pieces = ask(dead_url(), "openai", True, prompt="count")
    assert (again.text, again.usage.total_tokens, pieces) == (
        "one two three",
        live.usage.total_tokens,
        ["one ", "two ", "three"],
    )


# --- mismatches ------------------------------------------------------------------------------------------


def record_weather(path):
    with ScriptedLLMServer(openai_responder()) as server, cassette(path):
        ask(server.base_url, "openai", False)


def test_a_request_with_no_recording_names_the_first_differing_field(tmp_path):
    path = tmp_path / "c.jsonl"
    record_weather(path)
    with cassette(path, "none"), pytest.raises(CassetteMismatch) as caught:
        ask(dead_url(), "openai", False, prompt="Weather in Bergen?")
    message = str(caught.value)
    assert "POST /v1/chat/completions" in message and "messages[1].content" in message
    assert '"Weather in Oslo?"' in message and '"Weather in Bergen?"' in message
    assert isinstance(caught.value, LLMError) and caught.value.status is None


def test_a_path_with_no_recording_at_all_says_there_is_none(tmp_path):
    path = tmp_path / "c.jsonl"
    record_weather(path)
    with cassette(path, "none"), pytest.raises(CassetteMismatch, match="has no recording of POST /v1/messages"):
        ask(dead_url(), "anthropic", False)


def test_a_mismatch_is_never_retried_nor_offered_to_on_error(tmp_path):
    path = tmp_path / "c.jsonl"
    record_weather(path)
    seen = []
    with cassette(path, "none"), pytest.raises(CassetteMismatch):
        ask(dead_url(), "openai", False, prompt="other", retries=3, on_error=lambda info: seen.append(info) or "retry")
    assert seen == []


def test_each_recording_serves_one_request(tmp_path):
    path = tmp_path / "c.jsonl"
    with ScriptedLLMServer(responder_by_model({"m": [{"text": "first"}, {"text": "second"}]})) as server, cassette(
        path
    ):
        texts = [client(server.base_url, "openai").run("same").text for _ in range(2)]
    with cassette(path, "none") as replaying:
        again = [client(dead_url(), "openai").run("same").text for _ in range(2)]
        with pytest.raises(CassetteMismatch, match="already used"):
            client(dead_url(), "openai").run("same")
    assert again == texts == ["first", "second"]
    assert replaying.replayed == 2


def test_a_runtime_turn_that_meets_a_mismatch_ends_error_with_it_in_its_text(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text("", encoding="utf-8")
    with cassette(path, "none"), Runtime({"solo": AgentDef("solo", "answers")}, base_url=dead_url(), model="m") as rt:
        result = run_in_thread(lambda: rt.run_agent("solo", "hi"), HANG)
    assert result.status == "error"
    assert "no recorded exchange for POST /v1/chat/completions" in result.text


# --- modes ---------------------------------------------------------------------------------------------


def test_mode_none_without_a_file_is_a_config_error_naming_it(tmp_path):
    path = tmp_path / "missing.jsonl"
    with pytest.raises(ConfigError, match="missing.jsonl"):
        with cassette(path, "none"):
            pass


def test_an_unknown_mode_is_a_config_error():
    with pytest.raises(ConfigError, match="'sometimes'"):
        cassette("x.jsonl", "sometimes")


def test_once_with_a_file_never_reaches_the_network(tmp_path):
    path = tmp_path / "c.jsonl"
    record_weather(path)
    with ScriptedLLMServer(openai_responder()) as server, cassette(path) as replaying:
        result, _ = ask(server.base_url, "openai", False)
    assert (result.text, server.requests_seen, replaying.replaying) == (ANSWER, 0, True)


def test_once_with_an_empty_file_records(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text("", encoding="utf-8")
    record_weather(path)
    assert len(lines(path)) == 2


def test_all_goes_to_the_network_and_rewrites_the_file(tmp_path):
    path = tmp_path / "c.jsonl"
    for answer in ("old", "new"):
        with ScriptedLLMServer(responder_by_model({"m": [{"text": answer}]})) as server, cassette(
            path, "all"
        ) as recording:
            assert client(server.base_url, "openai").run("q").text == answer
        assert (server.requests_seen, recording.recorded) == (1, 1)
    [exchange] = lines(path)
    assert json.loads(exchange["response"])["choices"][0]["message"]["content"] == "new"


def test_nothing_recorded_in_once_writes_no_file(tmp_path):
    path = tmp_path / "c.jsonl"
    with cassette(path) as recording:
        pass
    assert recording.recorded == 0 and not path.exists()


def test_a_broken_line_is_a_config_error_naming_the_file_and_line(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"method": "POST"}\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="c.jsonl line 1"):
        with cassette(path, "none"):
            pass


# --- ignore ----------------------------------------------------------------------------------------


def test_ignored_fields_are_left_out_of_matching(tmp_path):
    path = tmp_path / "c.jsonl"
    with ScriptedLLMServer(responder_by_model({"m": [{"text": "hello"}]})) as server, cassette(path):
        client(server.base_url, "openai", request_params={"user": "alice"}).run("hi")
    with cassette(path, "none", ignore=["user"]):
        assert client(dead_url(), "openai", request_params={"user": "bob"}).run("hi").text == "hello"
    with cassette(path, "none"), pytest.raises(
        CassetteMismatch, match=r"differs first at user: recorded \"alice\", sent \"bob\""
    ):
        client(dead_url(), "openai", request_params={"user": "bob"}).run("hi")


def test_a_star_in_an_ignored_path_matches_any_index(tmp_path):
    path = tmp_path / "c.jsonl"
    with ScriptedLLMServer(responder_by_model({"m": [{"text": "hello"}]})) as server, cassette(path):
        client(server.base_url, "openai").run("first words")
    with cassette(path, "none", ignore=["messages.*.content"]):
        assert client(dead_url(), "openai").run("other words").text == "hello"


@pytest.mark.parametrize("bad", ["", "messages..name", ".user"])
def test_an_ignored_path_that_is_not_a_dotted_path_is_a_config_error(bad):
    with pytest.raises(ConfigError, match="dotted path"):
        cassette("c.jsonl", ignore=[bad])


# --- every client, every thread -------------------------------------------------------------------------


def test_clients_built_before_the_block_on_many_threads_are_recorded_and_replayed(tmp_path):
    path = tmp_path / "c.jsonl"
    prompts = [f"question {n}" for n in range(6)]
    respond = lambda body: text_completion(body, "answer to " + body["messages"][-1]["content"])  # noqa: E731

    def ask_all(base_url):
        with client(base_url, "openai") as shared:  # one client for all threads, built before the block
            with cassette(path) as active:
                answers = {}
                threads = [
                    threading.Thread(target=lambda p=p: answers.__setitem__(p, shared.run(p).text)) for p in prompts
                ]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join(HANG)
        return answers, active

    with ScriptedLLMServer(respond) as server:
        live, recording = ask_all(server.base_url)
    replayed, replaying = ask_all(dead_url())
    assert live == replayed == {p: f"answer to {p}" for p in prompts}
    assert (recording.recorded, replaying.replayed) == (6, 6)


def test_a_team_run_is_recorded_and_replayed(tmp_path):
    path = tmp_path / "team.jsonl"
    script = {
        "lead": [
            {"calls": [("t1", "task", {"agent": "scout", "prompt": "find the weather"})]},
            {"text": "Scout says: sunny"},
        ],
        "scout": [{"calls": [("w1", "weather", {"city": "Oslo"})]}, {"text": "sunny"}],
    }
    registry = {
        "lead": AgentDef("lead", "leads", model="lead", team=["scout"]),
        "scout": AgentDef("scout", "finds things", model="scout", tools=[weather]),
    }

    def run(base_url):
        with Runtime(registry, base_url=base_url, model="lead") as rt:
            return run_in_thread(lambda: rt.run_agent("lead", "What is the weather?"), HANG)

    with ScriptedLLMServer(responder_by_model(script)) as server, cassette(path) as recording:
        live = run(server.base_url)
    with cassette(path, "none") as replaying:
        again = run(dead_url())
    assert (live.status, live.text) == (again.status, again.text) == ("done", "Scout says: sunny")
    assert again.total_tokens == live.total_tokens
    assert recording.recorded == replaying.replayed == 4


def test_cassette_mismatch_is_exported_from_both_modules():
    assert testing.CassetteMismatch is CassetteMismatch
    assert issubclass(CassetteMismatch, LLMError)


# --- the pytest plugin ---------------------------------------------------------------------------------

SAMPLE = """
import os
import pytest
from toolnexus import Client


@pytest.mark.parametrize("word", ["hi"])
def test_asks(tn_cassette, word):
    with Client(base_url=os.environ["SAMPLE_URL"], model="m", api_key="sk-sample-key-1234") as client:
        assert client.run(word).text == "hello"
    assert tn_cassette.mode == os.environ["SAMPLE_MODE"]
"""


def run_pytest(folder, url, mode):
    options = [] if mode == "once" else [f"--tn-record={mode}"]
    environment = {**os.environ, "SAMPLE_URL": url, "SAMPLE_MODE": mode}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *options, "test_sample.py"]
    return subprocess.run(command, cwd=folder, env=environment, capture_output=True, text=True, timeout=60)


def test_the_tn_cassette_fixture_records_beside_the_test_file_and_replays_with_tn_record_none(tmp_path):
    (tmp_path / "test_sample.py").write_text(SAMPLE, encoding="utf-8")
    with ScriptedLLMServer(responder_by_model({"m": [{"text": "hello"}]})) as server:
        recorded = run_pytest(tmp_path, server.base_url, "once")
        url = server.base_url
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    path = tmp_path / "cassettes" / "test_sample" / "test_asks[hi].jsonl"
    assert len(lines(path)) == 1 and "sk-sample-key-1234" not in path.read_text(encoding="utf-8")
    replayed = run_pytest(tmp_path, url, "none")  # the server is stopped
    assert replayed.returncode == 0, replayed.stdout + replayed.stderr
    again = run_pytest(tmp_path, url, "all")  # "all" goes to the network: nothing listens
    assert again.returncode == 1 and "connection refused" in again.stdout
