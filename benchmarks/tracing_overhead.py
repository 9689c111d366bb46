"""What tracing costs: the overhead benchmark's tools scenario under three set-ups.

One iteration is ``overhead.py``'s "ours" scenario (``Client.run`` with two ``lookup`` tool
calls over two round trips to a local scripted server); ``--scenario in-process`` makes the
same calls against a ``generate=`` model, without the network noise. Each measurement runs
in a fresh interpreter so that what is importable differs:

* absent -- ``opentelemetry`` cannot be imported (a ``sys.meta_path`` blocker)
* api    -- ``opentelemetry-api`` importable, no SDK configured (the default no-op provider)
* sdk    -- the SDK's ``TracerProvider`` with a span processor feeding an exporter that drops
            every span (the cost of building and ending the spans themselves)

``--checkout LABEL=PATH`` (repeatable) runs the same modes against other source trees, e.g.
an export of another branch, to compare them; the default is this checkout. Rounds
alternate checkouts and modes so that they share machine noise; the report gives the
median over all samples and the median of the per-round medians.

Usage: ``python benchmarks/tracing_overhead.py [--rounds R] [--n N] [--modes absent,sdk]
[--scenario http|in-process] [--checkout main=/tmp/main-export] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MODES = ("absent", "api", "sdk")

_DRIVER = r"""
import json, sys, time
checkout, benchmarks, mode, n, warmup, scenario = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
sys.path[:0] = [checkout, benchmarks]

if mode == "absent":
    class Block:
        def find_spec(self, name, path=None, target=None):
            if name == "opentelemetry" or name.startswith("opentelemetry."):
                raise ImportError("blocked")
            return None
    sys.meta_path.insert(0, Block())
elif mode == "sdk":
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    class Drop(SpanExporter):
        def export(self, spans):
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(Drop()))
    trace.set_tracer_provider(provider)

import toolnexus
assert toolnexus.__file__.startswith(checkout), (toolnexus.__file__, checkout)
from overhead import EXPECTED_TEXT, lookup, make_ours
from toolnexus.testing import ScriptedLLMServer


def measure(run):
    for _ in range(warmup):
        run()
    samples = []
    for _ in range(n):
        start = time.perf_counter_ns()
        run()
        samples.append(time.perf_counter_ns() - start)
    return samples


if scenario == "http":
    with ScriptedLLMServer() as server:
        variant = make_ours(server.base_url)
        assert variant.ok, variant.error
        samples = measure(variant.run)
        variant.close()
else:  # the same calls against an in-process model: no network noise, the loop's own cost
    from toolnexus import Client, Toolkit, tool

    asks = {"tool_calls": [{"id": "a", "name": "lookup", "arguments": {"q": "a"}}, {"id": "b", "name": "lookup", "arguments": {"q": "b"}}]}

    def generate(request):
        answered = request["messages"][-1]["role"] == "tool"
        return {"content": EXPECTED_TEXT} if answered else asks

    client = Client(model="bench", generate=generate)
    toolkit = Toolkit([tool(lookup)])

    def once():
        assert client.run("go", toolkit).text == EXPECTED_TEXT

    samples = measure(once)
    client.close()
loaded = any(name.startswith("opentelemetry") for name in sys.modules)
print(json.dumps({"samples_ns": samples, "opentelemetry_loaded": loaded}))
"""


def measure(checkout: Path, mode: str, n: int, warmup: int, scenario: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", _DRIVER, str(checkout), str(HERE), mode, str(n), str(warmup), scenario],
        capture_output=True, text=True, timeout=600, check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{checkout} / {mode} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--rounds", type=int, default=5, help="rounds over every checkout and mode (default 5)")
    parser.add_argument("--n", type=int, default=200, help="measured iterations per round (default 200)")
    parser.add_argument("--warmup", type=int, default=30, help="warm-up iterations per round (default 30)")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of absent,api,sdk")
    parser.add_argument("--scenario", choices=("http", "in-process"), default="http",
                        help="http: the local scripted server (default); in-process: a generate= model, no network")
    parser.add_argument("--checkout", action="append", default=[], metavar="LABEL=PATH", help="another source tree to measure")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    unknown = set(modes) - set(MODES)
    if unknown:
        parser.error(f"unknown mode(s): {', '.join(sorted(unknown))}")
    checkouts = {"this": HERE.parent}
    for item in args.checkout:
        label, _, path = item.partition("=")
        checkouts[label] = Path(path).resolve()
    cells = [(label, mode) for label in checkouts for mode in modes]
    samples: dict[tuple[str, str], list[int]] = {cell: [] for cell in cells}
    round_medians: dict[tuple[str, str], list[float]] = {cell: [] for cell in cells}
    loaded: dict[tuple[str, str], bool] = {}
    for round_no in range(args.rounds):
        shift = round_no % len(cells)
        for label, mode in cells[shift:] + cells[:shift]:
            got = measure(checkouts[label], mode, args.n, args.warmup, args.scenario)
            samples[(label, mode)].extend(got["samples_ns"])
            round_medians[(label, mode)].append(statistics.median(got["samples_ns"]) / 1000)
            loaded[(label, mode)] = got["opentelemetry_loaded"]
    rows = {
        f"{label}/{mode}": {
            "median_us": round(statistics.median(samples[(label, mode)]) / 1000, 1),
            "median_of_round_medians_us": round(statistics.median(round_medians[(label, mode)]), 1),
            "fastest_round_median_us": round(min(round_medians[(label, mode)]), 1),
            "round_medians_us": [round(v, 1) for v in round_medians[(label, mode)]],
            "opentelemetry_loaded": loaded[(label, mode)],
        }
        for label, mode in cells
    }
    if args.json:
        print(json.dumps({"scenario": args.scenario, "rounds": args.rounds, "n": args.n, "rows": rows}, indent=2))
        return 0
    print(f"tools scenario ({args.scenario}: 2 model calls + 2 tool calls), {args.rounds} rounds x {args.n} iterations, fresh process per round")
    print(f"{'checkout/mode':<24}{'median us':>12}{'med of rounds':>15}{'fastest round':>15}  otel loaded")
    for key, row in rows.items():
        print(f"{key:<24}{row['median_us']:>12.1f}{row['median_of_round_medians_us']:>15.1f}{row['fastest_round_median_us']:>15.1f}  {row['opentelemetry_loaded']}")
    base = rows.get(f"this/{modes[0]}")
    if base:
        print(f"ratios to this/{modes[0]} (median of all samples; fastest round):")
        for key, row in rows.items():
            print(f"  {key:<22}{row['median_us'] / base['median_us']:.3f}x  {row['fastest_round_median_us'] / base['fastest_round_median_us']:.3f}x")
    print("round medians (us):")
    for key, row in rows.items():
        print(f"  {key:<22}{row['round_medians_us']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
