"""Database connections on threads that Django's request cycle does not manage."""

from __future__ import annotations

import contextlib
from typing import Iterator

from django.db import close_old_connections, connections


@contextlib.contextmanager
def closing_connections() -> Iterator[None]:
    """``around_tool`` for tools on worker threads: drop a stale connection before the
    call and close this thread's connections after it, so a worker thread never keeps
    one (Django closes the request threads' connections, never a library thread's).

    Inside an ``atomic()`` block (a tool running inline on the request's own thread)
    the connection belongs to the view and is left alone.
    """
    if _in_transaction():
        yield
        return
    close_old_connections()
    try:
        yield
    finally:
        if not _in_transaction():  # a tool that left a transaction open keeps it
            connections.close_all()


def _in_transaction() -> bool:
    return any(conn.in_atomic_block for conn in connections.all(initialized_only=True))
