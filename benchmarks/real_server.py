"""Check toolnexus against a running model server: the README's quick-start scenarios.

    python benchmarks/real_server.py --base-url http://127.0.0.1:8080/v1 --model smollm2
    python benchmarks/real_server.py --base-url http://127.0.0.1:8080 --model m --style anthropic

Any OpenAI-compatible server (llama.cpp's llama-server, llama-cpp-python, vLLM, Ollama, a
hosted API) or an anthropic-style one. Five scenarios, one line each with pass/fail,
model calls (turns), tokens and wall time:

- ``tool-loop``: a client with one tool and ``tool_choice`` forcing it; passes when the
  model called the tool and the server accepted the transcript sent back after it (a
  second turn), whether or not a small model got the arguments right;
- ``team``: a lead with two teammates and the ``task`` tool; passes when the lead
  delegated to a real teammate and the run ended without an error;
- ``suspend-resume``: a tool that needs an approval; passes when the run stops
  ``pending``, and ``Client.resume`` runs the approved call once and the server accepts
  the continued transcript;
- ``stream``: the ``team`` scenario through ``Runtime.stream_agent`` (the server's
  streaming mode); passes when text events came before the result, each model step's
  pieces join up to exactly its ``message`` text, and the run ended without an error. The
  detail has the time to the first text event and the events read;
- ``typed-output``: ``--typed-runs`` runs (default 3) of a client with a ``lookup_order``
  tool and ``output=Decision`` (``refund: bool, amount: Decimal, reason: str``), with
  ``tool_choice`` left to the model; the line says how many runs ended with a valid value,
  how many called the tool, and the correction steps of each run (a ``final_result`` call
  that did not fit, or an answer in prose, each sent back once); passes when at least one
  run ended with a valid value and none failed.

``--only capped`` checks that a cap holds when the server sends no usage in streamed replies
(llama-cpp-python ignores ``stream_options.include_usage``): an agent made to call
``word_count`` on every step runs under ``Budget(max_cost=0.02)`` (the model priced at $10
in, $30 out per million tokens) and then ``Budget(max_tokens=2500)``, once plain and once
through ``Runtime.stream_agent``; one line per run gives its status, limit, turns, tokens,
cost and ``unmeasured_calls``. Passes when every run stopped at its cap and each streamed
run within one model call of the plain one.

``--only raw-format`` runs the same task the old way for comparison: ``response_format``
with ``Decision``'s schema in ``request_params`` and no ``output`` (``--response-format
json_object`` for llama-cpp-python, which takes the schema beside ``json_object``); the line
says how many runs called the tool and ended with text that is a valid value.

A small local model may fail the ``team`` scenario on its own merits; a failure with an
HTTP error in the detail is what this script is for. Exit status: 0 when all pass.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from decimal import Decimal
from typing import Any, Callable

import attrs

from toolnexus import Budget, Client, LLMError, RunResult, Runtime, AgentDef, Tool, Toolkit, make_answer, make_request, suspend, tool
from toolnexus._tools.schema import schema_for_type
from toolnexus._tools.output import output_type


@tool
def word_count(text: str) -> int:
    """Count the words in a text."""
    return len(text.split())


@attrs.frozen
class Decision:
    """How a complaint is settled."""

    refund: bool
    amount: Decimal
    reason: str


ORDERS = {"A-1001": {"order": "A-1001", "total": "19.90", "damaged": True}}
_looked_up: list[str] = []


@tool
def lookup_order(order: str) -> dict[str, Any]:
    """Look an order up by its number: its total and whether it arrived damaged."""
    _looked_up.append(order)
    return ORDERS.get(order.strip(), {"order": order, "error": "no such order; try A-1001"})


SETTLE_SYSTEM = "You settle customer complaints. Look the order up with lookup_order, then give your decision."
SETTLE_PROMPT = "Order A-1001 arrived damaged. Decide whether to refund it and how much."


def forced(style: str, name: str) -> dict[str, Any]:
    """``tool_choice`` that makes the model call ``name``, in the style's own shape."""
    if style == "anthropic":
        return {"type": "tool", "name": name}
    return {"type": "function", "function": {"name": name}}


