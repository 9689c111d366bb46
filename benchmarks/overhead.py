"""Per-run overhead of toolnexus against hand-written HTTP floors, in two scenarios.

* tools (one iteration): the model asks for two ``lookup`` tool calls, the tools run,
  the model answers with final text -- two chat-completion round trips.
* delegate (one iteration): a ``boss`` agent's model asks for two ``task`` calls to a
  ``researcher`` agent, each researcher makes one ``lookup`` call and answers, the boss
  answers -- six round trips, run through the level-1 ``agent(...).run(...)`` the way a
  web view calls it on every request (a fresh runtime per run).

Both run against a local scripted server (``toolnexus.testing.ScriptedLLMServer``).
Variants, interleaved round-robin in one process so they share machine noise:

* ours    -- ``Client(...).run("go", Toolkit([lookup]))`` / ``boss.run("go", ...)``
* floor A -- the same round trips with a plain ``requests.Session().post``
* floor B -- the same round trips with a kept-alive ``http.client.HTTPConnection``

The server runs in a child process by default (``--server inprocess`` keeps it in this
process, as a test would; its threads then compete with the client for the interpreter
lock, which penalises any client that runs requests concurrently).

Usage: ``python benchmarks/overhead.py [--n N] [--warmup W] [--scenario tools|delegate|all]
[--server child|inprocess] [--json]`` (after ``pip install -e .``).
"""

from __future__ import annotations

import argparse
import http.client
import importlib.util
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable
from urllib.parse import urlsplit

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # also works as ``python -m benchmarks.overhead``
    sys.path.insert(0, str(HERE))
if importlib.util.find_spec("toolnexus") is None:  # not installed: benchmark the checkout itself
    sys.path.insert(1, str(HERE.parent))

import _child  # noqa: E402
from toolnexus.testing import ScriptedLLMServer, completion  # noqa: E402

MODEL = "bench"
API_KEY = "sk-bench"
EXPECTED_TEXT = "done: data(a), data(b)"
LOOKUP_SPEC = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look up a key.",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
    },
}

DELEGATE_TEXT = "report: found(data(a)) | found(data(b))"

Iteration = Callable[[], None]


class Variant:
    """One benchmarked implementation: an iteration callable, a cleanup, and its samples."""

    def __init__(self, key: str, label: str, run: Iteration | None, close: Callable[[], None] | None = None,
                 error: str | None = None) -> None:
        self.key, self.label, self.run, self.close = key, label, run, close
        self.error = error
        self.samples_ns: list[int] = []
        self.requests_per_iter: float | None = None

    @property
    def ok(self) -> bool:
        return self.run is not None and self.error is None


def lookup(q: str) -> str:
    """The trivial tool every variant runs."""
    return f"data({q})"


def run_tool_calls(messages: list[dict[str, Any]], reply: dict[str, Any]) -> None:
    """Append the assistant message and one tool message per call (the floors' inline tool loop)."""
    message = reply["choices"][0]["message"]
    messages.append(message)
    for call in message.get("tool_calls") or ():
        args = json.loads(call["function"]["arguments"])
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": lookup(**args)})


def final_text(reply: dict[str, Any]) -> str:
    """The final assistant text; fails loudly if the scenario went off script."""
    text = reply["choices"][0]["message"]["content"]
    if text != EXPECTED_TEXT:
        raise RuntimeError(f"unexpected final text {text!r}")
    return text


def request_body(messages: list[dict[str, Any]]) -> dict[str, Any]:
    return {"model": MODEL, "messages": messages, "tools": [LOOKUP_SPEC]}


def make_ours(base_url: str) -> Variant:
    """``toolnexus.Client.run`` -- or a Variant carrying the reason it is unavailable."""
    key, label = "ours", "toolnexus Client.run"
    try:
        from toolnexus import Client, Toolkit, tool
    except Exception as exc:  # the Client may not exist yet; report instead of crashing
        return Variant(key, label, None, error=f"toolnexus.Client not importable: {type(exc).__name__}: {exc}")
    try:
        client = Client(base_url=base_url, model=MODEL, api_key=API_KEY)
        toolkit = Toolkit([tool(lookup)])
    except Exception as exc:
        return Variant(key, label, None, error=f"could not build Client/Toolkit: {type(exc).__name__}: {exc}")

    def once() -> None:
        result = client.run("go", toolkit)
        if result.status != "done":
            raise RuntimeError(f"run status {result.status!r} (text {getattr(result, 'text', None)!r})")

    return Variant(key, label, once, close=getattr(client, "close", None))


