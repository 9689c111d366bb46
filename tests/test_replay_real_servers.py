"""Replays of exchanges recorded with real servers (llama.cpp's ``llama-server`` and
llama-cpp-python's server, ``tests/fixtures/real_servers/``).

A local HTTP server on 127.0.0.1 answers each request with the recorded response to the
same request. Each recorded run is rebuilt from its first request (model, system prompt,
tools, ``request_params``; a team from the ``task`` tool's description) and run again
through the library; the test then checks what the library sent: the very bodies the real
server accepted, never a ``null`` content or an empty assistant message, every tool call
with exactly one result, the usage summed, and a reply cut short reported ``incomplete``.
"""

from __future__ import annotations

import copy
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import attrs
import pytest

from conftest import run_in_thread
from toolnexus import AgentDef, Budget, Client, LLMError, Runtime, Tool, Toolkit

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "real_servers"
FILES = sorted(path.name for path in FIXTURES.glob("*.jsonl"))
OPENAI_PATH = "/v1/chat/completions"
ANTHROPIC_PATH = "/v1/messages"
# What the library itself adds to every openai body; the rest of a recorded body beyond
# model/messages/tools is what the host put in ``request_params``.
_BUILT_KEYS = ("model", "messages", "tools")


def exchanges(name: str) -> list[dict[str, Any]]:
    with open(FIXTURES / name, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def has_task_tool(request: dict[str, Any]) -> bool:
    return any(t.get("function", {}).get("name") == "task" for t in request.get("tools", []))


def starts_a_run(request: dict[str, Any]) -> bool:
    return not any(m.get("role") in ("assistant", "tool") for m in request.get("messages", []))


@attrs.define
class Recording:
    """One recorded run: its exchanges in order, the first being the run's first request."""

    exchanges: list[dict[str, Any]]

    @property
    def first(self) -> dict[str, Any]:
        return self.exchanges[0]

    @property
    def team(self) -> bool:
        return has_task_tool(self.first["req"])


def recordings(name: str) -> list[Recording]:
    """A file's exchanges split into runs: a request with no assistant message starts a
    run, except a teammate's first request inside a team run (same endpoint)."""
    runs: list[Recording] = []
    for exchange in exchanges(name):
        request = exchange["req"]
        inside_team = bool(runs) and runs[-1].team and not has_task_tool(request) and exchange["path"] == runs[-1].first["path"]
        if starts_a_run(request) and not inside_team:
            runs.append(Recording([exchange]))
        else:
            runs[-1].exchanges.append(exchange)
    return runs


class ReplayServer:
    """Answers each request with the recorded response to the identical recorded request;
    a request that matches none is remembered and answered 599, so the test fails."""

    def __init__(self, recorded: list[dict[str, Any]]) -> None:
        self._unused = list(recorded)
        self._lock = threading.Lock()
        self.received: list[tuple[str, dict[str, Any]]] = []
        self.served: list[dict[str, Any]] = []
        self.unmatched: list[dict[str, Any]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                status, payload = owner.answer(self.path, body)
                data = json.dumps(payload).encode()
                self.send_response(status)
                for name, value in (("Content-Type", "application/json"), ("Content-Length", str(len(data)))):
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def answer(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        with self._lock:
            self.received.append((path, body))
            for exchange in self._unused:
                if exchange["path"] == path and comparable(exchange["req"]) == comparable(body):
                    self._unused.remove(exchange)
                    self.served.append(exchange)
                    return exchange["status"], exchange["resp"]
            self.unmatched.append(body)
            return 599, {"error": {"message": "no recorded exchange for this request"}}

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)


def comparable(body: dict[str, Any]) -> dict[str, Any]:
    """A body as the recordings can show it. Two things changed since they were made, on
    purpose: the ``task`` tool names the team in an ``enum`` (so the tool list is left
    out), and a teammate's answer cut short reaches the lead marked ``[incomplete]``."""
    messages = [
        {**m, "content": m["content"].removeprefix(_CUT_TEAMMATE)} if m.get("role") == "tool" and isinstance(m.get("content"), str) else m
        for m in body.get("messages", [])
    ]
    return {**{key: value for key, value in body.items() if key != "tools"}, "messages": messages}


_CUT_TEAMMATE = "[incomplete] "


# --- rebuilding a recorded run -------------------------------------------------------------------------


def recorded_tool_outputs(recording: Recording) -> dict[str, str]:
    """Every tool message the recorded run sent, by tool-call id."""
    outputs: dict[str, str] = {}
    for exchange in recording.exchanges:
        for message in exchange["req"].get("messages", []):
            if message.get("role") == "tool":
                outputs[message["tool_call_id"]] = message["content"]
    return outputs


def replayed_tools(recording: Recording) -> list[Tool]:
    outputs = recorded_tool_outputs(recording)

    def execute(args: dict[str, Any], ctx: Any) -> str:
        return outputs.get(ctx.call_id, "done")

    return [Tool(t["function"]["name"], t["function"]["description"], t["function"]["parameters"], execute) for t in recording.first["req"].get("tools", [])]


def request_params(request: dict[str, Any]) -> dict[str, Any]:
    params = {key: value for key, value in request.items() if key not in _BUILT_KEYS}
    if params.get("tool_choice") == "auto":
        del params["tool_choice"]  # the library's own default
    return params


def system_of(request: dict[str, Any]) -> str | None:
    messages = request.get("messages", [])
    return messages[0]["content"] if messages and messages[0]["role"] == "system" else None


def prompt_of(request: dict[str, Any]) -> str:
    return next(m["content"] for m in request["messages"] if m["role"] == "user")


def team_of(recording: Recording) -> dict[str, str]:
    """``{name: does}`` from the ``task`` tool's description ("... — name: does; name: does")."""
    [task] = [t["function"] for t in recording.first["req"]["tools"] if t["function"]["name"] == "task"]
    listing = task["description"].split("\u2014", 1)[1]
    return dict(re.match(r"\s*([^:]+):\s*(.*)", item).groups() for item in listing.split(";"))  # type: ignore[union-attr]


def lead_requests(recording: Recording) -> list[dict[str, Any]]:
    return [e for e in recording.exchanges if has_task_tool(e["req"])]


def run_recording(recording: Recording, server: ReplayServer) -> dict[str, Any]:
    """Run the recorded run again; returns status, limit, text and tokens as the library saw them."""
    first = recording.first["req"]
    if recording.first["path"] == ANTHROPIC_PATH:
        with Client(base_url=server.url, model=first["model"], style="anthropic", retries=0, request_params=request_params_anthropic(first)) as client:
            try:
                result = client.run(prompt_of(first))
            except LLMError as exc:
                return {"error": exc.status}
        return {"status": result.status, "limit": result.limit, "text": result.text, "tokens": result.usage.total_tokens}
    if not recording.team:
        options = {"request_params": request_params(first) or None, "system_prompt": system_of(first), "retries": 0}
        with Client(base_url=server.url + "/v1", model=first["model"], max_turns=len(recording.exchanges), **options) as client:
            result = run_in_thread(lambda: client.run(prompt_of(first), Toolkit(replayed_tools(recording))), timeout=60)
        return {"status": result.status, "limit": result.limit, "text": result.text, "tokens": result.usage.total_tokens, "result": result}
    registry = {"lead": AgentDef("lead", "leads the team", soul=system_of(first) or "", team=list(team_of(recording)), budget=Budget(max_turns=len(lead_requests(recording))))}
    registry.update({name: AgentDef(name, does) for name, does in team_of(recording).items()})
    rt = Runtime(registry, base_url=server.url + "/v1", model=first["model"], request_params=request_params(first) or None, retries=0)
    try:
        handle = rt.spawn(rt.root, "lead")
        rt.wake(handle, prompt_of(first))
        result = run_in_thread(lambda: rt.wait(handle), timeout=60)
        tokens = rt.inspect(handle).tokens
    finally:
        rt.close(rt.root)
    return {"status": result.status, "limit": result.limit, "text": result.text, "tokens": tokens, "agent_tokens": result.total_tokens}


def request_params_anthropic(request: dict[str, Any]) -> dict[str, Any] | None:
    params = {key: value for key, value in request.items() if key not in ("model", "messages", "tools", "system", "max_tokens")}
    if request.get("max_tokens") != 4096:
        params["max_tokens"] = request["max_tokens"]
    return params or None


# --- what every body sent must be ---------------------------------------------------------------------


def transcript_problems(path: str, body: dict[str, Any]) -> list[str]:
    """Why a provider could refuse this body: null or empty content, unpaired tool calls."""
    problems = []
    messages = body["messages"]
    for index, message in enumerate(messages):
        content = message.get("content")
        if content is None:
            problems.append(f"message {index} ({message['role']}) has null or no content")
        if message["role"] == "assistant" and not content and not message.get("tool_calls"):
            problems.append(f"message {index} is an empty assistant message")
        calls = [c["id"] for c in message.get("tool_calls", [])] if path == OPENAI_PATH else [
            b["id"] for b in content or [] if isinstance(b, dict) and b.get("type") == "tool_use"
        ]
        if not calls:
            continue
        if len(set(calls)) != len(calls):
            problems.append(f"message {index} repeats a tool-call id")
        results = answered_ids(path, messages[index + 1 :])
        for call_id in calls:
            if results.count(call_id) != 1:
                problems.append(f"tool call {call_id} of message {index} has {results.count(call_id)} results")
    return problems


def answered_ids(path: str, following: list[dict[str, Any]]) -> list[str]:
    if path == OPENAI_PATH:
        ids = []
        for message in following:
            if message["role"] != "tool":
                break
            ids.append(message["tool_call_id"])
        return ids
    if not following or following[0]["role"] != "user" or not isinstance(following[0]["content"], list):
        return []
    return [b["tool_use_id"] for b in following[0]["content"] if b.get("type") == "tool_result"]


def served_tokens(served: list[dict[str, Any]]) -> int:
    total = 0
    for exchange in served:
        usage = exchange["resp"].get("usage") or {}
        total += usage.get("total_tokens", usage.get("input_tokens", 0) + usage.get("output_tokens", 0))
    return total


def expected_outcome(recording: Recording) -> tuple[str, str | None]:
    """The status the run must end with, from its last recorded reply to the run's own agent."""
    own = lead_requests(recording) if recording.team else recording.exchanges
    last = own[-1]
    if last["status"] != 200:
        return "error", None
    choice = last["resp"]["choices"][0]
    if choice["message"].get("tool_calls"):
        return "incomplete", "maxTurns"
    if choice.get("finish_reason") == "length":
        return "incomplete", "maxOutputTokens"
    return "done", None


CASES = [pytest.param(name, index, id=f"{name}#{index}") for name in FILES for index in range(len(recordings(name)))]


@pytest.fixture
def replay(closing):
    """Start replay servers (``replay(recorded)``); every one is closed after the test."""
    return lambda recorded: closing(ReplayServer(recorded))


def test_every_recorded_file_is_replayed():
    assert len(FILES) == 8
    assert sum(len(r.exchanges) for name in FILES for r in recordings(name)) == sum(len(exchanges(name)) for name in FILES)


@pytest.mark.parametrize(("name", "index"), CASES)
def test_replayed_run_sends_what_the_real_server_accepted(replay, name, index):
    recording = recordings(name)[index]
    server = replay(recording.exchanges)
    outcome = run_recording(recording, server)
    assert server.unmatched == [], "the library sent a body the real server never saw"
    assert len(server.served) == len(recording.exchanges), "every recorded exchange is replayed"
    status, limit = expected_outcome(recording)
    if status == "error":
        assert outcome == {"error": recording.exchanges[-1]["status"]}
        return
    assert (outcome["status"], outcome["limit"]) == (status, limit)
    assert outcome["tokens"] == served_tokens(server.served)


@pytest.mark.parametrize(("name", "index"), CASES)
def test_replayed_run_sends_no_null_content_and_pairs_every_tool_call(replay, name, index):
    recording = recordings(name)[index]
    server = replay(recording.exchanges)
    run_recording(recording, server)
    problems = {i: transcript_problems(path, body) for i, (path, body) in enumerate(server.received)}
    assert {i: p for i, p in problems.items() if p} == {}


def test_llama_cpp_python_tool_calls_are_sent_back_with_empty_string_content(replay):
    [recording] = recordings("lcp.jsonl")
    server = replay(recording.exchanges)
    run_recording(recording, server)
    [_, second] = [body for _, body in server.received]
    [assistant] = [m for m in second["messages"] if m["role"] == "assistant"]
    assert assistant["content"] == ""
    assert assistant["tool_calls"][0]["id"].startswith("call__0_book_table_cmpl-")


def test_a_reply_cut_short_by_llama_server_keeps_its_text(replay):
    [recording, _] = recordings("ls.jsonl")
    server = replay(recording.exchanges)
    outcome = run_recording(recording, server)
    assert outcome["status"] == "incomplete" and outcome["limit"] == "maxOutputTokens"
    assert outcome["text"] == recording.first["resp"]["choices"][0]["message"]["content"]


def test_a_small_model_given_the_team_as_an_enum_reaches_a_real_teammate(replay):
    [recording] = recordings("s13.jsonl")
    server = replay(recording.exchanges)
    outcome = run_recording(recording, server)
    first_body = server.received[0][1]
    [task] = [t["function"] for t in first_body["tools"] if t["function"]["name"] == "task"]
    assert task["parameters"]["properties"]["agent"]["enum"] == ["researcher", "writer"]
    children = [body for _, body in server.received if "tools" not in body]
    assert len(children) >= 1
    assert outcome["agent_tokens"] == outcome["tokens"] == served_tokens(server.served)


def test_the_tool_loop_recorded_on_llama_cpp_python_gives_each_call_its_recorded_result(replay):
    [recording] = recordings("s1c.jsonl")
    server = replay(recording.exchanges)
    outcome = run_recording(recording, server)
    result = outcome["result"]
    assert result.tool_call_count == 10
    sent = [m["content"] for m in copy.deepcopy(server.received[-1][1])["messages"] if m["role"] == "tool"]
    assert sent[7].startswith("invalid arguments: not valid JSON")