class Outcome:
    def __init__(self, passed: bool, turns: int, tokens: int, detail: str) -> None:
        self.passed, self.turns, self.tokens, self.detail = passed, turns, tokens, detail


def tool_loop(options: dict[str, Any], style: str, params: dict[str, Any]) -> Outcome:
    with Client(**options, max_turns=3, request_params={**params, "tool_choice": forced(style, "word_count")}) as client:
        result = client.run("How many words are in 'to be or not to be'? Use the word_count tool.", Toolkit([word_count]))
    ran = [r for r in result.tool_calls if r.name == "word_count"]
    good = [r.output for r in ran if not r.is_error]
    passed = bool(ran) and result.turns >= 2
    detail = f"status={result.status} calls={len(ran)} valid={len(good)} first_count={good[0] if good else '-'}"
    return Outcome(passed, result.turns, result.usage.total_tokens, detail)


def team_registry() -> dict[str, AgentDef]:
    """The ``team`` and ``stream`` scenarios' team: a lead and two teammates."""
    return {
        "lead": AgentDef(
            "lead",
            "Plans the work and delegates it",
            soul="Delegate research and writing with the task tool, then combine the results.",
            team=["researcher", "writer"],
            budget=Budget(max_turns=4, max_tokens=40_000),
        ),
        "researcher": AgentDef("researcher", "Finds the key facts about a topic", budget=Budget(max_turns=2)),
        "writer": AgentDef("writer", "Writes short, plain prose from notes", budget=Budget(max_turns=2)),
    }


def team(options: dict[str, Any], style: str, params: dict[str, Any]) -> Outcome:
    registry = team_registry()
    with Runtime(registry, **options, request_params={**params, "tool_choice": forced(style, "task")}) as rt:
        handle = rt.spawn(rt.root, "lead")
        rt.wake(handle, "A paragraph on the Rust borrow checker")
        result = rt.wait(handle)
        view = rt.inspect(handle)
        children = [rt.inspect(child) for child in view.children]
    reached = [child.name for child in children if child.turns > 0]
    passed = result.status != "error" and bool(reached)
    detail = f"status={result.status} limit={result.limit} teammates={','.join(reached) or '-'}"
    if result.status == "error":
        detail += f" error={result.text[:120]!r}"
    return Outcome(passed, result.turns + sum(child.turns for child in children), view.tokens, detail)


def suspend_resume(options: dict[str, Any], style: str, params: dict[str, Any]) -> Outcome:
    request = make_request("approval", "Book a table at Chez Lu for two?")
    lock = threading.Lock()
    booked: list[str] = []

    def book_table(args: dict[str, Any], ctx: Any) -> Any:
        if ctx.answer is None:
            return suspend(request)
        with lock:
            booked.append(str(args.get("restaurant")))
        return f"booked {args.get('restaurant')}"

    schema = {"type": "object", "properties": {"restaurant": {"type": "string"}}, "required": ["restaurant"]}
    kit = Toolkit([Tool("book_table", "Book a table. A person has to confirm first.", schema, book_table)])
    system = "You book tables with the book_table tool."
    with Client(**options, system_prompt=system, max_turns=2, request_params={**params, "tool_choice": forced(style, "book_table")}) as asking:
        first = asking.run("Book a table at Chez Lu for two.", kit)
    if first.status != "pending":
        return Outcome(False, first.turns, first.usage.total_tokens, f"status={first.status}: expected pending")
    with Client(**options, system_prompt=system, max_turns=2, request_params=params or None) as later:
        resumed = later.resume(first.pending, make_answer(request.id, True), kit, messages=first.messages)  # type: ignore[arg-type]
    passed = len(booked) == 1 and resumed.status in ("done", "incomplete", "pending")
    detail = f"first=pending then {resumed.status} booked={len(booked)}"
    return Outcome(passed, first.turns + resumed.turns, first.usage.total_tokens + resumed.usage.total_tokens, detail)


