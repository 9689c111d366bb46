"""Durable state overhead: what keeping the tree in a state costs, and whether memory stays flat.

Against an in-process model (``generate=``), so only the runtime and its state are measured:

(a) cycles/s -- ``spawn(root, "a")``, ``wake``, ``wait``, ``close`` in a loop, side by side on
    memory (``state=None``), a SQLite file (WAL, on local disk) and PostgreSQL (when
    ``TOOLNEXUS_TEST_PG_URL`` or ``--pg URL`` is given). Several timed rounds, each on a
    fresh runtime; the median round's rate is reported (target: SQLite >= 500 cycles/s).
    Every cycle commits spawn, admission, the model reply with its ledger, the settle and
    the close, so nothing a waiter sees is only in memory.
(b) flat memory -- 100,000 one-shot ``run_agent`` calls on one memory runtime (default
    ``keep_closed=1000``): the resident set size after 10,000 and after 100,000 calls; and
    20,000 on a SQLite state (the closed handles leave memory, the state keeps them).

Compare the memory path with ``benchmarks/runtime_overhead.py`` (the same cycle).

Usage: ``python benchmarks/durable_overhead.py [--json] [--rounds 5] [--round-s 1.0]
[--pg URL] [--one-shots 100000] [--strict]`` (``--strict`` exits 1 on a missed target).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
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

SQLITE_TARGET = 500.0  # cycles per second, at least


def rates(state: Any, rounds: int, round_s: float) -> list[float]:
    """One fresh runtime (and tree) per round; whole cycles for about ``round_s`` each."""
    found = []
    for _ in range(rounds):
        options: dict[str, Any] = {} if state is None else {"state": state(), "runtime_id": f"bench-{uuid.uuid4().hex[:8]}"}
        rt = Runtime(REGISTRY, generate=instant_model, **options)
        try:
            for _ in range(20):
                cycle(rt)
            done = 0
            started = time.perf_counter()
            while time.perf_counter() - started < round_s:
                cycle(rt)
                done += 1
            found.append(done / (time.perf_counter() - started))
        finally:
            rt.release()  # without a state: closes
    return found


def rss_mb() -> float:
    """Resident set size of this process (Linux ``/proc``; ``ru_maxrss`` elsewhere)."""
    try:
        with open("/proc/self/statm") as statm:
            pages = int(statm.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def one_shots(total: int, state: str | None = None) -> dict[str, float]:
    rt = Runtime(REGISTRY, generate=instant_model, **({"state": state} if state else {}))
    marks: dict[str, float] = {}
    try:
        started = time.perf_counter()
        for n in range(1, total + 1):
            if rt.run_agent("a", "x").status != "done":
                raise RuntimeError("a one-shot run did not finish")
            if n in (1_000, 10_000, 20_000, total):
                marks[f"rss_mb_at_{n}"] = round(rss_mb(), 1)
        marks["seconds"] = round(time.perf_counter() - started, 1)
        listed = time.perf_counter()
        marks["handles_listed"] = len(rt.handles())  # with a state, read from it
        marks["handles_ms"] = round((time.perf_counter() - listed) * 1000, 1)
        asked = time.perf_counter()
        rt.open_requests()
        marks["open_requests_ms"] = round((time.perf_counter() - asked) * 1000, 1)
    finally:
        rt.release()  # without a state: closes
    return marks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--round-s", type=float, default=1.0)
    parser.add_argument("--pg", default=os.environ.get("TOOLNEXUS_TEST_PG_URL"), help="PostgreSQL URL (default: $TOOLNEXUS_TEST_PG_URL)")
    parser.add_argument("--one-shots", type=int, default=100_000)
    parser.add_argument("--sqlite-one-shots", type=int, default=20_000, help="the same on a SQLite state (0: skip)")
    parser.add_argument("--strict", action="store_true")
    args = parser.parse_args()

    folder = tempfile.mkdtemp(prefix="toolnexus-bench-")
    stores: dict[str, Any] = {"memory": None, "sqlite": lambda: os.path.join(folder, f"{uuid.uuid4().hex[:8]}.db")}
    if args.pg:
        stores["postgresql"] = lambda: args.pg
    report: dict[str, Any] = {"cycles_per_s": {}}
    for name, state in stores.items():
        found = rates(state, args.rounds, args.round_s)
        report["cycles_per_s"][name] = {"median": round(statistics.median(found), 1), "rounds": [round(r, 1) for r in found]}
    if args.one_shots:
        report["one_shot_run_agent"] = one_shots(args.one_shots)
    if args.sqlite_one_shots:
        report["one_shot_run_agent_sqlite"] = one_shots(args.sqlite_one_shots, os.path.join(folder, "one-shots.db"))
    sqlite_ok = report["cycles_per_s"]["sqlite"]["median"] >= SQLITE_TARGET
    report["sqlite_target_met"] = sqlite_ok

    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for name, figures in report["cycles_per_s"].items():
            print(f"{name:>10}: {figures['median']:>8.1f} cycles/s (median of {len(figures['rounds'])})")
        for key in ("one_shot_run_agent", "one_shot_run_agent_sqlite"):
            if key in report:
                print(f"{key}: {report[key]}")
        print(f"SQLite target >= {SQLITE_TARGET:.0f}/s: {'met' if sqlite_ok else 'MISSED'}")
    return 1 if args.strict and not sqlite_ok else 0


if __name__ == "__main__":
    sys.exit(main())
