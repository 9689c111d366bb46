"""Client over HTTP: request shapes, tool loops, retries and errors (CONTRACT §8, Appendix)."""

from __future__ import annotations

import json
import time

import pytest
import requests
import responses
from responses import matchers
from responses.registries import OrderedRegistry

from toolnexus import Client, ConfigError, InMemoryStore, LLMError, Tool, Toolkit
from toolnexus._model.transport import _retry_delay, retry_after_seconds

OPENAI_BASE = "https://llm.test/v1"
OPENAI_URL = OPENAI_BASE + "/chat/completions"
ANTHROPIC_BASE = "https://anth.test"
ANTHROPIC_URL = ANTHROPIC_BASE + "/v1/messages"
KEY = "sk-SECRET-0123456789"

ECHO_SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}


def echo_tool() -> Tool:
    return Tool("echo", "Echo text back.", ECHO_SCHEMA, lambda args, ctx: f"echo:{args['text']}")


def openai_client(**options) -> Client:
    options.setdefault("api_key", KEY)
    options.setdefault("retry_base", 0.001)
    return Client(base_url=OPENAI_BASE, model="gpt-test", **options)


def anthropic_client(**options) -> Client:
    options.setdefault("api_key", KEY)
    options.setdefault("retry_base", 0.001)
    return Client(base_url=ANTHROPIC_BASE, model="claude-test", style="anthropic", **options)


def run_expecting_llm_error(**options) -> LLMError:
    """Run one prompt on ``openai_client(**options)``; it must raise LLMError, which is returned."""
    with openai_client(**options) as client:
        with pytest.raises(LLMError) as info:
            client.run("x")
    return info.value


def oa_text(text: str, prompt_tokens: int = 1, completion_tokens: int = 1) -> dict:
    return {
        "choices": [{"message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": prompt_tokens + completion_tokens},
    }


def oa_calls(*calls: tuple[str, str, str], prompt_tokens: int = 1, completion_tokens: int = 1) -> dict:
    wire = [{"id": cid, "type": "function", "function": {"name": name, "arguments": args}} for cid, name, args in calls]
    return {
        "choices": [{"message": {"role": "assistant", "content": None, "tool_calls": wire}}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": prompt_tokens + completion_tokens},
    }


def an_text(text: str, inp: int = 1, out: int = 1) -> dict:
    return {"content": [{"type": "text", "text": text}], "usage": {"input_tokens": inp, "output_tokens": out}}


# --- request shapes --------------------------------------------------------------------------


def test_openai_request_without_tools_has_exact_body_and_headers(scripted):
    scripted.add(json=oa_text("hi"))
    with openai_client(system_prompt="sys") as client:
        result = client.run("hello")
    assert result.text == "hi"
    assert result.status == "done"
    sent = scripted.requests[0]
    assert (sent.method, sent.url) == ("POST", OPENAI_URL)
    messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "hello"}]
    assert sent.json() == {"model": "gpt-test", "messages": messages}
    assert (sent.headers["Authorization"], sent.headers["Content-Type"]) == (f"Bearer {KEY}", "application/json")
    assert "x-api-key" not in sent.headers


def test_openai_request_with_tools_adds_tools_and_tool_choice_auto(scripted):
    kit = Toolkit([echo_tool()])
    scripted.add(json=oa_text("hi"))
    with openai_client() as client:
        assert client.run("hello", kit).text == "hi"
    messages = [{"role": "user", "content": "hello"}]
    expected = {"model": "gpt-test", "messages": messages, "tools": kit.to_openai(), "tool_choice": "auto"}
    assert scripted.requests[0].json() == expected


def test_request_params_are_merged_into_every_body_and_win(scripted):
    body = {"model": "gpt-test", "messages": [{"role": "user", "content": "x"}], "temperature": 0, "tool_choice": "none"}
    scripted.add(json=oa_calls(("c1", "echo", '{"text":"a"}')))
    scripted.add(json=oa_text("done"))
    with openai_client(request_params={"temperature": 0, "tool_choice": "none"}) as client:
        client.run("x", Toolkit([echo_tool()]))
    first, second = (request.json() for request in scripted.requests)
    assert first == {**body, "tools": Toolkit([echo_tool()]).to_openai()}
    assert (second["temperature"], second["tool_choice"]) == (0, "none")


