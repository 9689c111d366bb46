"""How a runtime is put together from its options: the checks, the worker pool, where its
turns run, the tree store. Kept apart so that ``Runtime.__init__`` reads as the list of its
parts."""

from __future__ import annotations

import os
import weakref
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any, Callable

from .. import _seconds as seconds
from ..errors import ConfigError, ToolnexusError
from .execution import Execution, LocalExecution
from .ownership import RECOVER_OPTIONS
from .pool import DEFAULT_WORKERS, Lent, WorkerPool
from .._stores.conversations import ConversationStore
from .tree import HandleTree, MemoryTree, TreeStore

if TYPE_CHECKING:
    from .dispatching import Dispatcher
    from ..state import StateStore

#: ``make(executor, tree, owner, clock)``: the runtime's execution, once its tree is open.
MakeExecution = Callable[["Executor | None", HandleTree, str, Callable[[], float]], Execution]


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
    return lambda executor, tree, owner, clock: tree.store.dispatching(dispatcher, tree, owner, clock)


def make_executor(*, inline: bool, pool: WorkerPool | None, max_workers: int | None) -> tuple[ThreadPoolExecutor | Lent | None, int]:
    """The runtime's worker threads (none inline: a turn runs on the thread that waits for
    it; a share of ``pool``; or a pool of its own) and their number."""
    workers = pool.max_workers if pool is not None else max_workers or DEFAULT_WORKERS
    if inline:
        return None, workers
    if pool is not None:
        return pool.lend(), workers
    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix="toolnexus"), workers


def open_tree_store(state: str | os.PathLike[str] | StateStore | None, runtime_id: str, conversations: ConversationStore | None) -> TreeStore:
    """Where the tree lives: in memory without a state, else as rows in it. The state
    modules (and sqlite3) load only for a runtime that has one."""
    if state is None:
        return MemoryTree(conversations)
    from ..state import StateStore, open_state
    from .._stores.stored import StoredTree

    owned = not isinstance(state, StateStore)
    return StoredTree(open_state(state), runtime_id, sole_user=owned, owns_store=owned)


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
