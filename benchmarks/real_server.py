"""Check toolnexus against a running model server: the README's quick-start scenarios.

    python benchmarks/real_server.py --base-url http://127.0.0.1:8080/v1 --model smollm2
    python benchmarks/real_server.py --base-url http://127.0.0.1:8080 --model m --style anthropic

Any OpenAI-compatible server (llama.cpp's llama-server, llama-cpp-python, vLLM, Ollama, a
hosted API) or an anthropic-style one. Three scenarios, one line each with pass/fail,
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
  detail has the time to the first text event and the events read.

A small local model may fail the ``team`` scenario on its own merits; a failure with an
HTTP error in the detail is what this script is for. Exit status: 0 when all pass.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from typing import Any, Callable

from toolnexus import Budget, Client, LLMError, Runtime, AgentDef, Tool, Toolkit, make_answer, make_request, suspend, tool


@tool
def word_count(text: str) -> int:
    """Count the words in a text."""
    return len(text.split())


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


def team(options: dict[str, Any], style: str, params: dict[str, Any]) -> Outcome:
    registry = {
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


def streamed_team(options: dict[str, Any], style: str, params: dict[str, Any]) -> Outcome:
    registry = {
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


SCENARIOS: dict[str, Callable[[dict[str, Any], str, dict[str, Any]], Outcome]] = {
    "tool-loop": tool_loop,
    "team": team,
    "suspend-resume": suspend_resume,
    "stream": streamed_team,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:8080/v1")
    parser.add_argument("--model", required=True)
    parser.add_argument("--style", choices=("openai", "anthropic"), default="openai")
    parser.add_argument("--api-key-env", help="environment variable holding the key, if the server needs one")
    parser.add_argument("--max-tokens", type=int, default=256, help="max_tokens per reply (default 256; keep it below the context size)")
    parser.add_argument("--timeout-ms", type=int, default=300_000, help="bound on one model exchange")
    parser.add_argument("--only", choices=sorted(SCENARIOS), action="append", help="run only this scenario (repeatable)")
    args = parser.parse_args(argv)
    options: dict[str, Any] = {"base_url": args.base_url, "model": args.model, "style": args.style, "timeout_ms": args.timeout_ms, "retries": 1}
    if args.api_key_env:
        options["api_key"] = os.environ[args.api_key_env]
    params = {"max_tokens": args.max_tokens}
    failures = 0
    for name in args.only or SCENARIOS:
        started = time.perf_counter()
        try:
            outcome = SCENARIOS[name](options, args.style, params)
        except LLMError as exc:
            outcome = Outcome(False, 0, 0, f"LLMError: {exc}")
        elapsed = time.perf_counter() - started
        failures += not outcome.passed
        verdict = "PASS" if outcome.passed else "FAIL"
        print(f"{name:<15} {verdict}  turns={outcome.turns:<3} tokens={outcome.tokens:<6} time={elapsed:6.2f}s  {outcome.detail}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