def test_extra_headers_are_sent(scripted):
    scripted.add(json=oa_text("ok"))
    with openai_client(headers={"X-Team": "blue"}) as client:
        assert client.run("x").text == "ok"
    sent = scripted.requests[0].headers
    assert (sent["X-Team"], sent["Authorization"]) == ("blue", f"Bearer {KEY}")


def test_anthropic_request_without_tools_has_exact_body_and_headers(scripted):
    scripted.add(json=an_text("hi"))
    with anthropic_client(system_prompt="sys") as client:
        result = client.run("hello")
    assert result.text == "hi"
    sent = scripted.requests[0]
    assert (sent.method, sent.url) == ("POST", ANTHROPIC_URL)
    messages = [{"role": "user", "content": "hello"}]
    assert sent.json() == {"model": "claude-test", "max_tokens": 4096, "messages": messages, "system": "sys"}
    assert (sent.headers["x-api-key"], sent.headers["anthropic-version"]) == (KEY, "2023-06-01")
    assert sent.headers["Content-Type"] == "application/json"
    assert "Authorization" not in sent.headers
    assert result.messages == [{"role": "user", "content": "hello"}, {"role": "assistant", "content": [{"type": "text", "text": "hi"}]}]


def test_anthropic_request_with_tools_has_no_tool_choice(scripted):
    kit = Toolkit([echo_tool()])
    scripted.add(json=an_text("hi"))
    with anthropic_client() as client:
        assert client.run("q", kit).text == "hi"
    messages = [{"role": "user", "content": "q"}]
    expected = {"model": "claude-test", "max_tokens": 4096, "messages": messages, "tools": kit.to_anthropic()}
    assert scripted.requests[0].json() == expected


def test_anthropic_max_tokens_overridden_by_request_params(scripted):
    scripted.add(json=an_text("hi"))
    with anthropic_client(request_params={"max_tokens": 99}) as client:
        assert client.run("q").text == "hi"
    messages = [{"role": "user", "content": "q"}]
    assert scripted.requests[0].json() == {"model": "claude-test", "max_tokens": 99, "messages": messages}


def test_anthropic_base_url_already_ending_in_v1_is_not_doubled(scripted):
    scripted.add(json=an_text("hi"))
    with Client(base_url=ANTHROPIC_BASE + "/v1", model="m", style="anthropic", api_key=KEY) as client:
        assert client.run("q").text == "hi"
    assert scripted.requests[0].url == ANTHROPIC_URL


# --- multi-turn tool loops --------------------------------------------------------------------


def test_openai_tool_loop_feeds_results_back_and_sums_usage(scripted):
    kit = Toolkit([echo_tool()])
    tools = kit.to_openai()
    user = {"role": "user", "content": "go"}
    assistant1 = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "echo", "arguments": '{"text":"a"}'}},
            {"id": "c2", "type": "function", "function": {"name": "echo", "arguments": '{"text":"b"}'}},
        ],
    }
    results1 = [{"role": "tool", "tool_call_id": "c1", "content": "echo:a"}, {"role": "tool", "tool_call_id": "c2", "content": "echo:b"}]
    assistant2 = {"role": "assistant", "content": "", "tool_calls": [{"id": "c3", "type": "function", "function": {"name": "echo", "arguments": '{"text":"c"}'}}]}
    results2 = [{"role": "tool", "tool_call_id": "c3", "content": "echo:c"}]

    def expect(messages):
        return {"model": "gpt-test", "messages": messages, "tools": tools, "tool_choice": "auto"}

    calls = (("c1", "echo", '{"text":"a"}'), ("c2", "echo", '{"text":"b"}'))
    scripted.add(json=oa_calls(*calls, prompt_tokens=10, completion_tokens=2))
    scripted.add(json=oa_calls(("c3", "echo", '{"text":"c"}'), prompt_tokens=20, completion_tokens=3))
    scripted.add(json=oa_text("all done", prompt_tokens=30, completion_tokens=4))
    with openai_client() as client:
        result = client.run("go", kit)
    sent = [request.json() for request in scripted.requests]
    second = [user, assistant1, *results1]
    assert sent == [expect([user]), expect(second), expect([*second, assistant2, *results2])]
    assert result.status == "done"
    assert result.text == "all done"
    assert result.turns == 3
    assert result.tool_call_count == 3
    assert [r.output for r in result.tool_calls] == ["echo:a", "echo:b", "echo:c"]
    assert (result.usage.prompt_tokens, result.usage.completion_tokens, result.usage.total_tokens) == (60, 9, 69)
    assert result.messages[-1] == {"role": "assistant", "content": "all done"}
    assert len(scripted.requests) == 3


