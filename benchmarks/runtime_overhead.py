"""Runtime overhead: how fast the agent runtime turns handles over, and how wide it fans out.

Two scenarios, each against an in-process model (``generate=``), so only the runtime is
measured:

(a) cycles/s -- ``spawn(root, "a")``, ``wake(h, "x")``, ``wait(h)``, ``close(h)`` in a loop
    with a model that answers at once; and the same one-shot through ``rt.run_agent``.
    Several timed rounds; the median round's rate is reported (target >= 2,000/s).
(b) fan-out -- 1,000 handles spawned under the root, all woken, then all waited, with a
    model call that sleeps 100 ms (simulated provider latency). Wall time from the first
    wake to the last result, median of 5 rounds, each on a fresh
    ``Runtime(..., max_workers=1024)`` closed afterwards (target < 1.5 s).
(c) interrupt -- a handle whose model call stalls on a local HTTP server is interrupted;
    time from ``interrupt`` to state ``idle``, and to the worker's model call being
    aborted (its socket shut down), median of 20 (target < 100 ms for both).

Usage: ``python benchmarks/runtime_overhead.py [--json] [--rounds 7] [--round-s 1.0]
[--fanout 1000] [--fanout-rounds 5] [--strict]`` (``--strict`` exits 1 on a missed target).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
if importlib.util.find_spec("toolnexus") is None:  # not installed: benchmark the checkout itself
    sys.path.insert(0, str(HERE.parent))

from toolnexus import AgentDef, Runtime  # noqa: E402
from toolnexus.testing import ScriptedLLMServer  # noqa: E402

REGISTRY = {"a": AgentDef("a", "answers at once")}
USAGE = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
CYCLES_TARGET = 2000.0  # cycles per second, at least
FANOUT_TARGET_S = 1.5  # seconds, below
MODEL_LATENCY_S = 0.1
INTERRUPT_TARGET_MS = 100.0


def instant_model(request: dict[str, Any]) -> dict[str, Any]:
    return {"content": "ok", "usage": USAGE}


def slow_model(request: dict[str, Any]) -> dict[str, Any]:
    time.sleep(MODEL_LATENCY_S)  # simulated provider latency, inside the model only
    return {"content": "ok", "usage": USAGE}


def verb_cycle(rt: Runtime) -> None:
    h = rt.spawn(rt.root, "a")
    rt.wake(h, "x")
    result = rt.wait(h)
    rt.close(h)
    if result.status != "done":
        raise RuntimeError(f"cycle ended {result.status}: {result.text}")


def run_agent_cycle(rt: Runtime) -> None:
    result = rt.run_agent("a", "x")
    if result.status != "done":
        raise RuntimeError(f"run_agent ended {result.status}: {result.text}")


def cycles_per_second(cycle: Callable[[Runtime], None], rounds: int, round_s: float, warmup: int) -> list[float]:
    """One fresh runtime per round; each round runs whole cycles for about ``round_s``."""
    rates = []
    for _ in range(rounds):
        rt = Runtime(REGISTRY, generate=instant_model)
        try:
            for _ in range(warmup):
                cycle(rt)
            done = 0
            started = time.perf_counter()
            deadline = started + round_s
            while True:
                for _ in range(50):
                    cycle(rt)
                done += 50
                now = time.perf_counter()
                if now >= deadline:
                    break
            rates.append(done / (now - started))
        finally:
            rt.close(rt.root)
    return rates


def fanout_wall_times(n: int, rounds: int) -> list[float]:
    """Spawn ``n`` handles, wake them all, wait for them all; time wake..last result."""
    times = []
    for _ in range(rounds):
        rt = Runtime(REGISTRY, generate=slow_model, max_workers=1024)
        try:
            handles = [rt.spawn(rt.root, "a") for _ in range(n)]
            started = time.perf_counter()
            for h in handles:
                rt.wake(h, "x")
            results = [rt.wait(h) for h in handles]
            times.append(time.perf_counter() - started)
            bad = [r.status for r in results if r.status != "done"]
            if bad:
                raise RuntimeError(f"{len(bad)} of {n} handles did not finish done: {sorted(set(bad))}")
        finally:
            rt.close(rt.root)
    return times


class _Arrived(threading.Event):
    """Given to the server as ``stall_until``: notes that a request arrived and stalls it."""

    def __init__(self) -> None:
        super().__init__()
        self.arrived = threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        self.arrived.set()
        return super().wait(timeout)


def interrupt_latencies(rounds: int) -> tuple[list[float], list[float]]:
    """Milliseconds from ``interrupt`` to ``idle`` and to the aborted model call."""
    to_idle, to_abort = [], []
    for _ in range(rounds):
        stall, aborted = _Arrived(), threading.Event()

        def on_metric(event: dict[str, Any]) -> None:
            if event["event"] == "llm" and event["status"] == "error":
                aborted.set()

        with ScriptedLLMServer(stall_until=stall) as server:
            rt = Runtime(REGISTRY, base_url=server.base_url, model="m", on_metric=on_metric, shutdown_timeout=2)
            try:
                h = rt.spawn(rt.root, "a")
                rt.wake(h, "x")
                if not stall.arrived.wait(10):
                    raise RuntimeError("the model request never reached the server")
                started = time.perf_counter()
                rt.interrupt(h)
                if rt.inspect(h).state != "idle":
                    raise RuntimeError("not idle after interrupt")
                to_idle.append((time.perf_counter() - started) * 1000)
                if not aborted.wait(10):
                    raise RuntimeError("the stalled model call was not aborted")
                to_abort.append((time.perf_counter() - started) * 1000)
            finally:
                rt.close(rt.root)
    return to_idle, to_abort


def benchmark(args: argparse.Namespace) -> dict[str, Any]:
    verbs = cycles_per_second(verb_cycle, args.rounds, args.round_s, warmup=200)
    one_shot = cycles_per_second(run_agent_cycle, args.rounds, args.round_s, warmup=200)
    fanout = fanout_wall_times(args.fanout, args.fanout_rounds)
    to_idle, to_abort = interrupt_latencies(20)
    rows = [
        _row("spawn/wake/wait/close", "cycles/s", verbs, CYCLES_TARGET, higher_is_better=True),
        _row("run_agent", "cycles/s", one_shot, CYCLES_TARGET, higher_is_better=True),
        _row(f"fan-out {args.fanout} x {int(MODEL_LATENCY_S * 1000)} ms", "s", fanout, FANOUT_TARGET_S, higher_is_better=False),
        _row("interrupt -> idle", "ms", to_idle, INTERRUPT_TARGET_MS, higher_is_better=False),
        _row("interrupt -> call aborted", "ms", to_abort, INTERRUPT_TARGET_MS, higher_is_better=False),
    ]
    return {
        "python": sys.version.split()[0],
        "rounds": args.rounds,
        "round_s": args.round_s,
        "fanout": args.fanout,
        "fanout_rounds": args.fanout_rounds,
        "results": rows,
        "pass": all(row["pass"] for row in rows),
    }


def _row(name: str, unit: str, samples: list[float], target: float, *, higher_is_better: bool) -> dict[str, Any]:
    median = statistics.median(samples)
    ok = median >= target if higher_is_better else median < target
    return {
        "name": name,
        "unit": unit,
        "median": median,
        "min": min(samples),
        "max": max(samples),
        "samples": samples,
        "target": (">= " if higher_is_better else "< ") + f"{target:g}",
        "pass": ok,
    }


def render(report: dict[str, Any]) -> str:
    header = f"{'scenario':<28} {'median':>12} {'min':>12} {'max':>12}  {'target':<18} result"
    lines = [f"toolnexus runtime overhead (Python {report['python']})", header, "-" * len(header)]
    for row in report["results"]:
        fmt = (lambda v: f"{v:,.0f}") if row["unit"] == "cycles/s" else (lambda v: f"{v:.3f}")
        lines.append(
            f"{row['name']:<28} {fmt(row['median']):>12} {fmt(row['min']):>12} {fmt(row['max']):>12}"
            f"  {row['target'] + ' ' + row['unit']:<18} {'PASS' if row['pass'] else 'FAIL'}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds for the cycle benchmarks")
    parser.add_argument("--round-s", type=float, default=1.0, help="seconds per cycle round")
    parser.add_argument("--fanout", type=int, default=1000, help="handles in the fan-out benchmark")
    parser.add_argument("--fanout-rounds", type=int, default=5, help="rounds of the fan-out benchmark")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    args = parser.parse_args(argv)
    report = benchmark(args)
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 1 if args.strict and not report["pass"] else 0


if __name__ == "__main__":
    sys.exit(main())
