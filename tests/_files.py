"""Lines that processes of a test append to a file (what ran, and where), and reading them."""

from __future__ import annotations

import os
import threading

_lock = threading.Lock()  # the threads of one process append whole lines


def append(path: str | None, line: str) -> None:
    """Append ``line`` durably (a SIGKILL right after cannot lose it); nothing for ``None``."""
    if path is None:
        return
    with _lock, open(path, "a", encoding="utf-8") as out:
        out.write(line + "\n")
        out.flush()
        os.fsync(out.fileno())


def lines(path: str) -> list[str]:
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]
