"""``benchmarks/real_server.py``, the check a user runs against their own server, run here
against a local scripted OpenAI-compatible server that behaves like llama-cpp-python's:
it refuses an assistant message whose ``content`` is not a string."""

from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path

import pytest

from toolnexus.testing import ScriptedLLMServer, text_completion, tool_call_completion

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "real_server.py"
ARGUMENTS = {"word_count": {"text": "to be or not to be"}, "task": {"agent": "researcher", "prompt": "facts on the borrow checker"}, "book_table": {"restaurant": "Chez Lu"}}


def load_script():
    spec = importlib.util.spec_from_file_location("real_server_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # as an import does: its classes' annotations resolve there
    spec.loader.exec_module(module)
    return module


def strict_server_responder():
    ids = itertools.count(1)

    def respond(body):
        for message in body["messages"]:
            if message["role"] == "assistant" and not isinstance(message.get("content"), str):
                raise ValueError("assistant content must be a string")  # the server answers 500
        choice = body.get("tool_choice")
        if isinstance(choice, dict):
            name = choice["function"]["name"]
            return tool_call_completion(body, [(f"call_{next(ids)}", name, ARGUMENTS[name])])
        return settle(body, ids) or text_completion(body, "All done.")

    return respond


def settle(body, ids):
    """The typed scenario, as a tool-capable model plays it: look the order up, answer in
    prose once, then call final_result after being asked to."""
    names = {tool["function"]["name"] for tool in body.get("tools", [])}
    if "final_result" not in names:
        return None
    messages = body["messages"]
    if not any(m["role"] == "tool" for m in messages):
        return tool_call_completion(body, [(f"call_{next(ids)}", "lookup_order", {"order": "A-1001"})])
    if messages[-1]["role"] == "tool":
        return text_completion(body, "Refund it: it arrived damaged.")
    return tool_call_completion(body, [(f"call_{next(ids)}", "final_result", {"refund": True, "amount": "19.90", "reason": "damaged"})])


def test_every_scenario_passes_against_a_server_that_refuses_null_content(capsys):
    script = load_script()
    with ScriptedLLMServer(strict_server_responder()) as server:
        status = script.main(["--base-url", server.base_url, "--model", "m"])
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in lines] == [["tool-loop", "PASS"], ["team", "PASS"], ["suspend-resume", "PASS"], ["stream", "PASS"], ["typed-output", "PASS"]], lines
    assert status == 0
    assert all("turns=" in line and "tokens=" in line and "time=" in line for line in lines)
    assert "valid=3/3 tool_called=3/3 corrections=[1, 1, 1]" in lines[-1]


def test_the_raw_format_comparison_reports_what_the_server_did(capsys):
    script = load_script()
    with ScriptedLLMServer(strict_server_responder()) as server:
        script.main(["--base-url", server.base_url, "--model", "m", "--only", "raw-format", "--typed-runs", "2"])
    [line] = capsys.readouterr().out.splitlines()
    assert line.split()[:2] == ["raw-format", "PASS"] and "valid=0/2 tool_called=0/2" in line


def test_a_server_error_is_a_failing_line_not_a_crash(capsys):
    script = load_script()

    def broken(body):
        raise RuntimeError("down")

    with ScriptedLLMServer(broken) as server:
        status = script.main(["--base-url", server.base_url, "--model", "m", "--only", "tool-loop", "--timeout", "20"])
    [line] = capsys.readouterr().out.splitlines()
    assert line.split()[:2] == ["tool-loop", "FAIL"] and "LLMError" in line
    assert status == 1


@pytest.mark.parametrize("style", ["anthropic"])
def test_forced_tool_choice_has_the_style_shape(style):
    assert load_script().forced(style, "t") == {"type": "tool", "name": "t"}
