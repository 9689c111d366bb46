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

* first-event: the same server, read through the library's streams: time from the start
  of a run to its first ``text`` event in the consumer's hands, for ``Client.stream`` and
  for ``Runtime.stream_agent`` (spawn, wake, stream, close per run), against the same
  raw ``requests`` floor, interleaved.
* agui-first-content: time from the start of a run to its first ``TEXT_MESSAGE_CONTENT``
  frame through ``toolnexus.agui.stream`` (the input checked, a thread's handle spawned and
  woken, its events as AG-UI SSE frames), against the raw ``Runtime.stream`` of the same run
  (spawn, wake, the first ``text`` event), as a ratio; interleaved.
* team-events: events per second a consumer reads from ``Runtime.stream_agent`` over a
  lead that delegates to 32 teammates in one step, each streaming its words (a scripted
  server in a child process), in memory and on a SQLite state.
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
if str(HERE) not in sys.path:  # also works as ``python -m benchmarks.streaming``
    sys.path.insert(0, str(HERE))
if importlib.util.find_spec("toolnexus") is None:  # not installed: benchmark the checkout itself
    sys.path.insert(1, str(HERE.parent))

import _child  # noqa: E402

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


class ChildServer(_child.ChildServer):
    """The streaming server in a child process."""

    def __init__(self, deltas: int, gap_s: float) -> None:
        super().__init__(__file__, str(deltas), str(gap_s))


def serve(deltas: int, gap_s: float) -> int:
    with StreamingServer(deltas, gap_s) as server:
        print(server.base_url, flush=True)
        sys.stdin.read()  # until the parent closes the pipe
    return 0


# --- the variants: each iteration returns (seconds to the first delta, the whole text) -------

Iteration = Callable[[], "tuple[float, str]"]


def make_ours(base_url: str, session: Any = None) -> tuple[Iteration, Callable[[], None]]:
    from toolnexus._model.engine import ConnectionOptions, ModelCall, build_engine

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
    return interleaved(VARIANTS, base_url, n, warmup, expected)


def interleaved(variants: dict[str, tuple[str, Callable[[str], tuple[Iteration, Callable[[], None]]]]], base_url: str, n: int, warmup: int, expected: str) -> dict[str, Any]:
    """Each variant's time to its first piece, the variants taking turns in a rotating
    order; medians, p90 and each one's ratio over ``floor``."""
    built = {key: make(base_url) for key, (_, make) in variants.items()}
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
    rows = {key: {"label": variants[key][0], "median_ms": round(statistics.median(s), 3), "p90_ms": round(sorted(s)[int(0.9 * (len(s) - 1))], 3), "samples": len(s)} for key, s in samples.items()}
    ratio = {key: round(rows[key]["median_ms"] / rows["floor"]["median_ms"], 2) for key in rows if key != "floor"}
    return {"variants": rows, "ratio_over_floor": ratio}


# --- through a stream: the first ``text`` event of a run, and a team's events per second -----


def first_text(start: Callable[[], Any]) -> tuple[float, str]:
    """Start a stream and read it to its end: the seconds to its first ``text`` event, and
    the text of all of them."""
    begun = time.perf_counter()
    first = None
    text: list[str] = []
    with start() as stream:
        for event in stream:
            if event.kind == "text":
                if first is None:
                    first = time.perf_counter() - begun
                text.append(event.data["delta"])
    assert first is not None
    return first, "".join(text)


def make_client_stream(base_url: str) -> tuple[Iteration, Callable[[], None]]:
    from toolnexus import Client

    client = Client(base_url=base_url, model=MODEL, api_key=API_KEY)

    return lambda: first_text(lambda: client.stream("tell me a story")), client.close


def make_runtime_stream(base_url: str) -> tuple[Iteration, Callable[[], None]]:
    from toolnexus import AgentDef, Runtime

    rt = Runtime({"teller": AgentDef("teller", "tells stories")}, base_url=base_url, model=MODEL, api_key=API_KEY)

    return lambda: first_text(lambda: rt.stream_agent("teller", "tell me a story")), lambda: rt.close(rt.root)  # spawn, wake, stream, close


