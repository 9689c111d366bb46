"""A2A tasks per second, served and called, beside a2a-sdk 1.3.0's own server.

Served: ``SendMessage`` calls (a new task each, completed by an agent that answers at once
from a scripted model) from 1 and 8 threads of plain ``requests`` sessions, to
``toolnexus.a2a.wsgi_app`` under gunicorn (one process, ``gthread`` with 8 threads, tasks
in memory, then in a SQLite state) and to the SDK's own server (``tests/_a2a_sdk_peer.py``
under uvicorn, one process, an executor that completes at once). Called: ``run_agent`` of
a lead whose one ``task`` call goes to a remote teammate (the SDK's server), from 1 and 8
threads; each is two model steps of a scripted model plus one streamed A2A task. Rounds
alternate the measurements so that they share the machine's noise; the report gives the
median of each.

Usage: ``python benchmarks/a2a_calls.py [--rounds R] [--calls N] [--json]``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import requests  # noqa: E402

from _a2a_caller import model, registry  # noqa: E402
from _a2a_peer import started_peer  # noqa: E402
from _gunicorn import free_port, serving  # noqa: E402
from _rates import THREAD_OFFSET, medians_of, per_second  # noqa: E402
from toolnexus import Runtime  # noqa: E402

HEADERS = {"Content-Type": "application/json", "A2A-Version": "1.0", "Authorization": "Bearer alice"}


@contextlib.contextmanager
def gunicorn(app: str) -> Iterator[str]:
    """``app`` under gunicorn: one process, ``gthread`` with 8 threads."""
    port = free_port()
    with serving(port, str(ROOT / "tests"), app, "-w", "1", "-k", "gthread", "--threads", "8"):
        yield f"http://127.0.0.1:{port}"


def rate(calls: int, threads: int, one: Callable[[Any], None], make: Callable[[], Any]) -> float:
    """Calls per second of ``one(state)`` from ``threads`` threads, each with its own ``make()``."""
    states = [make() for _ in range(threads)]
    return per_second(threads, calls // threads, lambda offset: one(states[offset // THREAD_OFFSET]))


def send(url: str) -> Callable[[requests.Session], None]:
    def one(session: requests.Session) -> None:
        message = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": "hello"}]}
        body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
        reply = session.post(url + "/", json=body, headers=HEADERS, timeout=30).json()
        assert reply["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", reply

    return one


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--calls", type=int, default=80)
    parser.add_argument("--json", action="store_true")
    options = parser.parse_args()
    state = str(Path(tempfile.mkdtemp()) / "tasks.db")
    with gunicorn("_a2a_team:app(None)") as memory, gunicorn(f"_a2a_team:app({state!r})") as stored:
        with started_peer() as peer, Runtime(registry(peer.url), generate=model()) as rt:
            measured: dict[str, Callable[[int], float]] = {
                "served: toolnexus, memory": lambda t: rate(options.calls, t, send(memory), requests.Session),
                "served: toolnexus, SQLite": lambda t: rate(options.calls, t, send(stored), requests.Session),
                "served: a2a-sdk server": lambda t: rate(options.calls, t, send(peer.url), requests.Session),
                "called: remote teammate": lambda t: rate(
                    options.calls, t, lambda _: rt.run_agent("boss", "echo"), lambda: None
                ),
            }
            plans = {
                f"{name}, {threads} thread(s)": functools.partial(measure, threads)
                for name, measure in measured.items()
                for threads in (1, 8)
            }
            report = {name: round(value, 1) for name, value in medians_of(plans, options.rounds).items()}
    if options.json:
        print(json.dumps(report, indent=2))
        return
    for name, value in report.items():
        print(f"{name:48} {value:8.1f} tasks/s")


if __name__ == "__main__":
    main()