def make_floor_requests(base_url: str) -> Variant:
    """Floor A: a default ``requests.Session`` posting JSON."""
    import requests

    session = requests.Session()
    url = base_url + "/chat/completions"
    headers = {"Authorization": f"Bearer {API_KEY}"}

    def post(messages: list[dict[str, Any]]) -> dict[str, Any]:
        response = session.post(url, json=request_body(messages), headers=headers)
        response.raise_for_status()
        return response.json()

    def once() -> None:
        messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
        run_tool_calls(messages, post(messages))
        final_text(post(messages))

    return Variant("floor_a", "floor A: requests.Session", once, close=session.close)


def make_floor_http_client(base_url: str) -> Variant:
    """Floor B: a kept-alive stdlib ``http.client.HTTPConnection``."""
    parts = urlsplit(base_url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port)
    path = parts.path.rstrip("/") + "/chat/completions"
    headers = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"}

    def post(messages: list[dict[str, Any]]) -> dict[str, Any]:
        conn.request("POST", path, body=json.dumps(request_body(messages)).encode(), headers=headers)
        response = conn.getresponse()
        data = response.read()
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {data[:200]!r}")
        return json.loads(data)

    def once() -> None:
        messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
        run_tool_calls(messages, post(messages))
        final_text(post(messages))

    return Variant("floor_b", "floor B: http.client", once, close=conn.close)


# --- the delegate scenario -------------------------------------------------------------------


