"""Evaluation throughput: cases per second ``toolnexus.evals.evaluate`` gets through with
N worker threads, against a model server that takes 100 ms to answer each call.

Each case is one agent run (``Runtime.run_agent`` by name, one model call) against a local
OpenAI-compatible server (``toolnexus.testing.ScriptedLLMServer`` with ``delay_s``) in a
child process, so that the measured side does not share its interpreter lock with the
server's threads. For each worker count (1, 2, 4, 8 by default) the same dataset is
evaluated ``--rounds`` times on a fresh runtime; the median round's rate is reported with
its speed-up over one worker and the ideal (workers x 1 / delay).

Usage: ``python benchmarks/evals_throughput.py [--cases 40] [--workers 1,2,4,8]
[--delay-ms 100] [--rounds 3] [--json]`` (after ``pip install -e .``).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # also works as ``python -m benchmarks.evals_throughput``
    sys.path.insert(0, str(HERE))
if importlib.util.find_spec("toolnexus") is None:  # not installed: benchmark the checkout itself
    sys.path.insert(1, str(HERE.parent))

import _child  # noqa: E402

from toolnexus import AgentDef, Runtime  # noqa: E402
from toolnexus.evals import Case, evaluate, exact  # noqa: E402
from toolnexus.testing import ScriptedLLMServer, last_user_text, text_completion  # noqa: E402

REGISTRY = {"answerer": AgentDef("answerer", "Answers in capitals")}


def capitals(body: dict[str, Any]) -> dict[str, Any]:
    return text_completion(body, last_user_text(body).upper())


def serve(delay_s: float) -> int:
    """The child side: a scripted server that waits ``delay_s`` before each answer."""
    with ScriptedLLMServer(capitals, delay_s=delay_s) as server:
        print(server.base_url, flush=True)
        sys.stdin.read()  # until the parent closes the pipe
    return 0


def one_round(base_url: str, cases: list[Case], workers: int) -> float:
    """Cases per second of one evaluation on a fresh runtime (every case must score 1.0)."""
    rt = Runtime(REGISTRY, base_url=base_url, model="bench", api_key="sk-bench", max_workers=workers)
    try:
        report = evaluate("answerer", cases, [exact()], runtime=rt, max_workers=workers, progress=False)
    finally:
        rt.close(rt.root)
    wrong = [case.name for case in report.cases if case.scores["exact"] != 1.0]
    if wrong:
        raise RuntimeError(f"cases did not score 1.0: {wrong[:5]} ({report.cases[0].error})")
    return len(cases) / report.duration_s


def benchmark(count: int, worker_counts: list[int], delay_s: float, rounds: int) -> dict[str, Any]:
    cases = [Case(f"case-{i}", f"answer {i}", expected=f"ANSWER {i}") for i in range(count)]
    rows = []
    with _child.ChildServer(__file__, str(delay_s)) as server:
        one_round(server.base_url, cases[: max(worker_counts)], max(worker_counts))  # warm up connections
        for workers in worker_counts:
            rates = [one_round(server.base_url, cases, workers) for _ in range(rounds)]
            rows.append({"workers": workers, "cases_per_s": statistics.median(rates), "rounds": rates})
    base = rows[0]["cases_per_s"] if rows and rows[0]["workers"] == 1 else None
    for row in rows:
        row["speedup"] = None if base is None else row["cases_per_s"] / base
        row["ideal_cases_per_s"] = row["workers"] / delay_s
    python = sys.version.split()[0]
    return {"cases": count, "delay_ms": delay_s * 1000, "rounds": rounds, "python": python, "rows": rows}


def render(report: dict[str, Any]) -> str:
    lines = [
        f"evaluate() throughput: {report['cases']} cases, one model call each, server delay "
        f"{report['delay_ms']:.0f} ms, median of {report['rounds']} rounds, Python {report['python']}",
        f"{'workers':>8}{'cases/s':>10}{'speed-up':>10}{'ideal':>10}",
    ]
    for row in report["rows"]:
        speedup = "n/a" if row["speedup"] is None else f"{row['speedup']:.2f}x"
        lines.append(f"{row['workers']:>8}{row['cases_per_s']:>10.2f}{speedup:>10}{row['ideal_cases_per_s']:>10.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=40, help="cases per evaluation (default 40)")
    parser.add_argument("--workers", default="1,2,4,8", help="worker counts, comma-separated (default 1,2,4,8)")
    parser.add_argument("--delay-ms", type=float, default=100.0, help="the server's wait per answer (default 100)")
    parser.add_argument("--rounds", type=int, default=3, help="evaluations per worker count; the median is reported")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        return serve(float(args.serve))
    workers = sorted({max(1, int(each)) for each in args.workers.split(",") if each.strip()})
    report = benchmark(max(1, args.cases), workers, args.delay_ms / 1000, max(1, args.rounds))
    print(json.dumps(report) if args.json else render(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
