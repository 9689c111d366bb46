"""Fan-out on Celery workers: a boss delegates 32 children, each child's model call sleeps 200 ms.

Runs the same team on 1, 2 and 4 worker processes (``celery worker -P threads -c 2``) on
a Redis broker and a PostgreSQL state, all started (and stopped) by this script, and
prints each setting's median wall time and turns per second (33 turns: the boss and its
32 children), then ``speedup 4 vs 1 workers: <ratio>x``.

    python benchmarks/celery_fanout.py [--rounds 3] [--children 32]

Needs ``redis-server`` and PostgreSQL's ``initdb``/``pg_ctl`` (``pg_config --bindir``);
as root, PostgreSQL runs as the ``postgres`` user. The boss's thread runs queued children
while it waits (so one worker already has two threads on children): with no overhead the
ratio is (32 x 0.2 / 2) / (32 x 0.2 / 8) = 4.0. ``--boss-ms 200`` makes the boss's own two
model calls slow too; they cannot overlap anything, which caps that ideal at 3.0.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Iterator, Mapping

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from celery import Celery  # noqa: E402

from toolnexus import AgentDef, Budget, Runtime  # noqa: E402
from toolnexus.celery import RECOMMENDED_SETTINGS, install  # noqa: E402
from toolnexus.testing import tool_messages  # noqa: E402

MODEL_S = 0.2
THREADS = 2


def registry(children: int) -> dict[str, AgentDef]:
    return {
        "boss": AgentDef("boss", "splits the work", model="m-boss", team=("part",), budget=Budget(max_children=children, max_concurrent=children)),
        "part": AgentDef("part", "does one part", model="m-part"),
    }


def model(children: int, boss_s: float) -> Any:
    def generate(request: dict[str, Any]) -> dict[str, Any]:
        if request["model"] == "m-part":
            time.sleep(MODEL_S)  # the model's latency
            return {"content": "part done"}
        time.sleep(boss_s)
        done = tool_messages(request)
        if done:
            return {"content": f"{len(done)} parts done"}
        calls = [{"id": f"call_{n}", "name": "task", "arguments": {"agent": "part", "prompt": f"part {n}"}} for n in range(children)]
        return {"tool_calls": calls}

    return generate


def build(settings: Mapping[str, str]) -> tuple[Celery, Any]:
    """The Celery app and the runtime factory (web side and workers alike)."""
    children = int(settings["FANOUT_CHILDREN"])
    app = Celery("celery_fanout", broker=settings["FANOUT_BROKER"])
    app.conf.update(RECOMMENDED_SETTINGS, broker_connection_retry_on_startup=True)

    def runtime() -> Runtime:
        return Runtime(registry(children), generate=model(children, float(settings["FANOUT_BOSS_S"])), state=settings["FANOUT_STATE"], runtime_id=settings["FANOUT_TREE"], dispatcher=dispatcher)

    dispatcher = install(app, runtime, queue=settings["FANOUT_QUEUE"])
    return app, runtime


if "FANOUT_BROKER" in os.environ:  # a worker: ``celery -A celery_fanout worker``
    app, _runtime = build(os.environ)


# --- services this script starts and stops ------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextlib.contextmanager
def redis_server(folder: Path) -> Iterator[str]:
    port = free_port()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(folder)],
        stdout=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        server.terminate()
        server.wait(timeout=10)


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    folder = Path(tempfile.mkdtemp(prefix="fanout-pg-"))  # its own folder: PostgreSQL may run as another user
    bindir = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=True).stdout.strip()
    data, port = folder / "pg", free_port()
    as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    if as_postgres:
        shutil.chown(folder, "postgres")
    subprocess.run([*as_postgres, f"{bindir}/initdb", "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync"], check=True, stdout=subprocess.DEVNULL)
    options = f"-c listen_addresses=127.0.0.1 -p {port} -k {folder} -c fsync=off -c max_connections=200"
    subprocess.run([*as_postgres, f"{bindir}/pg_ctl", "-D", str(data), "-w", "-l", str(folder / "pg.log"), "-o", options, "start"], check=True, stdout=subprocess.DEVNULL)
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*as_postgres, f"{bindir}/pg_ctl", "-D", str(data), "-m", "fast", "stop"], check=True, stdout=subprocess.DEVNULL)
        shutil.rmtree(folder, ignore_errors=True)


def wait_for_port(port: int, limit_s: float = 10.0) -> None:
    deadline = time.monotonic() + limit_s
    while True:
        with socket.socket() as conn:
            if conn.connect_ex(("127.0.0.1", port)) == 0:
                return
        if time.monotonic() > deadline:
            raise SystemExit(f"nothing listens on port {port}")
        time.sleep(0.05)


@contextlib.contextmanager
def workers(count: int, settings: Mapping[str, str], folder: Path) -> Iterator[None]:
    env = {**os.environ, **settings, "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parent)])}
    started = []
    for n in range(count):
        log = folder / f"worker-{count}-{n}.log"
        command = [sys.executable, "-m", "celery", "-A", "celery_fanout", "worker", "-P", "threads", "-c", str(THREADS), "-Q", settings["FANOUT_QUEUE"]]
        command += ["-n", f"fanout{n}-{uuid.uuid4().hex[:6]}@%h", "-l", "info", "--without-heartbeat", "--without-mingle", "--without-gossip"]
        with open(log, "wb") as out:
            started.append((subprocess.Popen(command, cwd=HERE, env=env, stdout=out, stderr=subprocess.STDOUT), log))
    try:
        deadline = time.monotonic() + 60
        for worker, log in started:
            while b" ready." not in log.read_bytes():
                if worker.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"a worker did not start:\n{log.read_text(errors='replace')[-2000:]}")
                time.sleep(0.05)
        yield
    finally:
        for worker, _ in started:
            worker.terminate()
        for worker, _ in started:
            worker.wait(timeout=30)


# --- the measurement ----------------------------------------------------------------------


def one_run(settings: dict[str, str]) -> float:
    """Seconds from ``wake`` to the result of a new boss."""
    _, factory = build(settings)
    rt = factory()
    try:
        boss = rt.spawn(rt.root, "boss")
        began = time.perf_counter()
        rt.wake(boss, "split it")
        result = rt.wait(boss, timeout=300)
        wall = time.perf_counter() - began
        expected = f"{settings['FANOUT_CHILDREN']} parts done"
        if result.text != expected:
            raise SystemExit(f"unexpected result: {result}")
        return wall
    finally:
        rt.release()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--children", type=int, default=32)
    parser.add_argument("--boss-ms", type=float, default=0.0, help="latency of the boss's own model calls")
    options = parser.parse_args()
    turns = options.children + 1
    medians: dict[int, float] = {}
    with tempfile.TemporaryDirectory(prefix="fanout-") as tmp:
        folder = Path(tmp)
        with redis_server(folder) as broker, postgres_server() as state:
            print(f"boss + {options.children} children, child model call {MODEL_S * 1000:.0f} ms, boss {options.boss_ms:.0f} ms, workers of {THREADS} threads, median of {options.rounds}")
            print(f"{'workers':>8} {'wall s':>8} {'turns/s':>8}")
            for count in (1, 2, 4):
                queue = f"fanout-{uuid.uuid4().hex[:8]}"
                base = {"FANOUT_BROKER": broker, "FANOUT_STATE": state, "FANOUT_QUEUE": queue, "FANOUT_CHILDREN": str(options.children), "FANOUT_BOSS_S": str(options.boss_ms / 1000)}
                base["FANOUT_TREE"] = f"fanout-{count}"  # one tree per setting; each round a new boss in it
                with workers(count, base, folder):
                    walls = [one_run(base) for _ in range(options.rounds)]
                medians[count] = statistics.median(walls)
                print(f"{count:>8} {medians[count]:>8.2f} {turns / medians[count]:>8.1f}", flush=True)
    serial = 2 * options.boss_ms / 1000  # the boss's own two model calls
    ideal = (serial + options.children * MODEL_S / THREADS) / (serial + options.children * MODEL_S / (4 * THREADS))
    print(f"ideal with no overhead: {ideal:.2f}x (the boss's own {serial:.1f} s of model calls overlap nothing)")
    print(f"speedup 4 vs 1 workers: {medians[1] / medians[4]:.2f}x")


if __name__ == "__main__":
    main()