STREAM_VARIANTS: dict[str, tuple[str, Callable[[str], tuple[Iteration, Callable[[], None]]]]] = {
    "client": ("Client.stream, first text event", make_client_stream),
    "runtime": ("Runtime.stream_agent, first text event", make_runtime_stream),
    "floor": ("requests stream=True + iter_lines", make_floor),
}


def measure_first_event(base_url: str, n: int, warmup: int, expected: str) -> dict[str, Any]:
    """Time to the first ``text`` event through a stream, against the same raw floor."""
    return interleaved(STREAM_VARIANTS, base_url, n, warmup, expected)


def make_agui_stream(base_url: str) -> tuple[Iteration, Callable[[], None]]:
    from toolnexus import AgentDef, Runtime, agui

    rt = Runtime({"teller": AgentDef("teller", "tells stories")}, base_url=base_url, model=MODEL, api_key=API_KEY)
    threads = iter(range(1 << 30))

    def once() -> tuple[float, str]:
        begun = time.perf_counter()
        first = None
        text: list[str] = []
        body = {
            "threadId": f"t{next(threads)}", "runId": "r", "state": {}, "tools": [], "context": [],
            "messages": [{"id": "u", "role": "user", "content": "tell me a story"}],
        }
        frames = agui.stream(rt, json.dumps(body).encode(), agent="teller")
        try:
            for frame in frames:
                if not frame.startswith(b"data: "):
                    continue
                event = json.loads(frame[6:])
                if event["type"] == "TEXT_MESSAGE_CONTENT":
                    if first is None:
                        first = time.perf_counter() - begun
                    text.append(event["delta"])
        finally:
            frames.close()  # type: ignore[attr-defined]
        assert first is not None
        return first, "".join(text)

    return once, lambda: rt.close(rt.root)


def make_runtime_raw(base_url: str) -> tuple[Iteration, Callable[[], None]]:
    from toolnexus import AgentDef, Runtime

    rt = Runtime({"teller": AgentDef("teller", "tells stories")}, base_url=base_url, model=MODEL, api_key=API_KEY)

    def start() -> Any:
        handle = rt.spawn(rt.root, "teller")
        stream = rt.stream(handle)
        rt.wake(handle, "tell me a story")
        return stream

    return lambda: first_text(start), lambda: rt.close(rt.root)


AGUI_VARIANTS: dict[str, tuple[str, Callable[[str], tuple[Iteration, Callable[[], None]]]]] = {
    "agui": ("agui.stream, first TEXT_MESSAGE_CONTENT frame", make_agui_stream),
    "runtime": ("Runtime.stream of the same run, first text", make_runtime_raw),
    "floor": ("requests stream=True + iter_lines", make_floor),
}


def measure_agui_first_content(base_url: str, n: int, warmup: int, expected: str) -> dict[str, Any]:
    """Time to the first ``TEXT_MESSAGE_CONTENT`` of an AG-UI run against the raw stream of
    the same run; the ratio of the two medians."""
    found = interleaved(AGUI_VARIANTS, base_url, n, warmup, expected)
    rows = found["variants"]
    found["agui_over_runtime"] = round(rows["agui"]["median_ms"] / rows["runtime"]["median_ms"], 2)
    return found


TEAM_CHILDREN = 32
WORDS = 12


def team_responder() -> Callable[[dict[str, Any]], dict[str, Any]]:
    """The lead asks ``TEAM_CHILDREN`` teammates at once, then sums up; each teammate answers
    with ``WORDS`` words (streamed word by word when asked)."""
    from toolnexus.testing import text_completion, tool_call_completion

    def respond(body: dict[str, Any]) -> dict[str, Any]:
        if body.get("model") == "lead":
            if any(m.get("role") == "tool" for m in body.get("messages") or ()):
                return text_completion(body, "all done")
            return tool_call_completion(body, [(f"t{i}", "task", {"agent": "worker", "prompt": f"part {i}"}) for i in range(TEAM_CHILDREN)])
        return text_completion(body, " ".join(f"w{i}" for i in range(WORDS)))

    return respond