def _call(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def _texts(messages: list[dict[str, Any]], role: str) -> list[str]:
    return [str(m.get("content") or "") for m in messages if m.get("role") == role]


def delegate_responder(body: dict[str, Any]) -> dict[str, Any]:
    """The boss (its request offers ``task``) delegates ``a`` and ``b``, then reports; a
    researcher (offered ``lookup``) looks its prompt up, then answers with the result."""
    messages = body.get("messages") or []
    tools = {t["function"]["name"] for t in body.get("tools") or ()}
    results = _texts(messages, "tool")
    if "task" in tools:
        if not results:
            calls = [_call("t1", "task", {"agent": "researcher", "prompt": "a"}),
                     _call("t2", "task", {"agent": "researcher", "prompt": "b"})]
            return completion(body, {"role": "assistant", "content": None, "tool_calls": calls}, "tool_calls")
        return completion(body, {"role": "assistant", "content": "report: " + " | ".join(results)}, "stop")
    if not results:
        prompt = _texts(messages, "user")[-1].split()[0]
        return completion(body, {"role": "assistant", "content": None, "tool_calls": [_call("l1", "lookup", {"q": prompt})]}, "tool_calls")
    return completion(body, {"role": "assistant", "content": f"found({results[-1]})"}, "stop")


TASK_SPEC = {
    "type": "function",
    "function": {
        "name": "task",
        "description": "Delegate a subtask.",
        "parameters": {"type": "object", "properties": {"agent": {"type": "string"}, "prompt": {"type": "string"}},
                       "required": ["agent", "prompt"]},
    },
}


def delegate_by_hand(post: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """The floors' six round trips: boss, researcher a (two), researcher b (two), boss."""
    boss: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    first = post({"model": MODEL, "messages": boss, "tools": [TASK_SPEC]})["choices"][0]["message"]
    boss.append(first)
    for call in first["tool_calls"]:
        prompt = json.loads(call["function"]["arguments"])["prompt"]
        worker: list[dict[str, Any]] = [{"role": "user", "content": prompt}]
        run_tool_calls(worker, post(request_body(worker)))
        answer = post(request_body(worker))["choices"][0]["message"]["content"]
        boss.append({"role": "tool", "tool_call_id": call["id"], "content": answer})
    text = post({"model": MODEL, "messages": boss, "tools": [TASK_SPEC]})["choices"][0]["message"]["content"]
    if text != DELEGATE_TEXT:
        raise RuntimeError(f"unexpected final text {text!r}")


def make_ours_delegate(base_url: str) -> Variant:
    """``agent("boss", team=[researcher]).run(...)``: a fresh runtime on every run."""
    key, label = "ours", "toolnexus agent().run"
    try:
        from toolnexus import agent, tool

        researcher = agent("researcher", does="Looks one thing up", tools=[tool(lookup)])
        boss = agent("boss", does="Delegates research", team=[researcher])
    except Exception as exc:
        return Variant(key, label, None, error=f"could not define the agents: {type(exc).__name__}: {exc}")

    def once() -> None:
        result = boss.run("go", base_url=base_url, model=MODEL, api_key=API_KEY)
        if result.status != "done" or result.text != DELEGATE_TEXT:
            raise RuntimeError(f"run status {result.status!r} (text {result.text!r})")

    return Variant(key, label, once)


def make_floor_requests_delegate(base_url: str) -> Variant:
    import requests

    session = requests.Session()
    url = base_url + "/chat/completions"
    headers = {"Authorization": f"Bearer {API_KEY}"}

    def post(body: dict[str, Any]) -> dict[str, Any]:
        response = session.post(url, json=body, headers=headers)
        response.raise_for_status()
        return response.json()

    return Variant("floor_a", "floor A: requests.Session", lambda: delegate_by_hand(post), close=session.close)


def make_floor_http_client_delegate(base_url: str) -> Variant:
    parts = urlsplit(base_url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port)
    path = parts.path.rstrip("/") + "/chat/completions"
    headers = {"Authorization": f"Bearer {API_KEY}", "Content-Type": "application/json"}

    def post(body: dict[str, Any]) -> dict[str, Any]:
        conn.request("POST", path, body=json.dumps(body).encode(), headers=headers)
        response = conn.getresponse()
        data = response.read()
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}: {data[:200]!r}")
        return json.loads(data)

    return Variant("floor_b", "floor B: http.client", lambda: delegate_by_hand(post), close=conn.close)


SCENARIOS: dict[str, tuple[str, Any, list[Callable[[str], Variant]]]] = {
    "tools": ("2 round trips + 2 tool calls, Client.run", None,
              [make_ours, make_floor_requests, make_floor_http_client]),
    "delegate": ("6 round trips: boss -> 2 x task -> researcher + lookup, agent().run", delegate_responder,
                 [make_ours_delegate, make_floor_requests_delegate, make_floor_http_client_delegate]),
}


class ChildServer(_child.ChildServer):
    """The scripted server of a scenario in a child process; ``requests_seen`` asks the
    child for its count over a pipe."""

    def __init__(self, scenario: str) -> None:
        super().__init__(__file__, scenario)

    @property
    def requests_seen(self) -> int:
        return int(self.ask("count"))


def serve(scenario: str) -> int:
    """The child side of ``ChildServer``: print the base URL, answer counts, stop at EOF."""
    with ScriptedLLMServer(SCENARIOS[scenario][1]) as server:
        print(server.base_url, flush=True)
        for line in sys.stdin:
            if line.strip() == "count":
                print(server.requests_seen, flush=True)
    return 0


def smoke_test(variant: Variant, server: Any) -> None:
    """Run one untimed iteration; record failures and the server requests it took."""
    if not variant.ok:
        return
    before = server.requests_seen
    try:
        variant.run()
    except Exception as exc:
        variant.error = f"first iteration failed: {type(exc).__name__}: {exc}"
        return
    variant.requests_per_iter = float(server.requests_seen - before)


def round_robin(variants: list[Variant], reps: int, *, record: bool) -> None:
    """``reps`` rounds; each runs one iteration of every live variant, rotating the start."""
    for rep in range(reps):
        live = [v for v in variants if v.ok]
        if not live:
            return
        shift = rep % len(live)
        for variant in live[shift:] + live[:shift]:
            start = time.perf_counter_ns()
            try:
                variant.run()  # type: ignore[misc]
            except Exception as exc:  # drop a failing variant, keep measuring the others
                variant.error = f"failed at rep {rep}: {type(exc).__name__}: {exc}"
                continue
            if record:
                variant.samples_ns.append(time.perf_counter_ns() - start)


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def summarize(variant: Variant) -> dict[str, Any]:
    """Median/p90 in microseconds, or the error that kept the variant from being measured."""
    if not variant.ok or not variant.samples_ns:
        return {"label": variant.label, "error": variant.error or "no samples"}
    us = [ns / 1000 for ns in variant.samples_ns]
    return {
        "label": variant.label,
        "median_us": round(statistics.median(us), 1),
        "p90_us": round(percentile(us, 90), 1),
        "samples": len(us),
        "requests_per_iter": variant.requests_per_iter,
    }


def ratio(results: dict[str, dict[str, Any]], num: str, den: str) -> float | None:
    a, b = results[num].get("median_us"), results[den].get("median_us")
    return round(a / b, 2) if a and b else None


#: The subprocesses may write byte-code, as an installed package has it: without it every
#: import would compile the package from source (``PYTHONDONTWRITEBYTECODE`` set here).
_IMPORT_ENV = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}


