"""Cassettes recorded against real local model servers replay with those servers stopped
(CONTRACT §23 "Record real exchanges for tests", issue 32's must-show).

Against a live server (skipped unless an environment variable gives its command line; CI
does not build them):

- ``TOOLNEXUS_TEST_LLAMA_SERVER``, e.g. ``~/.cache/realllm/bin/llama-server -m
  ~/.cache/realllm/SmolLM2-135M-Instruct.Q4_1.gguf --jinja``: llama.cpp's server, which
  answers both wire styles (``/v1/chat/completions`` and ``/v1/messages``);
- ``TOOLNEXUS_TEST_LLAMA_CPP_PYTHON``, e.g. ``~/.cache/realllm/lcp-venv/bin/python -m
  llama_cpp.server --model ~/.cache/realllm/Qwen2.5-Coder-1.5B-Instruct-Q4_K_M.gguf``:
  llama-cpp-python's server (OpenAI style only).

The test starts the server (``--port`` is added), records every run (plain and streamed,
each style the server speaks) to a cassette, stops the server, checks that its port
refuses connections, and replays every run from the cassette: the same status, text, tool
calls, tokens, turns and streamed pieces. The key is in no file; a changed prompt is a
``CassetteMismatch`` naming ``messages[1].content``. With ``TOOLNEXUS_KEEP_CASSETTES=1``
the cassettes and what the runs showed are kept in ``tests/fixtures/cassettes/``, where
the offline test below replays them on every run of the suite.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from _cassette_real import FIXTURES, KEY, RealServer, endpoint, free_port, refuses, run
from toolnexus import CassetteMismatch
from toolnexus.testing import cassette

SERVERS = {
    "llama-server": ("TOOLNEXUS_TEST_LLAMA_SERVER", ("openai", "anthropic")),
    "llama-cpp-python": ("TOOLNEXUS_TEST_LLAMA_CPP_PYTHON", ("openai",)),
}
MODES = {"plain": False, "sse": True}
EXPECTED = FIXTURES / "expected.json"
#: Where a changed prompt first differs: after the system message, or first (anthropic
#: style sends the system prompt beside the messages).
PROMPT_FIELD = {"openai": r"messages\[1\]\.content", "anthropic": r"messages\[0\]\.content"}
OTHER_PROMPT = "What is the weather in Bergen?"


def kept_files():
    return sorted(path.name for path in FIXTURES.glob("*.jsonl"))


@pytest.mark.parametrize("name", sorted(SERVERS))
def test_a_cassette_recorded_against_a_real_server_replays_with_the_server_stopped(name, tmp_path):
    variable, styles = SERVERS[name]
    command = os.environ.get(variable)
    if not command:
        pytest.skip(f"set {variable} to the server's command line to run this test")
    runs = [(style, mode) for style in styles for mode in MODES]
    server = RealServer(command, tmp_path / f"{name}.log")
    live = {}
    try:
        for style, mode in runs:
            with cassette(tmp_path / f"{name}-{style}-{mode}.jsonl", "all") as recording:
                live[style, mode] = run(server.base, style, MODES[mode])
            assert recording.recorded == live[style, mode]["turns"]
    finally:
        server.stop()
    assert refuses(server.port)
    for style, mode in runs:
        path = tmp_path / f"{name}-{style}-{mode}.jsonl"
        with cassette(path, "none") as replaying:
            assert run(server.base, style, MODES[mode]) == live[style, mode]
        assert replaying.replayed == live[style, mode]["turns"]
        assert KEY not in path.read_text(encoding="utf-8")
        with cassette(path, "none"), pytest.raises(CassetteMismatch, match=PROMPT_FIELD[style]):
            run(server.base, style, MODES[mode], prompt=OTHER_PROMPT)
    if os.environ.get("TOOLNEXUS_KEEP_CASSETTES") == "1":
        keep(name, runs, live, tmp_path)


def keep(name, runs, live, folder):
    FIXTURES.mkdir(parents=True, exist_ok=True)
    expected = json.loads(EXPECTED.read_text(encoding="utf-8")) if EXPECTED.exists() else {}
    for style, mode in runs:
        file = f"{name}-{style}-{mode}.jsonl"
        shutil.copyfile(folder / file, FIXTURES / file)
        expected[file] = {"style": style, "streamed": MODES[mode], "observed": live[style, mode]}
    EXPECTED.write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n", encoding="utf-8")


@pytest.mark.parametrize("file", kept_files())
def test_a_kept_real_server_cassette_replays_offline(file):
    expected = json.loads(EXPECTED.read_text(encoding="utf-8"))[file]
    nowhere = f"http://127.0.0.1:{free_port()}"  # bound and released at once: nothing listens there
    with cassette(FIXTURES / file, "none") as replaying:
        shown = run(nowhere, expected["style"], expected["streamed"])
    assert shown == expected["observed"]
    assert replaying.replayed == expected["observed"]["turns"]
    assert KEY not in (FIXTURES / file).read_text(encoding="utf-8")
    with cassette(FIXTURES / file, "none"), pytest.raises(CassetteMismatch, match=PROMPT_FIELD[expected["style"]]):
        run(nowhere, expected["style"], expected["streamed"], prompt=OTHER_PROMPT)


def test_endpoints_follow_each_style():
    assert endpoint("http://h:1", "openai") == "http://h:1/v1"
    assert endpoint("http://h:1", "anthropic") == "http://h:1"
