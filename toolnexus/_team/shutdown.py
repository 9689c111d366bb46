"""Ending what a runtime started: its worker threads, its model connections, and its
claim on a durable tree.

Closing the root and releasing a durable tree both end here, so every thread the runtime
started has ended (or is named in a warning) when they return.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Iterable

from .._model.engine import ModelEngine
from .handle import Handle
from .pool import Lent
from .tree import Ownership, TreeStore

log = logging.getLogger("toolnexus")

#: After ``shutdown_timeout``, how long closing the root waits for interrupted threads to end.
THREAD_GRACE_S = 1.0


def threads_deadline(shutdown_s: float) -> float:
    """When, on the monotonic clock (whatever the runtime's clock), threads must have ended."""
    return time.monotonic() + shutdown_s + THREAD_GRACE_S


def cancel_running(handles: Iterable[Handle]) -> None:
    """Stop the turns running here; a durable state keeps them for whoever continues."""
    for handle in handles:
        turn = handle.turn
        if turn is not None:
            turn.scope.cancel()


def stop_workers(executor: ThreadPoolExecutor | Lent | None, model: ModelEngine, deadline: float) -> None:
    """End the pool (none inline); wait for its threads (interrupted turns unwinding) until
    ``deadline`` on the monotonic clock, then close the model endpoint's connections. A
    pool lent by a ``WorkerPool`` keeps its threads: what is waited for is the work this
    runtime gave it."""
    if executor is not None:
        executor.shutdown(wait=False, cancel_futures=True)
    if isinstance(executor, Lent):
        left = executor.join(max(0.0, deadline - time.monotonic()))
    else:
        threads = [t for t in list(getattr(executor, "_threads", ())) if t is not threading.current_thread()]
        for thread in threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        left = [thread.name for thread in threads if thread.is_alive()]
    if left:
        log.warning("close: %d runtime thread(s) still running past shutdown_timeout + 1 s (a tool that ignores ctx.cancelled?): %s", len(left), ", ".join(left))
    model.close()


def let_go(ownership: Ownership, tree_store: TreeStore, shutdown_s: float) -> None:
    """Stop the heartbeat and drop the owner: the turns left here are orphaned for another
    runtime to recover. The tree store then lets go too (closing a state store the
    runtime opened itself)."""
    if ownership.let_go(shutdown_s + THREAD_GRACE_S):
        tree_store.let_go(shutdown_s + THREAD_GRACE_S)