def serve_team() -> int:
    from toolnexus.testing import ScriptedLLMServer

    with ScriptedLLMServer(team_responder()) as server:
        print(server.base_url, flush=True)
        sys.stdin.read()
    return 0


def measure_team_events(base_url: str, n: int, warmup: int, expected: str) -> dict[str, Any]:
    """Events per second a consumer reads from ``Runtime.stream_agent`` over a lead that
    delegates to 32 teammates at once (each streaming its words), in memory and on SQLite."""
    import tempfile

    from toolnexus import AgentDef, Runtime

    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--serve-team"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdin is not None
    team_url = proc.stdout.readline().strip()
    registry = {"lead": AgentDef("lead", "delegates", model="lead", team=("worker",)), "worker": AgentDef("worker", "answers", model="worker")}
    folder = tempfile.mkdtemp(prefix="toolnexus-stream-bench-")
    results: dict[str, Any] = {}
    try:
        for where in ("memory", "sqlite"):
            options: dict[str, Any] = {"state": f"{folder}/team.db"} if where == "sqlite" else {}
            rt = Runtime(registry, base_url=team_url, model="lead", api_key=API_KEY, max_workers=TEAM_CHILDREN + 4, **options)
            rates, counts = [], []
            try:
                for rep in range(max(1, warmup // 10) + max(3, n // 20)):
                    begun = time.perf_counter()
                    with rt.stream_agent("lead", "go") as stream:
                        count = sum(1 for _ in stream)
                    if stream.result is None or stream.result.text != "all done":
                        raise RuntimeError(f"team run ended {stream.result!r}")
                    if rep >= max(1, warmup // 10):
                        rates.append(count / (time.perf_counter() - begun))
                        counts.append(count)
            finally:
                rt.release()
            results[where] = {"events_per_run": statistics.median(counts), "events_per_s_median": round(statistics.median(rates)), "runs": len(rates)}
    finally:
        proc.stdin.close()
        proc.wait(10)
    return {"children": TEAM_CHILDREN, "words_per_child": WORDS, "stores": results}


#: Every figure ``benchmark`` measures, each against the same streaming server.
MEASURES: dict[str, Callable[[str, int, int, str], dict[str, Any]]] = {
    "first-delta": measure_first_delta,
    "first-event": measure_first_event,
    "agui-first-content": measure_agui_first_content,
    "team-events": measure_team_events,
}


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
    event = report["measures"]["first-event"]
    lines += ["", "[first-event] time from the run's start to its first text event, through a stream", f"{'variant':<46}{'median ms':>11}{'p90 ms':>10}"]
    for row in event["variants"].values():
        lines.append(f"{row['label']:<46}{row['median_ms']:>11.3f}{row['p90_ms']:>10.3f}")
    for key, ratio in event["ratio_over_floor"].items():
        lines.append(f"first-event: {key} / floor (median): {ratio:.2f}x")
    first_content = report["measures"]["agui-first-content"]
    lines += ["", "[agui-first-content] time from the run's start to its first TEXT_MESSAGE_CONTENT",
              f"{'variant':<46}{'median ms':>11}{'p90 ms':>10}"]
    for row in first_content["variants"].values():
        lines.append(f"{row['label']:<46}{row['median_ms']:>11.3f}{row['p90_ms']:>10.3f}")
    lines.append(f"agui-first-content: agui / Runtime.stream (median): {first_content['agui_over_runtime']:.2f}x")
    team = report["measures"]["team-events"]
    lines += ["", f"[team-events] a lead delegating to {team['children']} teammates at once, {team['words_per_child']} streamed words each"]
    for where, row in team["stores"].items():
        lines.append(f"{where:<10} {row['events_per_s_median']:>8} events/s read through Runtime.stream_agent (median of {row['runs']} runs, {row['events_per_run']:.0f} events a run)")
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
    parser.add_argument("--serve-team", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        return serve(int(args.serve[0]), float(args.serve[1]))
    if args.serve_team:
        return serve_team()
    report = benchmark(max(1, args.n), max(0, args.warmup), max(1, args.deltas), max(0.0, args.gap_ms), args.server)
    print(json.dumps(report) if args.json else render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
