"""The a2a-sdk server of ``_a2a_sdk_peer.py`` in a subprocess, as the calling tests and
``benchmarks/a2a_calls.py`` start it: ``with started_peer() as peer`` gives it once it
serves its card; ``peer.line(prefix)`` waits for a line it printed."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
from pathlib import Path
from typing import Iterator

import requests

from _gunicorn import free_port

TESTS = Path(__file__).resolve().parent
#: How long the peer may take to start, and to print a line a test waits for.
WAIT_S = 30.0


class SdkPeer:
    """The a2a-sdk server in a subprocess; ``line(prefix)`` waits for a line it printed."""

    def __init__(self, port: int) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(
            [sys.executable, str(TESTS / "_a2a_sdk_peer.py"), str(port)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        self._lines: list[str] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, name="sdk-peer-output", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._changed:
                self._lines.append(line.strip())
                self._changed.notify_all()

    def lines(self) -> list[str]:
        """What the peer printed so far (its output is read on a thread: a line may come late)."""
        with self._changed:
            return list(self._lines)

    def state(self, task_id: str) -> str:
        """The task's state, as the peer's ``GetTask`` says."""
        body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task_id}}
        reply = requests.post(self.url + "/", json=body, headers={"A2A-Version": "1.0"}, timeout=WAIT_S).json()
        return str(reply["result"]["status"]["state"])

    def line(self, prefix: str) -> str:
        """The first line the peer printed that starts with ``prefix``, once it is read."""
        with self._changed:
            found = self._changed.wait_for(
                lambda: next((each for each in self._lines if each.startswith(prefix)), None), timeout=WAIT_S
            )
        assert found is not None, f"the peer never printed {prefix!r}: {self._lines}"
        return found

    def ready(self) -> None:
        deadline_tries = int(WAIT_S / 0.1)
        for _ in range(deadline_tries):  # another process: poll until it serves its card
            try:
                if requests.get(self.url + "/.well-known/agent-card.json", timeout=1).status_code == 200:
                    return
            except requests.ConnectionError:
                pass
            if self.proc.poll() is not None:
                break
            threading.Event().wait(0.1)
        self.stop()
        raise RuntimeError(f"the a2a-sdk peer did not start: {self._lines}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(timeout=5)


@contextlib.contextmanager
def started_peer() -> Iterator[SdkPeer]:
    """An a2a-sdk peer on a free port, stopped when the block ends."""
    served = SdkPeer(free_port())
    try:
        served.ready()
        yield served
    finally:
        served.stop()
