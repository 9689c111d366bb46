"""Per-run overhead of ``toolnexus.Client.run`` against hand-written HTTP floors.

Scenario (one iteration): the model asks for two ``lookup`` tool calls, the tools run,
the model answers with final text -- two chat-completion round trips against a local
scripted server (``_llm_server.py``). Variants, interleaved round-robin in one process
so they share machine noise:

* ours    -- ``Client(...).run("go", Toolkit([lookup]))``
* floor A -- the same two round trips with a plain ``requests.Session``
* floor B -- the same two round trips with a kept-alive ``http.client.HTTPConnection``

Usage: ``python benchmarks/overhead.py [--n N] [--warmup W] [--json]`` (after ``pip install -e .``).
"""

from __future__ import annotations

import argparse
import http.client
import importlib.util
import json
import math
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

from toolnexus.testing import ScriptedLLMServer  # noqa: E402

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


def smoke_test(variant: Variant, server: ScriptedLLMServer) -> None:
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


def _time_python(code: str) -> float:
    """Wall seconds of one ``python -c code`` run in a fresh subprocess."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, cwd=HERE.parent,
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


def benchmark(n: int, warmup: int) -> dict[str, Any]:
    """Start the server, run warm-up and measured rounds, and collect every figure."""
    with ScriptedLLMServer() as server:
        variants = [make_ours(server.base_url), make_floor_requests(server.base_url),
                    make_floor_http_client(server.base_url)]
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
        "n": n,
        "warmup": warmup,
        "python": sys.version.split()[0],
        "variants": results,
        "ratio_ours_over_a": ratio(results, "ours", "floor_a"),
        "ratio_ours_over_b": ratio(results, "ours", "floor_b"),
        "import_toolnexus_ms": import_time_ms(),
        "peak_rss_mb": peak_rss_mb(),
    }


def render(report: dict[str, Any]) -> str:
    """The figures as a small plain-text table."""
    lines = [f"toolnexus overhead: 2 round trips + 2 tool calls per iteration, "
             f"n={report['n']} (warm-up {report['warmup']}), Python {report['python']}", ""]
    lines.append(f"{'variant':<28}{'median us':>12}{'p90 us':>12}{'req/iter':>10}")
    for row in report["variants"].values():
        if "error" in row:
            lines.append(f"{row['label']:<28}  unavailable -- {row['error']}")
        else:
            lines.append(f"{row['label']:<28}{row['median_us']:>12.1f}{row['p90_us']:>12.1f}"
                         f"{row['requests_per_iter'] or 0:>10.0f}")
    fmt = lambda value: "n/a" if value is None else f"{value:.2f}x"  # noqa: E731
    lines += ["", f"ours / floor A (median): {fmt(report['ratio_ours_over_a'])}",
              f"ours / floor B (median): {fmt(report['ratio_ours_over_b'])}"]
    imp = report["import_toolnexus_ms"]
    lines.append(f"import toolnexus:        {imp if isinstance(imp, str) else f'{imp:.1f} ms'} "
                 "(fresh subprocess, median of 5, minus bare interpreter start)")
    lines.append(f"peak RSS (this process): {report['peak_rss_mb']:.1f} MB")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--n", type=int, default=300, help="measured iterations per variant (default 300)")
    parser.add_argument("--warmup", type=int, default=30, help="warm-up iterations per variant (default 30)")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = parser.parse_args(argv)
    report = benchmark(max(1, args.n), max(0, args.warmup))
    print(json.dumps(report) if args.json else render(report))
    return 0 if all("error" not in row for row in report["variants"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