def test_anthropic_tool_loop_sends_one_user_message_of_tool_result_blocks(scripted):
    kit = Toolkit([echo_tool(), Tool("boom", "fails", None, lambda a, c: (_ for _ in ()).throw(RuntimeError("kaput")))])
    tools = kit.to_anthropic()
    blocks1 = [
        {"type": "text", "text": "calling"},
        {"type": "tool_use", "id": "tu1", "name": "echo", "input": {"text": "a"}},
        {"type": "tool_use", "id": "tu2", "name": "boom", "input": {}},
    ]
    user = {"role": "user", "content": "go"}
    results = {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "tu1", "content": "echo:a"},
            {"type": "tool_result", "tool_use_id": "tu2", "content": "tool boom failed: kaput", "is_error": True},
        ],
    }

    def expect(messages):
        return {"model": "claude-test", "max_tokens": 4096, "system": "sys", "messages": messages, "tools": tools}

    scripted.add(json={"content": blocks1, "usage": {"input_tokens": 5, "output_tokens": 6}})
    scripted.add(json=an_text("fin", 7, 8))
    with anthropic_client(system_prompt="sys") as client:
        result = client.run("go", kit)
    sent = [request.json() for request in scripted.requests]
    assert sent == [expect([user]), expect([user, {"role": "assistant", "content": blocks1}, results])]
    assert result.status == "done"
    assert result.text == "fin"
    assert result.turns == 2
    assert (result.usage.prompt_tokens, result.usage.completion_tokens, result.usage.total_tokens) == (12, 14, 26)
    assert result.messages[2] == results
    assert [r.is_error for r in result.tool_calls] == [False, True]


# --- retries ---------------------------------------------------------------------------------


def test_429_with_retry_after_zero_is_retried_without_backoff(scripted):
    scripted.add(status=429, json={"error": "slow down"}, headers={"Retry-After": "0"})
    scripted.add(json=oa_text("ok"))
    started = time.perf_counter()
    with openai_client(retry_base=3) as client:  # backoff would take >= 3 s
        result = client.run("x")
    assert result.text == "ok"
    assert time.perf_counter() - started < 1.5
    assert len(scripted.requests) == 2


def test_503_is_retried_then_llm_error_after_retries_exhausted(scripted):
    for _ in range(3):
        scripted.add(status=503, body="overloaded")
    error = run_expecting_llm_error(retries=2)
    assert error.status == 503
    assert "overloaded" in error.body_excerpt
    assert len(scripted.requests) == 3


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504])
def test_each_retryable_status_is_retried(scripted, status):
    scripted.add(status=status, body="x", headers={"Retry-After": "0"})
    scripted.add(json=oa_text("ok"))
    with openai_client() as client:
        assert client.run("x").text == "ok"


def test_non_digit_retry_after_falls_back_to_backoff(scripted):
    scripted.add(status=503, body="x", headers={"Retry-After": "3.5"})
    scripted.add(status=503, body="x", headers={"Retry-After": "Wed, 21 Oct 2099 07:28:00 GMT"})
    scripted.add(json=oa_text("ok"))
    started = time.perf_counter()
    with openai_client(retry_base=0.001) as client:
        assert client.run("x").text == "ok"
    assert time.perf_counter() - started < 1.5  # neither header was honoured as a delay


def test_retry_after_parsing_accepts_only_ascii_digits():
    assert retry_after_seconds("0") == 0
    assert retry_after_seconds("7") == 7
    assert retry_after_seconds("1.5") is None
    assert retry_after_seconds("-1") is None
    assert retry_after_seconds("٣") is None  # a non-ASCII digit
    assert retry_after_seconds("Wed, 21 Oct 2015 07:28:00 GMT") is None
    assert retry_after_seconds(None) is None


def test_retry_delay_uses_backoff_when_retry_after_is_not_digits():
    response = requests.Response()
    response.headers["Retry-After"] = "soon"
    delay = _retry_delay(response, 1, 0.1)
    assert 0.2 <= delay <= 0.3  # base * 2**attempt plus jitter below base
    response.headers["Retry-After"] = "4"
    assert _retry_delay(response, 1, 0.1) == 4


