"""A real gunicorn serving one of the examples, for the tests of multi-process apps."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
from typing import Iterator

import pytest

#: How long gunicorn may take to accept connections.
STARTUP_S = 30.0


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def serving(
    port: int, chdir: str, app: str, *flags: str, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[str]]:
    """``gunicorn -w 2 FLAGS`` serving ``app`` from ``chdir`` on ``port``, once its arbiter says
    it listens there (``env``: added to this process's environment); stopped with SIGTERM (then
    killed) when the block ends.

    Its output is read all along by a thread (a full pipe would stop the arbiter), and the
    port counts as ours only when gunicorn says it bound it: a connection alone could reach
    another test's server that took the port between ``free_port`` and the bind."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-w", "2", *flags, "-b", f"127.0.0.1:{port}", "--chdir", chdir,
         "--graceful-timeout", "5", app],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(env or {})},
    )
    said: list[str] = []
    listening = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            said.append(line)
            if f"Listening at: http://127.0.0.1:{port} " in line:
                listening.set()
        listening.set()  # the output ended: gunicorn is gone

    reader = threading.Thread(target=read, name=f"gunicorn-{port}", daemon=True)
    reader.start()
    if not listening.wait(STARTUP_S) or proc.poll() is not None or not any("Listening at" in line for line in said):
        proc.kill()
        proc.wait()
        reader.join(5)
        pytest.fail(f"gunicorn did not start on port {port}: {''.join(said)}")
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        reader.join(5)
