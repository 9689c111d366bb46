"""The HTTP reply builders and the per-model responder in ``toolnexus.testing``."""

from __future__ import annotations

import json
import threading

from toolnexus import AgentDef, Runtime
from toolnexus.testing import USAGE, ScriptedLLMServer, responder_by_model, text_completion, tool_call_completion, tool_messages

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def test_text_completion_is_a_stop_reply_with_default_or_given_usage():
    reply = text_completion(BODY, "hello")
    assert reply["model"] == "m"
    assert reply["choices"] == [{"index": 0, "message": {"role": "assistant", "content": "hello"}, "finish_reason": "stop"}]
    assert reply["usage"] == USAGE
    usage = {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
    assert text_completion(BODY, "hello", usage)["usage"] == usage


def test_tool_call_completion_takes_tuples_and_dicts_and_encodes_arguments():
    reply = tool_call_completion(BODY, [("c1", "task", {"agent": "w"}), {"id": "c2", "name": "ping"}])
    (choice,) = reply["choices"]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    assert choice["message"]["tool_calls"] == [
        {"id": "c1", "type": "function", "function": {"name": "task", "arguments": json.dumps({"agent": "w"})}},
        {"id": "c2", "type": "function", "function": {"name": "ping", "arguments": "{}"}},
    ]
    assert reply["usage"] == USAGE


def test_responder_by_model_steps_through_each_models_script_then_says_done():
    seen = []

    def echo_last(body):
        seen.append(body["model"])
        return text_completion(body, "last: " + tool_messages(body)[-1])

    respond = responder_by_model(
        {"a": [{"calls": [("c1", "ping", {})]}, echo_last], "b": [{"text": "b1", "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}]}
    )
    tool_body = {"model": "a", "messages": [{"role": "tool", "tool_call_id": "c1", "content": "pong"}]}

    assert respond({"model": "a", "messages": []})["choices"][0]["message"]["tool_calls"][0]["id"] == "c1"
    assert respond({"model": "b", "messages": []})["usage"]["total_tokens"] == 2  # b's count is its own
    assert respond(tool_body)["choices"][0]["message"]["content"] == "last: pong"
    assert respond({"model": "a", "messages": []})["choices"][0]["message"]["content"] == "done"
    assert respond({"model": "zzz", "messages": []})["choices"][0]["message"]["content"] == "done"
    assert seen == ["a"]
    assert respond.calls == {"a": 3, "b": 1, "zzz": 1}


def test_responder_by_model_default_step_is_configurable():
    respond = responder_by_model({}, default={"text": "fallback"})
    assert respond({"model": "x", "messages": []})["choices"][0]["message"]["content"] == "fallback"


def test_responder_by_model_gives_concurrent_requests_distinct_steps():
    respond = responder_by_model({"m": [{"text": str(i)} for i in range(40)]})
    texts = []
    lock = threading.Lock()

    def ask():
        for _ in range(10):
            content = respond(BODY)["choices"][0]["message"]["content"]
            with lock:
                texts.append(content)

    threads = [threading.Thread(target=ask) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert sorted(texts, key=int) == [str(i) for i in range(40)]


def test_responder_by_model_drives_a_delegation_over_http():
    script = {
        "bm": [{"calls": [{"id": "c1", "name": "task", "args": {"agent": "writer", "prompt": "the intro"}}]}, {"text": "shipped"}],
        "wm": [{"text": "intro written"}],
    }
    registry = {
        "boss": AgentDef("boss", "coordinates", model="bm", team=["writer"]),
        "writer": AgentDef("writer", "writes", model="wm"),
    }
    respond = responder_by_model(script)
    with ScriptedLLMServer(respond) as server, Runtime(registry, base_url=server.base_url, model="default") as rt:
        result = rt.run_agent("boss", "write me a post")
    assert result.text == "shipped"
    assert respond.calls == {"bm": 2, "wm": 1}
