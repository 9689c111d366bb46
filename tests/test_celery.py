"""Agent turns on Celery workers (toolnexus.celery): real ``celery worker -P threads``
subprocesses on a real Redis broker, the tree in a real PostgreSQL state.

The test process plays the web app: it spawns and wakes handles, and waits on them through
the state, while the worker subprocesses (started and killed here) run the turns.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest

import _celery_team
from celery import Celery

from toolnexus import ConfigError, DispatchError, Runtime
from toolnexus.celery import TASK_NAME, install

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
WORKER_START_S = 30.0


class Workers:
    """Worker subprocesses of one test, all on its queue; every one is stopped at the end."""

    def __init__(self, settings: dict[str, str], logs: Path, *, app: str = "_celery_team", cwd: Path = TESTS) -> None:
        self.settings = settings
        self._logs = logs
        self._app = app
        self._cwd = cwd
        self._started: list[subprocess.Popen[bytes]] = []

    def start(self, concurrency: int = 1) -> subprocess.Popen[bytes]:
        """A worker that has connected and is consuming the queue."""
        name = f"w{len(self._started)}-{uuid.uuid4().hex[:6]}"
        log = self._logs / f"{name}.log"
        env = {**os.environ, **self.settings, "PYTHONPATH": os.pathsep.join([str(self._cwd), str(ROOT)])}
        command = [sys.executable, "-m", "celery", "-A", self._app, "worker", "-P", "threads", "-c", str(concurrency)]
        command += ["-Q", self.settings["TN_CELERY_QUEUE"], "-n", f"{name}@%h", "-l", "info", "--without-heartbeat", "--without-mingle", "--without-gossip"]
        with open(log, "wb") as out:
            worker = subprocess.Popen(command, cwd=self._cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
        self._started.append(worker)
        deadline = time.monotonic() + WORKER_START_S
        while b" ready." not in log.read_bytes():  # the worker's own readiness line
            if worker.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"celery worker did not start:\n{log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.05)
        return worker

    def kill(self, worker: subprocess.Popen[bytes]) -> None:
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=10)

    def stop_all(self) -> None:
        for worker in self._started:
            if worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
        for worker in self._started:
            try:
                worker.wait(timeout=10)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait(timeout=10)


@pytest.fixture
def settings(pg_url: str, redis_url: str, tmp_path: Path) -> dict[str, str]:
    """A tree and a queue of this test's own, on the shared services."""
    tag = uuid.uuid4().hex[:10]
    return {
        "TN_CELERY_BROKER": redis_url,
        "TN_CELERY_STATE": pg_url,
        "TN_CELERY_RUNTIME_ID": f"celery-{tag}",
        "TN_CELERY_QUEUE": f"toolnexus-{tag}",
        "TN_CELERY_CALLS": str(tmp_path / "calls"),
        "TN_CELERY_ARM": str(tmp_path / "arm"),
        "TN_CELERY_HANG": str(tmp_path / "hang"),
    }


@pytest.fixture
def workers(settings: dict[str, str], tmp_path: Path) -> Iterator[Workers]:
    found = Workers(settings, tmp_path)
    yield found
    found.stop_all()


@pytest.fixture
def web(settings: dict[str, str]) -> Iterator[tuple[Runtime, Any]]:
    """The web side: a runtime with the dispatcher, as a view would hold it."""
    _app, dispatcher, factory = _celery_team.build(settings)
    rt = factory()
    yield rt, dispatcher
    rt.release()


def test_a_wake_returns_at_once_and_a_worker_runs_the_turns(web, workers):
    rt, _ = web
    boss = rt.spawn(rt.root, "boss")
    rt.wake(boss, "go")
    # No worker yet: the turn can only be waiting in the queue (with one, a fast worker could
    # finish it before the test looks, and "running" would be a race).
    assert rt.inspect(boss).state == "running"
    workers.start(concurrency=2)
    result = rt.wait(boss, timeout=30)
    assert (result.status, result.text) == ("done", "boss: helped")
    assert _celery_team.calls(workers.settings["TN_CELERY_CALLS"]) == ["boss", "helper", "boss"]


def test_the_same_turn_message_twice_or_after_the_turn_finished_runs_nothing_again(web, workers):
    rt, dispatcher = web
    calls = workers.settings["TN_CELERY_CALLS"]
    runtime_id = workers.settings["TN_CELERY_RUNTIME_ID"]
    helper = rt.spawn(rt.root, "helper")
    rt.wake(helper, "first")  # its message, waiting for a worker
    dispatcher.send(runtime_id, helper.id, 1, 0)  # the same message again
    workers.start(concurrency=1)
    assert rt.wait(helper, timeout=30).status == "done"
    dispatcher.send(runtime_id, helper.id, 1, 0)  # late: the turn finished
    dispatcher.send(runtime_id, helper.id, 1, 0)
    # One thread, prefetch 1: the queue is worked in order, so once a later turn is done
    # every duplicate before it has been delivered.
    later = rt.spawn(rt.root, "helper")
    rt.wake(later, "second")
    assert rt.wait(later, timeout=30).status == "done"
    assert _celery_team.calls(calls) == ["helper", "helper"]
    assert rt.transitions(helper) == ["idle\u2192running", "running\u2192idle"]


