"""Random SIGKILLs of a two-agent team, then recovery in another process.

Each trial starts a child process that runs a lead delegating ``charge`` to a worker (whose
tool appends one line per execution to an effects file), SIGKILLs it after a random delay,
then opens the tree in this process (which recovers the orphaned turns) and waits for the
lead. A trial passes when the lead finishes ``done`` with at most one child and the charge
ran at most once (its tool is ``retry="never"``: a charge in doubt is not run again).

Usage: ``python benchmarks/crash_loop.py [--trials 200] [--stores sqlite,postgresql]
[--pg URL] [--slow-s 0.05] [--json]``; exits 1 when any trial failed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent / "tests"
sys.path.insert(0, str(TESTS))
sys.path.insert(0, str(HERE.parent))

import _crash_team as team  # noqa: E402

SCRIPT = str(TESTS / "_crash_team.py")


def trial(state: str, folder: str, rng: random.Random, slow_s: float) -> dict[str, Any]:
    runtime_id, effects = f"loop-{uuid.uuid4().hex[:10]}", os.path.join(folder, f"{uuid.uuid4().hex[:8]}.txt")
    proc = subprocess.Popen([sys.executable, SCRIPT, "charge", state, runtime_id, effects, str(slow_s)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    proc.stdout.readline()  # the lead is woken: its run takes about 5 x slow_s from here
    delay = rng.uniform(0.0, 6 * slow_s)
    time.sleep(delay)  # the scenario: the kill lands anywhere in the run
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    rt = team.charging_runtime(state, runtime_id, effects)
    try:
        if not rt.inspect(rt.root).children:
            return {"delay": delay, "outcome": "killed before the lead existed", "ok": True}
        result = rt.wait("root/lead.1", timeout=30)
        children = len(rt.inspect("root/lead.1").children)
        charges = len(team.lines(effects))
        ok = result.status == "done" and children <= 1 and charges <= 1
        return {"delay": round(delay, 3), "outcome": result.status, "children": children, "charges": charges, "ok": ok}
    finally:
        rt.release()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--trials", type=int, default=200, help="trials per store")
    parser.add_argument("--stores", default="sqlite,postgresql")
    parser.add_argument("--pg", default=os.environ.get("TOOLNEXUS_TEST_PG_URL"))
    parser.add_argument("--slow-s", type=float, default=0.05, help="how long each model call and the charge take")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    folder = tempfile.mkdtemp(prefix="toolnexus-crash-")
    rng = random.Random(args.seed)
    report: dict[str, Any] = {}
    failed = 0
    for store in args.stores.split(","):
        if store == "postgresql" and not args.pg:
            report[store] = "skipped: no --pg URL"
            continue
        state = args.pg if store == "postgresql" else os.path.join(folder, "state.db")
        results = [trial(state, folder, rng, args.slow_s) for _ in range(args.trials)]
        bad = [r for r in results if not r["ok"]]
        failed += len(bad)
        report[store] = {
            "trials": len(results),
            "passed": len(results) - len(bad),
            "lead_done": sum(r["outcome"] == "done" for r in results),
            "killed_before_the_lead": sum(r["outcome"].startswith("killed") for r in results),
            "charged_once": sum(r.get("charges") == 1 for r in results),
            "charge_in_doubt_not_run_again": sum(r.get("charges") == 0 and r["outcome"] == "done" for r in results),
            "failures": bad[:5],
        }
    print(json.dumps(report, indent=None if args.json else 2))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
