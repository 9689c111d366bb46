"""``benchmarks/real_server.py``, the check a user runs against their own server, run here
against a local scripted OpenAI-compatible server that behaves like llama-cpp-python's:
it refuses an assistant message whose ``content`` is not a string."""

from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path

import pytest

from toolnexus.testing import ScriptedLLMServer, text_completion, tool_call_completion

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "real_server.py"
ARGUMENTS = {"word_count": {"text": "to be or not to be"}, "task": {"agent": "researcher", "prompt": "facts on the borrow checker"}, "book_table": {"restaurant": "Chez Lu"}}


def load_script():
    spec = importlib.util.spec_from_file_location("real_server_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
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
        return text_completion(body, "All done.")

    return respond


def test_every_scenario_passes_against_a_server_that_refuses_null_content(capsys):
    script = load_script()
    with ScriptedLLMServer(strict_server_responder()) as server:
        status = script.main(["--base-url", server.base_url, "--model", "m"])
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in lines] == [["tool-loop", "PASS"], ["team", "PASS"], ["suspend-resume", "PASS"], ["stream", "PASS"]], lines
    assert status == 0
    assert all("turns=" in line and "tokens=" in line and "time=" in line for line in lines)


def test_a_server_error_is_a_failing_line_not_a_crash(capsys):
    script = load_script()

    def broken(body):
        raise RuntimeError("down")

    with ScriptedLLMServer(broken) as server:
        status = script.main(["--base-url", server.base_url, "--model", "m", "--only", "tool-loop", "--timeout-ms", "20000"])
    [line] = capsys.readouterr().out.splitlines()
    assert line.split()[:2] == ["tool-loop", "FAIL"] and "LLMError" in line
    assert status == 1


@pytest.mark.parametrize("style", ["anthropic"])
def test_forced_tool_choice_has_the_style_shape(style):
    assert load_script().forced(style, "t") == {"type": "tool", "name": "t"}
