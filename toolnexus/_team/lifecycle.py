"""A runtime's life: put together from its options, and ended.

Put together: the option checks, the worker pool, where its turns run (the one choice of
``execution.py``) and the tree store, kept here so that ``Runtime.__init__`` reads as the
list of its parts. Ended: closing the root (``Runtime.close``) and releasing a stored tree
(``Runtime.release``) both end here, so that every thread the runtime started has ended
(or is named in a warning) when they return: its pool, the model's connections, the
resources of its agents' tools, and its claim on a stored tree.

The words (``docs/architecture.md``): a handle is *closed* (``closing.py``); what a
runtime started *ends* (here); a stored tree is *let go* for another runtime to continue.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Callable, Iterable

from .. import _seconds as seconds
from .._model.engine import ModelEngine
from .._stores.conversations import ConversationStore
from .._tools.resources import close_resources
from .._tools.tools import Tool
from ..errors import ConfigError, ToolnexusError
from .execution import Execution, LocalExecution
from . import budget as budgets
from .handle import Handle, HandleRecord
from .ownership import RECOVER_OPTIONS
from .pool import DEFAULT_WORKERS, Lent, WorkerPool
from .._stores.memory import MemoryTree
from .._stores.parts import Ownership, TreeStore
from .tree import HandleTree

if TYPE_CHECKING:
    from ..state import StateStore
    from .dispatching import Dispatcher

log = logging.getLogger("toolnexus")

#: The root handle's id (it runs no agent).
ROOT = "root"

#: After ``shutdown_timeout``, how long closing the root waits for interrupted threads to end.
THREAD_GRACE_S = 1.0

#: ``make(executor, tree, owner, clock)``: the runtime's execution, once its tree is open.
MakeExecution = Callable[["Executor | None", HandleTree, str, Callable[[], float]], Execution]


# --- put together ------------------------------------------------------------------------------


def check_options(
    *, state: Any, store: Any, recover: str, lease: Any, shutdown_timeout: Any, keep_closed: int, pool: Any,
    max_workers: int | None,
) -> tuple[float, float]:
    """The option combinations a runtime refuses, before anything is built; the lease and
    the shutdown timeout, in seconds."""
    if state is not None and store is not None:
        raise ConfigError("give store= or state=, not both: with a state, transcripts live in it")
    if recover not in RECOVER_OPTIONS:
        raise ConfigError(f"recover must be one of {', '.join(RECOVER_OPTIONS)}, not {recover!r}")
    if keep_closed < 0:
        raise ConfigError(f"keep_closed must be 0 or more, not {keep_closed}")
    if pool is not None and max_workers is not None:
        raise ConfigError("give max_workers= or pool=, not both: a pool has its own size")
    return seconds.duration("lease", lease), seconds.duration("shutdown_timeout", shutdown_timeout, zero=True)


def execution_for(dispatcher: Dispatcher | None, state: Any) -> MakeExecution:
    """Where the runtime's turns run, decided here once (see ``execution.py``): on its own
    threads (or inline), or, with a dispatcher, in whichever process of the tree claims
    them, through the state they share.

    Raises:
        ConfigError: a dispatcher without a state.
    """
    if dispatcher is None:
        return lambda executor, tree, owner, clock: LocalExecution(executor, owner=owner, clock=clock)
    if state is None:
        raise ConfigError("a dispatcher runs turns in other processes: it needs a state= they share")
    return lambda executor, tree, owner, clock: tree.store.owners.dispatching(dispatcher, tree, owner, clock)


def make_executor(
    *, inline: bool, pool: WorkerPool | None, max_workers: int | None
) -> tuple[ThreadPoolExecutor | Lent | None, int]:
    """The runtime's worker threads (none inline: a turn runs on the thread that waits for
    it; a share of ``pool``; or a pool of its own) and their number."""
    workers = pool.max_workers if pool is not None else max_workers or DEFAULT_WORKERS
    if inline:
        return None, workers
    if pool is not None:
        return pool.lend(), workers
    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix="toolnexus"), workers


def open_tree_store(
    state: str | os.PathLike[str] | StateStore | None, runtime_id: str, conversations: ConversationStore | None
) -> TreeStore:
    """Where the tree lives: in memory without a state, else as rows in it. The state
    modules (and sqlite3) load only for a runtime that has one."""
    if state is None:
        return MemoryTree(conversations)
    from ..state import StateStore, open_state
    from .._stores.sql.tree import StoredTree

    owned = not isinstance(state, StateStore)
    return StoredTree(open_state(state), runtime_id, sole_user=owned, owns_state=owned)


def open_tree(
    state: str | os.PathLike[str] | StateStore | None,
    runtime_id: str,
    conversations: ConversationStore | None,
    agents: set[str],
    model: ModelEngine,
    load: Callable[[HandleRecord], Handle],
    keep_closed: int,
) -> HandleTree:
    """The tree, in memory or in the state, with its root (the kept one when the state
    holds this tree already); a failure to open it closes the model's connections.
    ``load`` makes a handle of a record read from the state."""
    try:
        tree_store = open_tree_store(state, runtime_id, conversations)
        nonce = os.urandom(16).hex()
        fresh = HandleRecord(id=ROOT, name=ROOT, parent=None, depth=0, budget=budgets.ROOT_BUDGET, nonce=nonce)
        root = tree_store.open_root(fresh, agents, lambda record: Handle(record, None, tree_store))
    except BaseException:
        model.close()
        raise
    return HandleTree(tree_store, root, load, keep_closed)


def weakly(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` called through a weak reference to its object: the parts a runtime hands
    its own methods to keep no cycle back to it, so reference counting frees a closed
    runtime at once instead of leaving a whole tree to the cycle collector."""
    ref = weakref.WeakMethod(method)

    def call(*args: Any, **kwargs: Any) -> Any:
        bound = ref()
        if bound is None:
            raise ToolnexusError("the runtime is gone")
        return bound(*args, **kwargs)

    return call


# --- ended -------------------------------------------------------------------------------------


def threads_deadline(shutdown_s: float) -> float:
    """When, on the monotonic clock (whatever the runtime's clock), threads must have ended."""
    return time.monotonic() + shutdown_s + THREAD_GRACE_S


def cancel_running(handles: Iterable[Handle]) -> None:
    """Stop the turns running here; a durable state keeps them for whoever continues."""
    for handle in handles:
        turn = handle.turn
        if turn is not None:
            turn.scope.cancel()


def end(executor: Executor | None, model: ModelEngine, tools: Iterable[Tool], deadline: float) -> None:
    """End what the runtime started: its pool (none inline), waiting for the threads
    (interrupted turns unwinding) until ``deadline`` on the monotonic clock; then the model
    endpoint's connections and the resources of its agents' tools. A pool lent by a
    ``WorkerPool`` keeps its threads: what is waited for is the work this runtime gave it."""
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
        log.warning(
            "close: %d runtime thread(s) still running past shutdown_timeout + 1 s (a tool that ignores"
            " ctx.cancelled?): %s", len(left), ", ".join(left),
        )
    model.close()
    close_resources(tools)


def let_go(ownership: Ownership, tree_store: TreeStore, shutdown_s: float) -> None:
    """Stop the heartbeat and drop the owner: the turns left here are orphaned for another
    runtime to recover. The tree store then lets go too (closing a state store the
    runtime opened itself)."""
    if ownership.let_go(shutdown_s + THREAD_GRACE_S):
        tree_store.let_go(shutdown_s + THREAD_GRACE_S)