def test_on_error_fail_stops_retrying_and_gets_the_info_dict(scripted):
    scripted.add(status=503, body="busy")
    scripted.add(json=oa_text("never"))
    seen = []

    def on_error(info):
        seen.append(info)
        return "fail"

    error = run_expecting_llm_error(on_error=on_error, retries=3)
    assert error.status == 503
    assert len(scripted.requests) == 1
    assert len(seen) == 1
    assert set(seen[0]) == {"error", "status", "attempt", "retryable"}
    assert seen[0]["status"] == 503
    assert seen[0]["attempt"] == 0
    assert seen[0]["retryable"] is True
    assert isinstance(seen[0]["error"], str)


def test_on_error_retry_is_called_once_per_failed_attempt_and_bounded_by_retries(scripted):
    for _ in range(3):
        scripted.add(status=400, body="bad")
    seen = []

    def on_error(info):
        seen.append(info)
        return "retry"

    with openai_client(on_error=on_error, retries=2) as client:
        with pytest.raises(LLMError):
            client.run("x")
    assert len(scripted.requests) == 3
    assert [i["attempt"] for i in seen] == [0, 1, 2]
    assert all(i["retryable"] is False for i in seen)


# --- errors ----------------------------------------------------------------------------------


def assert_key_free(exc: BaseException) -> None:
    assert KEY not in str(exc)
    assert KEY not in repr(exc)
    assert KEY not in getattr(exc, "body_excerpt", "")


def test_non_json_200_raises_llm_error_without_retry(scripted):
    scripted.add(body="<html>gateway says hi</html>", status=200)
    error = run_expecting_llm_error()
    assert error.status == 200
    assert "gateway says hi" in error.body_excerpt
    assert len(scripted.requests) == 1
    assert_key_free(error)


def test_empty_choices_raise_llm_error(scripted):
    scripted.add(json={"choices": []})
    error = run_expecting_llm_error()
    assert error.status == 200
    assert "choices" in error.body_excerpt
    assert_key_free(error)


def test_http_400_is_not_retried_and_the_echoed_key_is_scrubbed(scripted):
    scripted.add(status=400, body=f"invalid request for key {KEY}")
    scripted.add(json=oa_text("never"))
    error = run_expecting_llm_error()
    assert error.status == 400
    assert "invalid request" in error.body_excerpt
    assert len(scripted.requests) == 1
    assert_key_free(error)


def test_connection_error_is_retried_then_raises_llm_error(scripted):
    for _ in range(3):
        scripted.add(error=requests.ConnectionError(f"refused while sending {KEY}"))
    error = run_expecting_llm_error(retries=2)
    assert error.status is None
    assert "refused" in error.body_excerpt
    assert len(scripted.requests) == 3
    assert_key_free(error)


def test_connection_error_then_success_recovers(scripted):
    scripted.add(error=requests.ConnectionError("reset"))
    scripted.add(json=oa_text("ok"))
    with openai_client() as client:
        assert client.run("x").text == "ok"


@pytest.mark.parametrize("key", ["messages", "tools", "stream"])
def test_request_params_refuse_reserved_keys(key):
    with pytest.raises(ConfigError, match=key):
        Client(base_url=OPENAI_BASE, model="m", request_params={key: True})


def test_client_needs_base_url_or_generate():
    with pytest.raises(ConfigError):
        Client(model="m")


def test_openai_api_key_defaults_from_environment(scripted, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "env-openai-key")
    monkeypatch.delenv("OPENROUTER_API_KEY", raising=False)
    scripted.add(json=oa_text("ok"))
    with Client(base_url=OPENAI_BASE, model="m") as client:
        assert client.run("x").text == "ok"
    assert scripted.requests[0].headers["Authorization"] == "Bearer env-openai-key"


def test_anthropic_api_key_defaults_from_environment(scripted, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "env-anthropic-key")
    scripted.add(json=an_text("ok"))
    with Client(base_url=ANTHROPIC_BASE, model="m", style="anthropic") as client:
        assert client.run("x").text == "ok"
    assert scripted.requests[0].headers["x-api-key"] == "env-anthropic-key"


def test_repr_of_client_has_no_key():
    with openai_client() as client:
        assert KEY not in repr(client)
        assert "gpt-test" in repr(client)
    with anthropic_client() as client:
        assert KEY not in repr(client)


