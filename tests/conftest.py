"""Shared test helpers: join-with-timeout for anything that could hang."""

from __future__ import annotations

import threading
from typing import Any, Callable

import pytest

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