def _time_python(code: str) -> float:
    """Wall seconds of one ``python -c code`` run in a fresh subprocess."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, cwd=HERE.parent, env=_IMPORT_ENV,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def import_time_ms(reps: int = 5) -> float | str:
    """Median (``import toolnexus`` - bare interpreter start) over ``reps`` fresh subprocesses, in ms."""
    try:
        _time_python("import toolnexus")  # warm the OS/file caches and byte-compile
        with_import, bare = [], []
        for _ in range(reps):
            bare.append(_time_python("pass"))
            with_import.append(_time_python("import toolnexus"))
    except subprocess.CalledProcessError:
        return "error: `import toolnexus` failed in a subprocess"
    return round((statistics.median(with_import) - statistics.median(bare)) * 1000, 1)


def peak_rss_mb() -> float:
    """Peak RSS of this process (ru_maxrss is KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1024 * 1024 if sys.platform == "darwin" else 1024), 1)


def run_scenario(name: str, n: int, warmup: int, where: str) -> dict[str, Any]:
    """Start the server, run warm-up and measured rounds, and collect one scenario's figures."""
    title, responder, makers = SCENARIOS[name]
    with (ChildServer(name) if where == "child" else ScriptedLLMServer(responder)) as server:
        variants = [make(server.base_url) for make in makers]
        try:
            for variant in variants:
                smoke_test(variant, server)
            round_robin(variants, warmup, record=False)
            round_robin(variants, n, record=True)
        finally:
            for variant in variants:
                if variant.close is not None:
                    try:
                        variant.close()
                    except Exception:
                        pass
    results = {v.key: summarize(v) for v in variants}
    return {
        "title": title,
        "variants": results,
        "ratio_ours_over_a": ratio(results, "ours", "floor_a"),
        "ratio_ours_over_b": ratio(results, "ours", "floor_b"),
    }


def benchmark(n: int, warmup: int, scenarios: list[str], where: str) -> dict[str, Any]:
    return {
        "n": n,
        "warmup": warmup,
        "server": where,
        "python": sys.version.split()[0],
        "scenarios": {name: run_scenario(name, n, warmup, where) for name in scenarios},
        "import_toolnexus_ms": import_time_ms(),
        "peak_rss_mb": peak_rss_mb(),
    }


def render(report: dict[str, Any]) -> str:
    """The figures as a small plain-text table per scenario."""
    lines = [f"toolnexus overhead, n={report['n']} (warm-up {report['warmup']}), Python {report['python']}, "
             f"server in {'a child process' if report['server'] == 'child' else 'this process'}"]
    fmt = lambda value: "n/a" if value is None else f"{value:.2f}x"  # noqa: E731
    for name, scenario in report["scenarios"].items():
        lines += ["", f"[{name}] {scenario['title']}",
                  f"{'variant':<28}{'median us':>12}{'p90 us':>12}{'req/iter':>10}"]
        for row in scenario["variants"].values():
            if "error" in row:
                lines.append(f"{row['label']:<28}  unavailable -- {row['error']}")
            else:
                lines.append(f"{row['label']:<28}{row['median_us']:>12.1f}{row['p90_us']:>12.1f}"
                             f"{row['requests_per_iter'] or 0:>10.0f}")
        lines += [f"{name}: ours / floor A (median): {fmt(scenario['ratio_ours_over_a'])}",
                  f"{name}: ours / floor B (median): {fmt(scenario['ratio_ours_over_b'])}"]
    imp = report["import_toolnexus_ms"]
    lines += ["", f"import toolnexus:        {imp if isinstance(imp, str) else f'{imp:.1f} ms'} "
              "(fresh subprocess, median of 5, minus bare interpreter start)",
              f"peak RSS (this process): {report['peak_rss_mb']:.1f} MB"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--n", type=int, default=300, help="measured iterations per variant (default 300)")
    parser.add_argument("--warmup", type=int, default=30, help="warm-up iterations per variant (default 30)")
    parser.add_argument("--scenario", choices=[*SCENARIOS, "all"], default="all", help="which scenario (default all)")
    parser.add_argument("--server", choices=["child", "inprocess"], default="child",
                        help="run the scripted server in a child process (default) or in this process, "
                             "where its threads compete with the client for the interpreter lock")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        return serve(args.serve)
    names = list(SCENARIOS) if args.scenario == "all" else [args.scenario]
    report = benchmark(max(1, args.n), max(0, args.warmup), names, args.server)
    print(json.dumps(report) if args.json else render(report))
    rows = [row for scenario in report["scenarios"].values() for row in scenario["variants"].values()]
    return 0 if all("error" not in row for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
