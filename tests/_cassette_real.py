"""The runs recorded against real model servers (``test_cassette_real_servers.py``), and a
real server process to record them against.

Each run is a ``Client`` with one tool, plain or streamed, in either wire style; what a
run shows (status, text, tool calls, tokens, turns, the streamed pieces) is its
``observed`` value, the same whether it talked to the server or to a cassette.
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import requests

from toolnexus import Client, tool

KEY = "sk-real-cassette-SECRET-0099"
SYSTEM = "You answer in one short sentence. Use the weather tool for weather questions."
PROMPT = "What is the weather in Oslo?"
PARAMS = {"max_tokens": 48, "temperature": 0}
#: The first step must call the tool (then the model may answer): a two-step run where a
#: server forces it (llama-cpp-python does, with a grammar; llama-server ignores it).
FORCED = {
    "openai": {"type": "function", "function": {"name": "weather"}},
    "anthropic": {"type": "tool", "name": "weather"},
}
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "cassettes"
START_S = 300.0  # loading a model on a busy machine


@tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"{city}: sunny, 18 C"


def endpoint(base: str, style: str) -> str:
    """The base URL a client of ``style`` is given for a server at ``base``."""
    return f"{base}/v1" if style == "openai" else base


def run(base: str, style: str, streamed: bool, prompt: str = PROMPT) -> dict[str, Any]:
    """One run with the tool, as ``observed`` values."""
    params = {**PARAMS, "tool_choice": FORCED[style]}
    options = {
        "style": style,
        "api_key": KEY,
        "system_prompt": SYSTEM,
        "request_params": params,
        "reset_tool_choice": True,
    }
    with Client(base_url=endpoint(base, style), model="m", max_turns=3, timeout=240, retries=0, **options) as client:
        if not streamed:
            return observed(client.run(prompt, [weather]), [])
        with client.stream(prompt, [weather]) as stream:
            pieces = [event.data["delta"] for event in stream if event.kind == "text"]
        return observed(stream.result, pieces)


def observed(result: Any, pieces: list[str]) -> dict[str, Any]:
    return {
        "status": result.status,
        "text": result.text,
        "tool_calls": [[call.name, call.output] for call in result.tool_calls],
        "total_tokens": result.usage.total_tokens,
        "turns": result.turns,
        "pieces": pieces,
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def refuses(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


class RealServer:
    """A model server process started from a command line (``--port`` is added), ready
    once it answers ``GET /v1/models``; ``stop()`` ends it and waits for its port to close."""

    def __init__(self, command: str, log: Path) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        argv = [os.path.expanduser(part) for part in shlex.split(command)] + ["--port", str(self.port)]
        self._log = open(log, "wb")
        self.process = subprocess.Popen(argv, stdout=self._log, stderr=subprocess.STDOUT)
        self._wait_ready(log)

    def _wait_ready(self, log: Path) -> None:
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server ended at start:\n{log.read_text(errors='replace')[-2000:]}")
            try:
                if requests.get(f"{self.base}/v1/models", timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.5)  # an outside process loading a model: nothing of ours to wait on
        self.stop()
        raise RuntimeError(f"the server did not answer within {START_S:g} s")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self._log.close()