def corrections(result: RunResult) -> int:
    """The steps a typed run spent being corrected: each ``final_result`` call that did not
    fit and each answer in prose was sent back once (a tool error, or a user message)."""
    asked = -1  # the prompt is the first user message with text; every later one asks again
    refused = 0
    for message in result.messages:
        content = message.get("content")
        if message.get("role") == "user" and isinstance(content, str):
            asked += 1
        texts = [content] if message.get("role") == "tool" else [b.get("content") for b in content if isinstance(b, dict)] if isinstance(content, list) else []
        refused += sum(isinstance(t, str) and t.startswith("final_result was not accepted") for t in texts)
    return asked + refused


def typed_output(options: dict[str, Any], style: str, params: dict[str, Any], runs: int = 3) -> Outcome:
    valid, called, fixes, turns, tokens = 0, 0, [], 0, 0
    for _ in range(runs):
        _looked_up.clear()
        with Client(**options, system_prompt=SETTLE_SYSTEM, max_turns=5, request_params=params or None) as client:
            result = client.run(SETTLE_PROMPT, [lookup_order], output=Decision)
        valid += result.status == "done" and isinstance(result.output, Decision)
        called += bool(_looked_up)
        fixes.append(corrections(result))
        turns, tokens = turns + result.turns, tokens + result.usage.total_tokens
    detail = f"valid={valid}/{runs} tool_called={called}/{runs} corrections={fixes}"
    return Outcome(valid >= 1, turns, tokens, detail)


def raw_format(options: dict[str, Any], style: str, params: dict[str, Any], runs: int = 3, shape: str = "json_schema") -> Outcome:
    """The same task with ``response_format`` instead of ``output`` (openai style only), in
    the OpenAI/vLLM shape (``json_schema``) or llama-cpp-python's (``json_object`` + ``schema``)."""
    schema = schema_for_type(Decision)
    response_format = {"type": "json_schema", "json_schema": {"name": "Decision", "schema": schema}} if shape == "json_schema" else {"type": "json_object", "schema": schema}
    request = {**params, "response_format": response_format}
    typed = output_type(Decision)
    assert typed is not None
    valid, called, turns, tokens = 0, 0, 0, 0
    for _ in range(runs):
        _looked_up.clear()
        with Client(**options, system_prompt=SETTLE_SYSTEM, max_turns=5, request_params=request) as client:
            result = client.run(SETTLE_PROMPT + " Answer with the decision as JSON.", [lookup_order])
        try:
            valid += not isinstance(typed.check(json.loads(result.text)), list)
        except ValueError:
            pass
        called += bool(_looked_up)
        turns, tokens = turns + result.turns, tokens + result.usage.total_tokens
    return Outcome(True, turns, tokens, f"valid={valid}/{runs} tool_called={called}/{runs} (for comparison)")