def test_failed_ask_saves_nothing_to_the_store(scripted):
    scripted.add(status=400, body="nope")
    scripted.add(json=oa_text("first"))
    scripted.add(status=400, body="nope")
    store = InMemoryStore()
    with openai_client(store=store) as client:
        with pytest.raises(LLMError):
            client.ask("x", id="fresh")
        assert store.get("fresh") is None
        client.ask("hello", id="kept")
        before = store.get("kept")
        with pytest.raises(LLMError):
            client.ask("again", id="kept")
    assert store.get("kept") == before


def test_ask_with_id_saves_and_reloads_history(scripted):
    turn1 = [{"role": "system", "content": "sys"}, {"role": "user", "content": "one"}]
    reply1 = {"role": "assistant", "content": "first"}
    turn2 = [*turn1, reply1, {"role": "user", "content": "two"}]
    scripted.add(json=oa_text("first"))
    scripted.add(json=oa_text("second"))
    with openai_client(system_prompt="sys") as client:
        client.ask("one", id="conv")
        assert client.conversation_store.get("conv") == [*turn1, reply1]
        result = client.ask("two", id="conv")
        assert result.text == "second"
        assert client.conversation_store.get("conv") == [*turn2, {"role": "assistant", "content": "second"}]
    sent = [request.json() for request in scripted.requests]
    assert sent == [{"model": "gpt-test", "messages": turn1}, {"model": "gpt-test", "messages": turn2}]


def test_conversation_store_is_the_given_store_or_an_in_memory_one():
    store = InMemoryStore()
    with openai_client(store=store) as client:
        assert client.conversation_store is store
    with openai_client() as client:
        assert isinstance(client.conversation_store, InMemoryStore)


def test_ask_without_id_is_run_and_saves_nothing(scripted):
    scripted.add(json=oa_text("x"))
    store = InMemoryStore()
    with openai_client(store=store) as client:
        client.ask("q")
    assert store.ids() == []


def test_a_timeout_is_never_retried(scripted):
    scripted.add(error=requests.exceptions.ReadTimeout("slow"))
    scripted.add(json=oa_text("never"))
    error = run_expecting_llm_error(timeout=0.05, retries=3)
    assert isinstance(error, TimeoutError)
    assert error.status is None
    assert len(scripted.requests) == 1


def test_a_timeout_raised_by_the_http_stack_is_never_retried_even_without_a_timeout(scripted):
    scripted.add(error=requests.exceptions.ReadTimeout("slow"))
    scripted.add(json=oa_text("never"))
    seen = []
    error = run_expecting_llm_error(retries=3, on_error=lambda info: seen.append(info) or "retry")
    assert isinstance(error, TimeoutError)
    assert error.cause == "timed out"
    assert len(scripted.requests) == 1
    assert [info["retryable"] for info in seen] == [False]  # observed, and not retried even when asked


@responses.activate(registry=OrderedRegistry)
def test_a_host_supplied_session_is_used():
    """The host's session goes through ``Session.send``: a mock the host put on its
    adapters (here ``responses``) answers, and sees the session's headers."""
    session = requests.Session()
    session.headers["X-From-Session"] = "yes"
    responses.post(OPENAI_URL, json=oa_text("ok"), match=[matchers.header_matcher({"X-From-Session": "yes", "Authorization": f"Bearer {KEY}"})])
    with openai_client(session=session) as client:
        assert client.run("x").text == "ok"
    session.close()


def test_openrouter_key_is_used_for_an_openrouter_base_url(scripted, monkeypatch):
    monkeypatch.setenv("OPENROUTER_API_KEY", "env-router-key")
    monkeypatch.setenv("OPENAI_API_KEY", "env-openai-key")
    url = "https://openrouter.ai/api/v1/chat/completions"
    scripted.add(json=oa_text("ok"))
    with Client(base_url="https://openrouter.ai/api/v1", model="m") as client:
        assert client.run("x").text == "ok"
    assert (scripted.requests[0].url, scripted.requests[0].headers["Authorization"]) == (url, "Bearer env-router-key")


def test_the_key_never_appears_in_log_lines(scripted, caplog):
    scripted.add(status=503, body=f"busy {KEY}")
    scripted.add(error=requests.ConnectionError(f"reset {KEY}"))
    scripted.add(status=401, body=f"bad key {KEY}")
    caplog.set_level("DEBUG")
    with openai_client(retries=2) as client:
        with pytest.raises(LLMError):
            client.run("x")
    assert caplog.records  # the retries were logged
    assert KEY not in caplog.text
