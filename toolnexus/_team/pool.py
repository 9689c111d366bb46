"""Worker threads kept across runs, and one runtime's share of them.

Starting and ending a thread pool costs more than a whole scripted turn, so a caller that
builds a fresh runtime per request (``Agent.run`` in a web view) lends each one the same
``WorkerPool``. Closing such a runtime then waits for the work *it* gave the pool, not for
the pool's threads, which end when the pool is closed (or dropped, or the interpreter
exits).
"""

from __future__ import annotations

import threading
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any, Callable

from ..errors import ConfigError

_local = threading.local()

#: The threads of a runtime's own pool, or of an agent's kept one, unless told otherwise.
DEFAULT_WORKERS = 32


class WorkerPool:
    """A thread pool started on first use and kept until ``close``.

    Give one to several runtimes (``Runtime(..., pool=...)``) to spare each the start and
    end of its own threads; ``Agent.run`` keeps one per agent. Tool calls and turns of
    different runtimes then share ``max_workers`` threads; a waiter still runs work no
    worker has started, so a busy pool slows runs down but never deadlocks them.
    """

    def __init__(self, max_workers: int = DEFAULT_WORKERS, *, thread_name_prefix: str = "toolnexus") -> None:
        if max_workers < 1:
            raise ConfigError(f"max_workers must be 1 or more, not {max_workers}")
        self.max_workers = max_workers
        self._prefix = thread_name_prefix
        self._lock = threading.Lock()  # guards: _executor, _closed
        self._executor: ThreadPoolExecutor | None = None
        self._closed = False

    def __repr__(self) -> str:
        state = "closed" if self._closed else "started" if self._executor is not None else "not started"
        return f"WorkerPool(max_workers={self.max_workers}, {state})"

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def executor(self) -> ThreadPoolExecutor | None:
        """The pool's executor, started now if need be; None once closed."""
        with self._lock:
            if self._executor is None and not self._closed:
                self._executor = ThreadPoolExecutor(max_workers=self.max_workers, thread_name_prefix=self._prefix)
            return self._executor

    @property
    def started(self) -> bool:
        with self._lock:
            return self._executor is not None

    @property
    def has_threads(self) -> bool:
        """Whether a worker thread is already running (none is started by asking)."""
        executor = self._executor
        return executor is not None and bool(executor._threads)

    def lend(self) -> Lent:
        """A share of this pool for one runtime."""
        return Lent(self)

    def close(self, *, wait: bool = True) -> None:
        """End the threads: queued work is left to its waiters (who run it themselves);
        with ``wait``, return once running work has finished."""
        with self._lock:
            executor, self._executor, self._closed = self._executor, None, True
        if executor is None:
            return
        executor.shutdown(wait=False, cancel_futures=True)
        if wait:  # from one of its own threads (a tool closing it), the others
            for thread in list(executor._threads):
                if thread is not threading.current_thread():
                    thread.join()


class Lent(Executor):
    """One runtime's share of a ``WorkerPool``: it counts the work the runtime gave the
    pool, so that ending the runtime waits for that work alone.

    Its lock is never held while the pool's executor is called: the executor cancels
    futures under a lock of its own, and a cancelled future calls back in here.
    """

    def __init__(self, pool: WorkerPool) -> None:
        self.pool = pool
        self._changed = threading.Condition()  # guards: _unfinished, _handing, _running_on, _closed, _cancelling
        self._unfinished: set[Future[Any]] = set()
        self._handing = 0  # submits under way: not yet futures, already owed a wait
        self._running_on: dict[int, str] = {}  # thread ident -> name, while it runs our work
        self._closed = False
        self._cancelling = False

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        with self._changed:
            if self._closed:
                raise RuntimeError("cannot schedule new futures after shutdown")
            self._handing += 1
        future: Future[Any] | None = None
        try:
            executor = self.pool.executor()
            if executor is None:
                raise RuntimeError("the worker pool is closed")
            future = executor.submit(self._run, fn, args, kwargs)
        finally:
            with self._changed:
                self._handing -= 1
                if future is not None:
                    self._unfinished.add(future)
                cancel = future is not None and self._cancelling  # shut down meanwhile
                self._changed.notify_all()
        assert future is not None
        if cancel:
            future.cancel()
        future.add_done_callback(self._finished)  # runs at once if it is done already
        return future

    def _run(self, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        thread = threading.current_thread()
        with self._changed:
            self._running_on[thread.ident or 0] = thread.name
        _local.lent = self
        try:
            return fn(*args, **kwargs)
        finally:
            _local.lent = None
            with self._changed:
                del self._running_on[thread.ident or 0]

    def _finished(self, future: Future[Any]) -> None:
        with self._changed:
            self._unfinished.discard(future)
            self._changed.notify_all()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Take no more work; ``cancel_futures`` drops what no worker has started (its
        waiters run it themselves). The pool's threads stay for its other users."""
        with self._changed:
            self._closed = True
            self._cancelling = cancel_futures
            queued = list(self._unfinished)
        if cancel_futures:
            for future in queued:
                future.cancel()
        if wait:
            self.join(None)

    def join(self, timeout: float | None) -> list[str]:
        """Wait until the work given to the pool has finished, except the piece running on
        this very thread (it is the one waiting); the names of the threads still running
        the rest when ``timeout`` ran out."""
        mine = 1 if getattr(_local, "lent", None) is self else 0
        with self._changed:
            self._changed.wait_for(lambda: len(self._unfinished) + self._handing <= mine, timeout=timeout)
            if len(self._unfinished) + self._handing <= mine:
                return []
            here = threading.get_ident()
            running = [name for ident, name in self._running_on.items() if ident != here]
            return running or [f"{len(self._unfinished) + self._handing - mine} job(s) not yet on a thread"]

    @property
    def has_threads(self) -> bool:
        return self.pool.has_threads
