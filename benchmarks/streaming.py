"""Streamed model calls: how soon the first piece of text reaches the caller.

* first-delta: one streamed chat completion from a local server that writes its first
  text delta at once and spaces the rest (``--deltas`` of them, ``--gap-ms`` apart), so
  the reply ends long after its first piece. Time-to-first-delta (TTFD) is measured from
  the start of the call to the moment the first text piece is in the caller's hands.

Variants, interleaved round-robin in one process so they share machine noise:

* ours      -- ``HttpEngine.complete(ModelCall(..., on_text=...))`` through the engine a
  ``Client`` builds (the library's own session: the direct route)
* ours-host -- the same with a host-supplied ``requests.Session`` (the requests route)
* floor     -- a plain ``requests.Session().post(..., stream=True)`` read with ``iter_lines``

Both read the whole stream in every iteration; only the first delta's time is the figure.
The server runs in a child process by default (``--server inprocess`` keeps it here).

Usage: ``python benchmarks/streaming.py [--n N] [--warmup W] [--deltas D] [--gap-ms G]
[--server child|inprocess] [--json]`` (after ``pip install -e .``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import socket
import statistics
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
if importlib.util.find_spec("toolnexus") is None:  # not installed: benchmark the checkout itself
    sys.path.insert(0, str(HERE.parent))

MODEL = "bench"
API_KEY = "sk-bench"
FIRST = "Once"


def chunk_events(deltas: int) -> list[bytes]:
    """The events of one streamed chat completion: ``deltas`` text pieces, then the end."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        data = {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "model": MODEL, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return b"data: " + json.dumps(data).encode() + b"\n\n"

    pieces = [FIRST] + [f" piece{i}" for i in range(1, deltas)]
    usage = {"id": "chatcmpl-bench", "choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": deltas, "total_tokens": 10 + deltas}}
    return [chunk({"role": "assistant", "content": ""})] + [chunk({"content": p}) for p in pieces] + [chunk({}, "stop"), b"data: " + json.dumps(usage).encode() + b"\n\n", b"data: [DONE]\n\n"]


class StreamingServer:
    """A local OpenAI-compatible server that streams every reply: the role chunk and the
    first text piece at once, then one piece every ``gap_s``, then the end."""

    def __init__(self, deltas: int, gap_s: float) -> None:
        events = chunk_events(deltas)
        stopping = threading.Event()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n")
                for index, event in enumerate(events):
                    if 2 <= index <= deltas and stopping.wait(gap_s):  # pieces after the first
                        return
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

        self._stopping = stopping
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="streaming-server", daemon=True)
        self._thread.start()
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> StreamingServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


class ChildServer:
    """The streaming server in a child process (its threads do not compete with the
    measured client for the interpreter lock)."""

    def __init__(self, deltas: int, gap_s: float) -> None:
        self._proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--serve", str(deltas), str(gap_s)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self._proc.stdout is not None
        self.base_url = self._proc.stdout.readline().strip()

    def __enter__(self) -> ChildServer:
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.close()
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


def serve(deltas: int, gap_s: float) -> int:
    with StreamingServer(deltas, gap_s) as server:
        print(server.base_url, flush=True)
        sys.stdin.read()  # until the parent closes the pipe
    return 0


# --- the variants: each iteration returns (seconds to the first delta, the whole text) -------

Iteration = Callable[[], "tuple[float, str]"]


def make_ours(base_url: str, session: Any = None) -> tuple[Iteration, Callable[[], None]]:
    from toolnexus.engine import ConnectionOptions, ModelCall, build_engine

    engine = build_engine(ConnectionOptions(base_url=base_url, api_key=API_KEY, session=session))
    messages = [{"role": "user", "content": "tell me a story"}]

    def once() -> tuple[float, str]:
        first: list[float] = []

        def on_text(delta: str) -> None:
            if not first:
                first.append(time.perf_counter())

        begun = time.perf_counter()
        reply = engine.complete(ModelCall(model=MODEL, system=None, messages=messages, tools=[], on_text=on_text))
        return first[0] - begun, reply.text

    def close() -> None:
        engine.close()
        if session is not None:
            session.close()

    return once, close


def make_ours_host(base_url: str) -> tuple[Iteration, Callable[[], None]]:
    import requests

    return make_ours(base_url, requests.Session())