def resume_once(options: dict[str, Any], style: str, params: dict[str, Any], runs: int = 3, state: str | None = None) -> Outcome:
    """An editor delegates to a writer whose ``publish`` tool needs an approval; after the
    approval nothing already answered may be asked again: one writer, one publish, and the
    editor's model not asked at all (its one step is spent; a replay would ask it again,
    and at a high temperature write a new ``task`` prompt: a second writer, a second
    approval, a second publish)."""
    lock = threading.Lock()
    published: list[str] = []
    asked: dict[str, int] = {}

    def publish(args: dict[str, Any], ctx: Any) -> Any:
        if ctx.answer is None:
            return suspend(make_request("approval", f"Publish {args.get('title', 'the note')!r}?"))
        with lock:
            published.append(str(args.get("title")))
        return f"published {args.get('title')}"

    def counting(name: str) -> dict[str, Any]:
        def before_llm(**_: Any) -> None:
            with lock:
                asked[name] = asked.get(name, 0) + 1  # only calls sent to the server: a served reply is not counted

        return {"before_llm": before_llm}

    schema = {"type": "object", "properties": {"title": {"type": "string"}, "text": {"type": "string"}}, "required": ["title", "text"]}
    registry = {
        # Each agent's one step is a forced call (small local servers call tools only when
        # tool_choice names one): the editor delegates, the writer publishes.
        "editor": AgentDef("editor", "Edits the release notes", soul="Delegate the note to the writer with the task tool.", team=["writer"],
                           budget=Budget(max_turns=1), hooks=counting("editor"), request_params={"tool_choice": forced(style, "task")}),
        "writer": AgentDef("writer", "Writes a short note and publishes it", soul="Publish the note with the publish tool.",
                           tools=[Tool("publish", "Publish a note (a person approves it first)", schema, publish)], budget=Budget(max_turns=1),
                           hooks=counting("writer"), request_params={"tool_choice": forced(style, "publish")}),
    }
    lines, ok = [], 0
    for run in range(runs):
        published.clear()
        asked.clear()
        extra = {"state": state, "runtime_id": f"resume-once-{os.getpid()}-{run}"} if state else {}
        with Runtime(registry, **options, request_params={**params}, **extra) as rt:
            first = rt.run_agent("editor", "Announce toolnexus 0.2: it streams, types its output and speaks MCP.")
            if first.status != "pending":
                lines.append(f"run {run + 1}: {first.status}, no approval asked ({first.text[:80]!r})")
                continue
            before = dict(asked)
            rt.resume(make_answer(first.pending.id, True))  # type: ignore[union-attr]
            final = rt.wait(first.handle_id)
            writers = len(rt.inspect(first.handle_id).children)
            again = rt.open_requests()
            editor_after = asked.get("editor", 0) - before.get("editor", 0)
            good = writers == 1 and len(published) == 1 and not again and editor_after == 0 and final.turns == 1
            ok += good
            lines.append(f"run {run + 1}: {final.status} writers={writers} published={len(published)} approvals_again={len(again)} editor_calls_after_resume={editor_after} editor_turns={final.turns}")
            if again:
                rt.close(first.handle_id, force=True)
    print("\n".join(f"    {line}" for line in lines), flush=True)
    return Outcome(ok == len([line for line in lines if "no approval" not in line]) and ok > 0, 0, 0, f"{ok} of {runs} runs kept one writer, one publish, no second approval")


def streamed_team(options: dict[str, Any], style: str, params: dict[str, Any]) -> Outcome:
    registry = team_registry()
    pieces: dict[str, list[str]] = {}
    joined_ok, first_ms, events, texts = True, None, 0, 0
    began = time.perf_counter()
    with Runtime(registry, **options, request_params={**params, "tool_choice": forced(style, "task")}) as rt:
        with rt.stream_agent("lead", "A paragraph on the Rust borrow checker") as stream:
            for event in stream:
                events += 1
                handle = event.handle or ""
                if event.kind == "text":
                    texts += 1
                    first_ms = first_ms if first_ms is not None else (time.perf_counter() - began) * 1000
                    pieces.setdefault(handle, []).append(event.data["delta"])
                elif event.kind == "retry":
                    pieces.pop(handle, None)
                elif event.kind == "message":
                    joined_ok &= "".join(pieces.pop(handle, [])) == event.data["text"]
        result = stream.result
        tokens = rt.inspect(rt.root).tokens
    streamed_before_end = texts > 0 and result is not None
    passed = streamed_before_end and joined_ok and result.status != "error"
    first = f"{first_ms:.0f}ms" if first_ms is not None else "-"
    detail = f"status={result.status if result else '-'} first_text={first} events={events} text_events={texts} joined={'ok' if joined_ok else 'MISMATCH'}"
    return Outcome(passed, result.turns if result else 0, tokens, detail)