def test_a_worker_killed_mid_turn_is_recovered_by_another_and_nothing_done_runs_twice(web, workers):
    rt, _ = web
    settings = workers.settings
    Path(settings["TN_CELERY_ARM"]).touch()
    first = workers.start(concurrency=1)
    boss = rt.spawn(rt.root, "boss")
    rt.wake(boss, "go")
    hang = Path(settings["TN_CELERY_HANG"])
    deadline = time.monotonic() + 30
    while not hang.exists() or not hang.read_text():  # the boss's second model call has begun
        assert time.monotonic() < deadline, "the boss never reached its second model call"
        time.sleep(0.05)
    assert int(hang.read_text()) == first.pid
    second = workers.start(concurrency=1)
    workers.kill(first)
    result = rt.wait(boss, timeout=30)
    assert (result.status, result.text) == ("done", "boss: helped")
    # The recorded first reply and the finished task call are not repeated; only the model
    # call the kill interrupted is asked again.
    assert _celery_team.calls(settings["TN_CELERY_CALLS"]) == ["boss", "helper", "boss", "boss"]
    assert [h.id for h in rt.handles()] == ["root", boss.id, f"{boss.id}/helper.1"]
    assert [e["mode"] for e in rt.events() if e["event"] == "recovered"] == ["resume"]
    with open(settings["TN_CELERY_CALLS"], encoding="utf-8") as f:
        assert f.read().splitlines()[-1] == f"boss {second.pid}"


def test_a_depth_8_team_finishes_on_one_worker_of_concurrency_1(web, workers):
    rt, _ = web
    workers.start(concurrency=1)
    top = rt.spawn(rt.root, "a1")
    rt.wake(top, "go")
    result = rt.wait(top, timeout=30)
    assert (result.status, result.text) == ("done", "a1(a2(a3(a4(a5(a6(a7(a8(bottom))))))))")
    made = _celery_team.calls(workers.settings["TN_CELERY_CALLS"])
    assert sorted(made) == sorted([f"a{n}" for n in range(1, 9)] + [f"a{n}" for n in range(1, 8)])


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[Any]:
    """A Redis server of this test's own, which it may stop and start again."""
    binary = shutil.which("redis-server")
    if binary is None:
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail("redis-server is not installed")
        pytest.skip("redis-server is not installed")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    class Server:
        url = f"redis://127.0.0.1:{port}/0"
        process: subprocess.Popen[bytes] | None = None

        def start(self) -> None:
            self.process = subprocess.Popen(
                [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            deadline = time.monotonic() + 10
            while True:
                with socket.socket() as conn:
                    if conn.connect_ex(("127.0.0.1", port)) == 0:
                        return
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.05)

        def stop(self) -> None:
            if self.process is not None and self.process.poll() is None:
                self.process.terminate()
                self.process.wait(timeout=10)

    server = Server()
    server.start()
    yield server
    server.stop()


def test_a_run_queued_while_the_broker_is_down_is_run_once_it_is_back(settings, tmp_path, own_redis):
    settings = {**settings, "TN_CELERY_BROKER": own_redis.url}
    _app, dispatcher, factory = _celery_team.build(settings)
    rt = factory()
    workers = Workers(settings, tmp_path)
    try:
        own_redis.stop()
        boss = rt.spawn(rt.root, "boss")
        began = time.monotonic()
        rt.wake(boss, "go")  # committed as queued; the message waits for the broker
        assert time.monotonic() - began < 5  # bounded by broker_connection_timeout
        with pytest.raises(DispatchError):
            dispatcher.send(settings["TN_CELERY_RUNTIME_ID"], boss.id, 1, 0)
        assert rt.wait(boss, timeout=0.5).status == "timeout"
        assert rt.inspect(boss).state == "running"
        own_redis.start()
        workers.start(concurrency=1)
        result = rt.wait(boss, timeout=30)
        assert (result.status, result.text) == ("done", "boss: helped")
    finally:
        workers.stop_all()
        rt.release()


def test_install_never_builds_the_runtime_and_a_dispatcher_needs_a_state():
    built = []
    app = Celery("toolnexus_install_test", broker="memory://")
    dispatcher = install(app, lambda: built.append(1), queue="q")  # type: ignore[arg-type,func-returns-value]
    assert built == []
    assert TASK_NAME in app.tasks
    with pytest.raises(ConfigError, match="state"):
        Runtime(_celery_team.registry(), generate=lambda request: {"content": "x"}, dispatcher=dispatcher)
