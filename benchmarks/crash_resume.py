"""Crash and resume: SIGKILL a team run at a random moment, finish it in a new process.

Each trial starts a child process that runs a two-level team (lead delegates three orders
to a worker whose ``charge`` tool appends ``<idempotency key> <order>`` to an effects
file) on a SQLite state, kills it with SIGKILL after a random delay, then opens the state
in a fresh process with ``recover="resume"`` and waits for the run. Reported: trials,
runs recovered to the expected answer, duplicate side effects (an order charged under two
different idempotency keys: what an idempotent payment system could not absorb; target
0), re-executions under the same key (absorbed), and the time from opening the state to
the finished run (median, p95).

Usage: ``python benchmarks/crash_resume.py [--json] [--trials 20] [--seed 1]``
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
if importlib.util.find_spec("toolnexus") is None:  # not installed: benchmark the checkout itself
    sys.path.insert(0, str(HERE.parent))

from toolnexus import AgentDef, Runtime, tool  # noqa: E402
from toolnexus.testing import ScriptedModel, tool_messages  # noqa: E402

ORDERS = ("A-1", "A-2", "A-3")
STEP_S = 0.08  # each model reply and each tool call takes this long
EXPECTED = "lead: " + " | ".join(f"worker: charged {order}" for order in ORDERS)


def team(effects: str) -> dict[str, AgentDef]:
    @tool(retry="safe")
    def charge(order: str, ctx: Any) -> str:
        """Charge an order once (pass the idempotency key to the payment system)."""
        time.sleep(STEP_S)
        with open(effects, "a") as out:
            out.write(f"{ctx.idempotency_key} {order}\n")
            out.flush()
            os.fsync(out.fileno())
        time.sleep(STEP_S)
        return f"charged {order}"

    return {
        "lead": AgentDef("lead", "delegates orders", model="m-lead", team=("worker",)),
        "worker": AgentDef("worker", "charges one order", model="m-worker", tools=[charge]),
    }


def model() -> ScriptedModel:
    def lead(request: dict[str, Any]) -> dict[str, Any]:
        time.sleep(STEP_S)
        done = tool_messages(request)
        if done:
            return {"content": "lead: " + " | ".join(done)}
        calls = [{"id": f"t{n}", "name": "task", "arguments": {"agent": "worker", "prompt": f"charge {order}"}} for n, order in enumerate(ORDERS)]
        return {"tool_calls": calls}

    def worker(request: dict[str, Any]) -> dict[str, Any]:
        time.sleep(STEP_S)
        done = tool_messages(request)
        if done:
            return {"content": f"worker: {done[-1]}"}
        order = request["messages"][-1]["content"].split()[-1]
        return {"tool_calls": [{"id": "c1", "name": "charge", "arguments": {"order": order}}]}

    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    return ScriptedModel({"m-lead": lead, "m-worker": worker}, usage=usage)


def child(state: str, effects: str) -> None:
    rt = Runtime(team(effects), generate=model(), state=state)
    lead = rt.spawn(rt.root, "lead")
    rt.wake(lead, "charge the orders")
    rt.wait(lead, timeout=60)
    os._exit(0)  # finished before the kill: leave without letting go, like a crash


def recover(state: str, effects: str) -> tuple[str, float]:
    """Open the state in this (fresh) process and wait for the run: its text and the time."""
    started = time.perf_counter()
    rt = Runtime(team(effects), generate=model(), state=state, recover="resume")
    try:
        try:
            result = rt.wait("root/lead.1", timeout=60)
        except Exception:  # noqa: BLE001 - the kill came before the lead existed
            lead = rt.spawn(rt.root, "lead")
            rt.wake(lead, "charge the orders")
            result = rt.wait(lead, timeout=60)
        return result.text, time.perf_counter() - started
    finally:
        rt.release()


def trial(folder: str, n: int, delay: float) -> dict[str, Any]:
    state, effects = os.path.join(folder, f"t{n}.db"), os.path.join(folder, f"t{n}.effects")
    proc = subprocess.Popen([sys.executable, __file__, "--child", state, effects])
    time.sleep(delay)  # the random moment of the crash
    killed = proc.poll() is None
    if killed:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    out = subprocess.run([sys.executable, __file__, "--recover", state, effects], capture_output=True, text=True, timeout=120)
    found = json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else {"text": out.stderr[-300:], "seconds": None}
    keys: dict[str, set[str]] = defaultdict(set)
    lines = 0
    if os.path.exists(effects):
        for line in open(effects):
            key, order = line.split()
            keys[order].add(key)
            lines += 1
    return {
        "killed": killed,
        "delay_s": round(delay, 3),
        "recovered": found["text"] == EXPECTED,
        "duplicates": sum(len(k) - 1 for k in keys.values()),
        "same_key_reruns": lines - sum(len(k) for k in keys.values()),
        "missing": sum(1 for order in ORDERS if order not in keys),
        "recover_s": found["seconds"],
    }


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
        return 0
    if len(sys.argv) == 4 and sys.argv[1] == "--recover":
        text, seconds = recover(sys.argv[2], sys.argv[3])
        print(json.dumps({"text": text, "seconds": seconds}))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--max-delay", type=float, default=1.0, help="latest kill, seconds after the start (default 1.0)")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    folder = tempfile.mkdtemp(prefix="toolnexus-crash-")
    trials = [trial(folder, n, rng.uniform(0.3, args.max_delay)) for n in range(args.trials)]
    times = sorted(t["recover_s"] for t in trials if t["recover_s"] is not None)
    report = {
        "trials": len(trials),
        "killed_mid_run": sum(t["killed"] for t in trials),
        "recovered": sum(t["recovered"] for t in trials),
        "duplicate_side_effects": sum(t["duplicates"] for t in trials),
        "same_key_reruns": sum(t["same_key_reruns"] for t in trials),
        "missing_effects": sum(t["missing"] for t in trials),
        "recover_s_median": round(statistics.median(times), 3) if times else None,
        "recover_s_p95": round(times[min(len(times) - 1, int(0.95 * len(times)))], 3) if times else None,
    }
    if args.json:
        print(json.dumps({**report, "runs": trials}, indent=2))
    else:
        for key, value in report.items():
            print(f"{key:>24}: {value}")
    return 0 if report["duplicate_side_effects"] == 0 and report["recovered"] == report["trials"] else 1


if __name__ == "__main__":
    sys.exit(main())
