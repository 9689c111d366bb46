"""The tools both SDK test servers serve (``_mcp_server.py`` on ``mcp`` 2.x, ``_mcp1_server.py``
on 1.x, each in its own interpreter): plain functions each server registers as it is.

``slow`` waits until it is cancelled (``notifications/cancelled``, or its reply cut) or its
time is up; ``cancellations`` reports, from the server's side, how many calls were
cancelled, and ``slow_started`` how many ``slow`` calls have begun (so a test waits for one,
not for a while).
"""

from __future__ import annotations

import anyio

_cancelled = {"count": 0}
_cancel_seen = anyio.Event()
_slow = {"started": 0}
_slow_seen = anyio.Event()


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def echo(text: str) -> str:
    """Echo the text back."""
    return text


async def slow(seconds: float) -> str:
    """Wait ``seconds``, unless the call is cancelled first."""
    _slow["started"] += 1
    _slow_seen.set()
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        _cancelled["count"] += 1
        _cancel_seen.set()
        raise
    return f"slept {seconds}"


async def cancellations(wait_s: float = 0.0) -> int:
    """How many calls were cancelled, after waiting up to ``wait_s`` for a first one."""
    if _cancelled["count"] == 0 and wait_s > 0:
        with anyio.move_on_after(wait_s):
            await _cancel_seen.wait()
    return _cancelled["count"]


async def slow_started(wait_s: float = 0.0) -> int:
    """How many ``slow`` calls have begun, after waiting up to ``wait_s`` for a first one."""
    if _slow["started"] == 0 and wait_s > 0:
        with anyio.move_on_after(wait_s):
            await _slow_seen.wait()
    return _slow["started"]


#: Every tool above, in the order the servers list them.
TOOLS = (add, echo, slow, cancellations, slow_started)
