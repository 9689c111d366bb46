"""Replay speed: a recorded 100-step team replayed offline, in milliseconds.

A lead makes 10 model steps (9 ``task`` calls to a worker, then its answer); each of the
9 workers makes 10 (9 tool calls, then its answer): 100 model steps at three handles'
depth of one. The run is recorded once against an in-process model into a state (memory,
a SQLite file, and PostgreSQL when ``TOOLNEXUS_TEST_PG_URL`` or ``--pg URL`` is given);
then ``Runtime.replay`` re-runs it from another runtime opened on that state with no
model options, ``--rounds`` times with recorded tool results and with live tools, and
the median replay is reported. Every replayed step compares the request it makes with
the recorded one, so the figure includes reading the journal and those comparisons.

Usage: ``python benchmarks/replay.py [--json] [--rounds 20] [--pg URL]``
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from typing import Any

from toolnexus import AgentDef, Budget, Runtime, Tool
from toolnexus.testing import ScriptedModel, tool_messages

WORKERS, WORKER_CALLS = 9, 9
ROOMY = Budget(max_turns=20)
SCHEMA = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


def count(args: dict[str, Any], ctx: Any) -> str:
    return f"counted {args['n']}"


def registry() -> dict[str, AgentDef]:
    return {
        "lead": AgentDef("lead", "leads", soul="You split the work.", model="m-lead", team=["worker"], budget=ROOMY),
        "worker": AgentDef("worker", "works", soul="You count.", model="m-worker", budget=ROOMY,
                           tools=[Tool("count", "Counts.", SCHEMA, count)]),
    }


def _lead(request: dict[str, Any]) -> dict[str, Any]:
    done = len(tool_messages(request))
    if done >= WORKERS:
        return {"content": f"all {done} parts done"}
    return {"tool_calls": [{"id": f"t{done}", "name": "task", "arguments": {"agent": "worker", "prompt": f"part {done}"}}]}


def _worker(request: dict[str, Any]) -> dict[str, Any]:
    done = len(tool_messages(request))
    if done >= WORKER_CALLS:
        return {"content": f"counted to {done}"}
    return {"tool_calls": [{"id": f"c{done}", "name": "count", "arguments": {"n": done}}]}


def recorded(state: Any, runtime_id: str) -> str:
    """Run the team once into ``state``; the run's id."""
    usage = {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25}
    generate = ScriptedModel({"m-lead": _lead, "m-worker": _worker}, usage=usage)
    rt = Runtime(registry(), generate=generate, state=state, runtime_id=runtime_id, inline=True)
    result = rt.run_agent("lead", "go")
    assert result.status == "done", result
    assert sum(generate.calls.values()) == 100, generate.calls
    if state is None:
        return rt  # type: ignore[return-value]  # memory: the same runtime replays
    rt.release()
    return result.handle_id


def timed(rt: Runtime, run: str, tools: str, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        report = rt.replay(run, tools=tools)
        times.append((time.perf_counter() - started) * 1000)
        assert report.same and report.steps == 100, report
    return statistics.median(times)


def measure(where: str, state: Any, rounds: int) -> dict[str, Any]:
    runtime_id = f"bench-{uuid.uuid4().hex[:8]}"
    if state is None:
        rt = recorded(None, runtime_id)
        run = "root/lead.1"
    else:
        run = recorded(state, runtime_id)
        rt = Runtime(registry(), state=state, runtime_id=runtime_id)
    try:
        return {"state": where, "steps": 100, "recorded_ms": round(timed(rt, run, "recorded", rounds), 1),
                "live_ms": round(timed(rt, run, "live", rounds), 1)}
    finally:
        rt.close(rt.root) if state is None else rt.release()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--pg", default=os.environ.get("TOOLNEXUS_TEST_PG_URL"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        rows = [measure("memory", None, args.rounds), measure("sqlite", os.path.join(folder, "runs.db"), args.rounds)]
        if args.pg:
            rows.append(measure("postgresql", args.pg, args.rounds))
    if args.json:
        print(json.dumps(rows))
    else:
        for row in rows:
            print(f"{row['state']:>10}: replay of a {row['steps']}-step team: {row['recorded_ms']} ms "
                  f"(recorded tools), {row['live_ms']} ms (live tools), median of {args.rounds}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