def capped(options: dict[str, Any], style: str, params: dict[str, Any]) -> Outcome:
    prices = {options["model"]: {"input": 10.0, "output": 30.0}}
    caps = {"maxCost": Budget(max_cost=0.02, max_turns=30), "maxTokens": Budget(max_tokens=2500, max_turns=30)}
    passed, turns, tokens, lines = True, 0, 0, []
    for limit, budget in caps.items():
        registry = {"counter": AgentDef("counter", "Counts words", tools=[word_count], budget=budget)}
        runs = {}
        for mode in ("plain", "stream"):
            forcing = {**params, "tool_choice": forced(style, "word_count")}
            with Runtime(registry, **options, prices=prices, request_params=forcing) as rt:
                prompt = "Count the words in 'to be or not to be' with word_count, again and again."
                if mode == "plain":
                    result = rt.run_agent("counter", prompt)
                else:
                    with rt.stream_agent("counter", prompt) as stream:
                        for _ in stream:
                            pass
                    result = stream.result
            runs[mode] = result
            cost = "None" if result.cost is None else f"${result.cost:.4f}"
            usage = result.usage
            lines.append(f"{limit:<9} {mode:<6} status={result.status} limit={result.limit} turns={result.turns} "
                         f"tokens={usage.total_tokens} cost={cost} unmeasured_calls={usage.unmeasured_calls}")
            turns, tokens = turns + result.turns, tokens + result.usage.total_tokens
        passed &= all(run.limit == limit for run in runs.values())
        passed &= abs(runs["stream"].turns - runs["plain"].turns) <= 1
    print("\n".join(f"    {line}" for line in lines), flush=True)
    return Outcome(passed, turns, tokens, "every run stopped at its cap" if passed else "a run did not stop at its cap")


SCENARIOS: dict[str, Callable[..., Outcome]] = {
    "capped": capped,
    "resume-once": resume_once,
    "tool-loop": tool_loop,
    "team": team,
    "suspend-resume": suspend_resume,
    "typed-output": typed_output,
    "raw-format": raw_format,
    "stream": streamed_team,
}
#: What runs without ``--only``.
DEFAULT = ("tool-loop", "team", "suspend-resume", "stream", "typed-output")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:8080/v1")
    parser.add_argument("--model", required=True)
    parser.add_argument("--style", choices=("openai", "anthropic"), default="openai")
    parser.add_argument("--api-key-env", help="environment variable holding the key, if the server needs one")
    parser.add_argument("--max-tokens", type=int, default=256, help="max_tokens per reply (default 256; keep it below the context size)")
    parser.add_argument("--timeout", type=float, default=300.0, help="bound on one model exchange, in seconds")
    parser.add_argument("--only", choices=sorted(SCENARIOS), action="append", help="run only this scenario (repeatable)")
    parser.add_argument("--typed-runs", type=int, default=3, help="runs of the typed-output (and raw-format, resume-once) scenario (default 3)")
    parser.add_argument("--temperature", type=float, help="sampling temperature sent with every request")
    parser.add_argument("--state", help="resume-once: keep the tree in this SQLite file (or postgresql:// URL)")
    parser.add_argument("--response-format", choices=("json_schema", "json_object"), default="json_schema",
                        help="raw-format's response_format shape: json_schema (OpenAI, vLLM) or json_object with a schema (llama-cpp-python)")
    args = parser.parse_args(argv)
    options: dict[str, Any] = {"base_url": args.base_url, "model": args.model, "style": args.style, "timeout": args.timeout, "retries": 1}
    if args.api_key_env:
        options["api_key"] = os.environ[args.api_key_env]
    params: dict[str, Any] = {"max_tokens": args.max_tokens}
    if args.temperature is not None:
        params["temperature"] = args.temperature
    failures = 0
    for name in args.only or DEFAULT:
        started = time.perf_counter()
        extra: dict[str, Any] = {"runs": args.typed_runs} if name in ("typed-output", "raw-format", "resume-once") else {}
        if name == "resume-once" and args.state:
            extra["state"] = args.state
        if name == "raw-format":
            extra["shape"] = args.response_format
        try:
            outcome = SCENARIOS[name](options, args.style, params, **extra)
        except LLMError as exc:
            outcome = Outcome(False, 0, 0, f"LLMError: {exc}")
        elapsed = time.perf_counter() - started
        failures += not outcome.passed
        verdict = "PASS" if outcome.passed else "FAIL"
        print(f"{name:<15} {verdict}  turns={outcome.turns:<3} tokens={outcome.tokens:<6} time={elapsed:6.2f}s  {outcome.detail}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