def make_floor(base_url: str) -> tuple[Iteration, Callable[[], None]]:
    import requests

    session = requests.Session()
    url = base_url + "/chat/completions"
    headers = {"Authorization": f"Bearer {API_KEY}"}
    body = {"model": MODEL, "messages": [{"role": "user", "content": "tell me a story"}], "stream": True, "stream_options": {"include_usage": True}}

    def once() -> tuple[float, str]:
        begun = time.perf_counter()
        first = None
        text: list[str] = []
        with session.post(url, json=body, headers=headers, stream=True) as response:
            response.raise_for_status()
            for line in response.iter_lines():
                if not line.startswith(b"data: ") or line == b"data: [DONE]":
                    continue
                for choice in json.loads(line[6:]).get("choices") or ():
                    piece = (choice.get("delta") or {}).get("content")
                    if piece:
                        if first is None:
                            first = time.perf_counter() - begun
                        text.append(piece)
        assert first is not None
        return first, "".join(text)

    return once, session.close


VARIANTS: dict[str, tuple[str, Callable[[str], tuple[Iteration, Callable[[], None]]]]] = {
    "ours": ("toolnexus, own session (direct route)", make_ours),
    "ours-host": ("toolnexus, host session (requests route)", make_ours_host),
    "floor": ("requests stream=True + iter_lines", make_floor),
}


def measure_first_delta(base_url: str, n: int, warmup: int, expected: str) -> dict[str, Any]:
    """The TTFD of every variant, interleaved round-robin; medians, p90 and the ratio."""
    built = {key: make(base_url) for key, (_, make) in VARIANTS.items()}
    samples: dict[str, list[float]] = {key: [] for key in built}
    try:
        for rep in range(warmup + n):
            keys = list(built)
            shift = rep % len(keys)
            for key in keys[shift:] + keys[:shift]:
                seconds, text = built[key][0]()
                if text != expected:
                    raise RuntimeError(f"{key}: unexpected text {text!r}")
                if rep >= warmup:
                    samples[key].append(seconds * 1000)
    finally:
        for _, close in built.values():
            close()
    rows = {key: {"label": VARIANTS[key][0], "median_ms": round(statistics.median(s), 3), "p90_ms": round(sorted(s)[int(0.9 * (len(s) - 1))], 3), "samples": len(s)} for key, s in samples.items()}
    ratio = {key: round(rows[key]["median_ms"] / rows["floor"]["median_ms"], 2) for key in rows if key != "floor"}
    return {"variants": rows, "ratio_over_floor": ratio}


# A team-level figure (events per second of ``Runtime.stream`` over a delegating team)
# joins ``MEASURES`` here once runs can be streamed; ``benchmark`` runs every entry.
MEASURES: dict[str, Callable[[str, int, int, str], dict[str, Any]]] = {"first-delta": measure_first_delta}


def benchmark(n: int, warmup: int, deltas: int, gap_ms: float, where: str) -> dict[str, Any]:
    expected = FIRST + "".join(f" piece{i}" for i in range(1, deltas))
    with (ChildServer(deltas, gap_ms / 1000) if where == "child" else StreamingServer(deltas, gap_ms / 1000)) as server:
        results = {name: measure(server.base_url, n, warmup, expected) for name, measure in MEASURES.items()}
    return {"n": n, "warmup": warmup, "deltas": deltas, "gap_ms": gap_ms, "server": where, "python": sys.version.split()[0], "measures": results}


def render(report: dict[str, Any]) -> str:
    lines = [f"streamed model calls, n={report['n']} (warm-up {report['warmup']}), {report['deltas']} deltas {report['gap_ms']:g} ms apart, "
             f"Python {report['python']}, server in {'a child process' if report['server'] == 'child' else 'this process'}"]
    first = report["measures"]["first-delta"]
    lines += ["", "[first-delta] time from the call's start to its first text piece", f"{'variant':<46}{'median ms':>11}{'p90 ms':>10}"]
    for row in first["variants"].values():
        lines.append(f"{row['label']:<46}{row['median_ms']:>11.3f}{row['p90_ms']:>10.3f}")
    for key, ratio in first["ratio_over_floor"].items():
        lines.append(f"first-delta: {key} / floor (median): {ratio:.2f}x")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--n", type=int, default=200, help="measured calls per variant (default 200)")
    parser.add_argument("--warmup", type=int, default=20, help="warm-up calls per variant (default 20)")
    parser.add_argument("--deltas", type=int, default=4, help="text pieces per reply (default 4)")
    parser.add_argument("--gap-ms", type=float, default=5.0, help="ms between the pieces after the first (default 5)")
    parser.add_argument("--server", choices=["child", "inprocess"], default="child")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    parser.add_argument("--serve", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        return serve(int(args.serve[0]), float(args.serve[1]))
    report = benchmark(max(1, args.n), max(0, args.warmup), max(1, args.deltas), max(0.0, args.gap_ms), args.server)
    print(json.dumps(report) if args.json else render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
