"""Durable cycles from several processes at once: how one SQLite file and one PostgreSQL
database serve many trees.

Each process opens its own tree (its own ``runtime_id``) in the same state and runs the
cycle of ``durable_overhead.py`` (``spawn``, ``wake``, ``wait``, ``close`` against an
in-process model) for ``--round-s`` seconds; all start together (each warms up, says it
is ready, and waits for the word). The figure is the aggregate: the sum of every
process's cycles per second, for 1, 2 and 4 processes, median of ``--rounds`` rounds.
Every cycle commits spawn, admission, the model reply with its ledger, the settle and the
close, as in one process.

Usage: ``python benchmarks/durable_scaling.py [--json] [--processes 1,2,4] [--rounds 3]
[--round-s 2.0] [--stores sqlite,postgresql] [--pg URL]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if importlib.util.find_spec("toolnexus") is None:  # not installed: benchmark the checkout itself
    sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from runtime_overhead import REGISTRY, instant_model, verb_cycle as cycle  # noqa: E402 - the same cycle and model

from toolnexus import Runtime  # noqa: E402


def worker(state: str, round_s: float) -> None:
    """One process's share: warm up, say ready, wait for the word, run, report."""
    rt = Runtime(REGISTRY, generate=instant_model, state=state, runtime_id=f"scale-{uuid.uuid4().hex[:10]}")
    try:
        for _ in range(20):
            cycle(rt)
        print("ready", flush=True)
        sys.stdin.readline()
        done, started = 0, time.perf_counter()
        while time.perf_counter() - started < round_s:
            cycle(rt)
            done += 1
        print(json.dumps({"cycles": done, "seconds": time.perf_counter() - started}), flush=True)
    finally:
        rt.release()


def aggregate(state: str, processes: int, round_s: float) -> float:
    """Cycles per second of ``processes`` processes on ``state`` at once, summed."""
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", state, "--round-s", str(round_s)]
    procs = [
        subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for _ in range(processes)
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None
            if proc.stdout.readline().strip() != "ready":
                raise RuntimeError("a worker did not start")
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        total = 0.0
        for proc in procs:
            assert proc.stdout is not None
            found = json.loads(proc.stdout.readline())
            total += found["cycles"] / found["seconds"]
        return total
    finally:
        for proc in procs:
            proc.wait(60)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--processes", default="1,2,4")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--round-s", type=float, default=2.0)
    parser.add_argument("--stores", default="sqlite,postgresql")
    parser.add_argument("--pg", default=os.environ.get("TOOLNEXUS_TEST_PG_URL"), help="default: $TOOLNEXUS_TEST_PG_URL")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.round_s)
        return 0
    folder = tempfile.mkdtemp(prefix="toolnexus-scale-")
    states = {"sqlite": os.path.join(folder, "shared.db")}
    if args.pg:
        states["postgresql"] = args.pg
    counts = [int(n) for n in args.processes.split(",")]
    report: dict[str, Any] = {"cpus": os.cpu_count(), "round_s": args.round_s, "stores": {}}
    for name in args.stores.split(","):
        if name not in states:
            continue
        rows = report["stores"][name] = {}
        for n in counts:
            found = [aggregate(states[name], n, args.round_s) for _ in range(args.rounds)]
            rows[str(n)] = {"cycles_per_s": round(statistics.median(found), 1), "rounds": [round(r, 1) for r in found]}
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"aggregate durable cycles/s (median of {args.rounds} rounds of {args.round_s:g} s, {report['cpus']} CPUs)")
    print(f"{'processes':>10}" + "".join(f"{name:>12}" for name in report["stores"]))
    for n in counts:
        print(f"{n:>10}" + "".join(f"{rows[str(n)]['cycles_per_s']:>12.1f}" for rows in report["stores"].values()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
