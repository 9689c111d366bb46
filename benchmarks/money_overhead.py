"""What pricing and money caps cost per run, against the same run without them.

One iteration: a ``lead`` delegates to four ``worker`` agents in one model step (they run
in parallel); each worker calls a ``lookup`` tool and answers; the lead answers - ten model
calls on an in-process ``generate`` model (no network, no latency), run through
``agent(...).run(...)`` with a fresh runtime per run, as a web view would.

Variants, interleaved round-robin in one process so they share machine noise:

* plain  -- no ``prices=``
* priced -- ``prices=`` for both models: every reply gets its cost, every ledger charges it
* capped -- priced, and the lead has ``Budget(max_cost=...)`` far above what a run spends:
  every model call of the team is checked against the lead's cap and counted in flight

``--latency-ms`` gives each model call a delay (a model's time to answer), so the calls
of the four workers overlap in flight as they would against a real endpoint.

Usage: ``python benchmarks/money_overhead.py [--n N] [--warmup W] [--latency-ms MS] [--json]``
(after ``pip install -e .``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any, Callable

from toolnexus import Budget, agent, tool
from toolnexus.testing import ScriptedModel, tool_messages

USAGE = {"prompt_tokens": 1000, "completion_tokens": 200, "total_tokens": 1200}
PRICES = {"m-lead": {"input": 3.0, "output": 15.0}, "m-worker": {"input": 0.15, "output": 0.6, "cached_input": 0.075}}
WORKERS = 4


@tool
def lookup(q: str) -> str:
    """Look something up."""
    return f"facts about {q}"


def model(latency_s: float) -> ScriptedModel:
    def lead(request: dict[str, Any]) -> dict[str, Any]:
        time.sleep(latency_s)
        if tool_messages(request):
            return {"content": "report"}
        return {"tool_calls": [{"id": f"call_{n}", "name": "task", "arguments": {"agent": "worker", "prompt": f"part {n}"}} for n in range(WORKERS)]}

    def worker(request: dict[str, Any]) -> dict[str, Any]:
        time.sleep(latency_s)
        if tool_messages(request):
            return {"content": "notes"}
        return {"tool_calls": [{"name": "lookup", "arguments": {"q": "x"}}]}

    return ScriptedModel({"m-lead": lead, "m-worker": worker}, usage=USAGE)


def variants(latency_s: float) -> dict[str, Callable[[], Any]]:
    worker = agent("worker", does="looks things up", model="m-worker", tools=[lookup])
    plain = agent("lead", does="delegates", model="m-lead", team=[worker])
    capped = agent("lead", does="delegates", model="m-lead", team=[worker], budget=Budget(max_cost=1000.0))
    scripted = model(latency_s)
    return {
        "plain": lambda: plain.run("go", generate=scripted),
        "priced": lambda: plain.run("go", generate=scripted, prices=PRICES),
        "capped": lambda: capped.run("go", generate=scripted, prices=PRICES),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=300, help="timed runs per variant (default 300)")
    parser.add_argument("--warmup", type=int, default=30, help="untimed runs per variant first (default 30)")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="each model call's delay (default 0)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = parser.parse_args()
    runs = variants(args.latency_ms / 1000)
    for run in runs.values():
        for _ in range(args.warmup):
            assert run().status == "done"
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.n):
        for name, run in runs.items():
            started = time.perf_counter()
            result = run()
            times[name].append(time.perf_counter() - started)
            assert result.status == "done"
    medians = {name: statistics.median(values) * 1000 for name, values in times.items()}
    report = {name: {"median_ms": round(ms, 3), "ratio_to_plain": round(ms / medians["plain"], 3)} for name, ms in medians.items()}
    if args.json:
        print(json.dumps({"n": args.n, "latency_ms": args.latency_ms, "variants": report}))
        return
    print(f"{args.n} runs per variant, {WORKERS} workers, 10 model calls a run, latency {args.latency_ms} ms")
    for name, row in report.items():
        print(f"  {name:<7} median {row['median_ms']:8.3f} ms   x{row['ratio_to_plain']:.3f}")


if __name__ == "__main__":
    main()
