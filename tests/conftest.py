"""Shared test helpers: join-with-timeout for anything that could hang, and the ``cleanup``
fixture that releases gates and closes runtimes after a test (more helpers in ``_helpers.py``)."""

from __future__ import annotations

import threading
from typing import Any, Callable

import pytest
import requests

from _helpers import Gate, text
from _rawserver import RawServer
from _services import service_url
from toolnexus import Runtime
from toolnexus.testing import ScriptedRoute

pytest_plugins = ("_parallel",)  # the suite on several workers: see _parallel.py

HANG_TIMEOUT = 10.0


def run_in_thread(fn: Callable[[], Any], timeout: float = HANG_TIMEOUT) -> Any:
    """Run ``fn`` in a thread and fail the test (instead of hanging) if it does not finish."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # re-raised in the test thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="test-scenario", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        pytest.fail(f"scenario did not finish within {timeout}s (deadlock or hang)")
    if "error" in box:
        raise box["error"]
    return box.get("value")


@pytest.fixture(autouse=True)
def _no_provider_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never pick up a real key from the environment."""
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENROUTER_API_KEY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def cleanup():
    """Hands out gates, events and runtimes; after the test, sets every event (releasing the
    gates), then closes every runtime."""
    events = []
    runtimes = []

    class Cleanup:
        def gate(self, answer=None):
            gate = Gate(answer or text("late"))
            events.append(gate.release)
            return gate

        def event(self):
            event = threading.Event()
            events.append(event)
            return event

        def events_to_set(self, *more):
            events.extend(more)

        def runtime(self, registry, **options):
            rt = Runtime(registry, **options)
            runtimes.append(rt)
            return rt

    yield Cleanup()
    for event in events:
        event.set()
    for rt in runtimes:
        rt.close(rt.root)


@pytest.fixture
def closing():
    """``closing(server)`` hands ``server`` back and closes it after the test."""
    opened = []

    def keep(server):
        opened.append(server)
        return server

    yield keep
    for server in reversed(opened):
        server.close()


@pytest.fixture(params=["own session", "host session"])
def via(request):
    """Connection options for both routes: the client's own session (which goes direct),
    or one the host supplies (through ``requests``)."""
    if request.param == "own session":
        yield {}
        return
    session = requests.Session()
    yield {"session": session}
    session.close()


@pytest.fixture
def scripted():
    """An active ``ScriptedRoute``: every model exchange of the test is answered from what
    the test queues with ``scripted.add(...)``, with no socket."""
    with ScriptedRoute() as route:
        yield route


@pytest.fixture
def servers(closing):
    """Start raw-socket servers (``servers(script)``); every one is closed after the test."""
    return lambda script: closing(RawServer(script))


@pytest.fixture
def pg_url() -> str:
    """A PostgreSQL server's URL (skips on a developer's machine without one; fails under CI)."""
    return service_url("postgresql")


@pytest.fixture
def redis_url() -> str:
    """A Redis server's URL (skips on a developer's machine without one; fails under CI)."""
    return service_url("redis")
