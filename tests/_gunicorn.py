"""A real gunicorn serving one of the examples, for the tests of multi-process apps."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
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
    """``gunicorn -w 2 FLAGS`` serving ``app`` from ``chdir`` on ``port``, once it accepts
    connections (``env``: added to this process's environment); stopped with SIGTERM (then
    killed) when the block ends."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-w", "2", *flags, "-b", f"127.0.0.1:{port}", "--chdir", chdir, "--graceful-timeout", "5", app],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(env or {})},
    )
    deadline = time.monotonic() + STARTUP_S
    while True:  # another process: poll until it accepts connections
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"gunicorn did not start: {proc.communicate()[0]}")
            time.sleep(0.1)
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
