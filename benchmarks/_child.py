"""A benchmark's server in a child process, so that the measured client does not share its
interpreter lock with the server's threads (a real model server never does).

The child prints its base URL on one line, may answer requests on its standard input,
and stops when that input ends.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


class ChildServer:
    """``python SCRIPT --serve ARGS...`` as a context manager; ``base_url`` once it is up."""

    def __init__(self, script: str, *args: str) -> None:
        self._proc = subprocess.Popen([sys.executable, str(Path(script).resolve()), "--serve", *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self._proc.stdout is not None and self._proc.stdin is not None
        self.base_url = self._proc.stdout.readline().strip()

    def ask(self, line: str) -> str:
        """One line to the child, its one-line answer."""
        assert self._proc.stdout is not None and self._proc.stdin is not None
        self._proc.stdin.write(line + "\n")
        self._proc.stdin.flush()
        return self._proc.stdout.readline()

    def __enter__(self) -> ChildServer:
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._proc.stdin is not None
        self._proc.stdin.close()
        try:
            self._proc.wait(10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
