"""Claimable jobs: work that either a pool worker or a blocked waiter may run, exactly once.

A thread that is about to block on work nobody has started yet runs it itself. That is
what keeps a bounded pool from deadlocking when workers wait on other workers' results
(the warning in the ``concurrent.futures`` docs): a waiter only ever blocks on work that
another thread is already running.
"""

from __future__ import annotations

import threading
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any, Callable, Sequence


_local = threading.local()


def inside_job() -> bool:
    """Whether this thread is running a job: blocking it on queued work could starve the pool."""
    return getattr(_local, "depth", 0) > 0


class Job:
    """A callable that runs at most once, on whichever thread claims it first."""

    __slots__ = ("_fn", "_lock", "_claimed", "_done", "_value", "_error")

    def __init__(self, fn: Callable[[], Any]) -> None:
        self._fn: Callable[[], Any] | None = fn  # dropped once run: what it holds goes with it
        self._lock = threading.Lock()  # guards: _claimed
        self._claimed = False
        self._done = threading.Lock()  # held until the job has run: cheaper than an Event
        self._done.acquire()
        self._value: Any = None
        self._error: BaseException | None = None

    @property
    def claimed(self) -> bool:
        with self._lock:
            return self._claimed

    def claim(self) -> bool:
        with self._lock:
            if self._claimed:
                return False
            self._claimed = True
            return True

    def run(self) -> None:
        """Run the job here unless another thread already has it."""
        if self.claim():
            self.run_claimed()

    def run_claimed(self) -> None:
        fn, self._fn = self._fn, None
        assert fn is not None, "a job runs once: its claim guards it"
        _local.depth = getattr(_local, "depth", 0) + 1
        try:
            self._value = fn()
        except BaseException as exc:  # handed to whoever reads the result
            self._error = exc
        finally:
            _local.depth -= 1
            self._done.release()

    def result(self) -> Any:
        """The job's value (or its exception); runs it here if nobody has started it."""
        self.run()
        with self._done:  # the claiming thread is running it and always releases _done
            pass
        if self._error is not None:
            raise self._error
        return self._value


def readier(executor: Executor | None) -> Callable[[], None] | None:
    """Something that starts one idle worker in ``executor`` if it has none yet, or None.

    Starting a thread blocks the starter until the new thread is scheduled, which on a
    busy machine can take longer than a model round trip; called while a model call that
    may fan out waits for its reply, it takes that wait off the fan-out.
    """
    if executor is None:
        return None
    # A ``pool.Lent`` says whether its shared pool has a thread; another executor is left be.
    if isinstance(executor, ThreadPoolExecutor):
        started = bool(executor._threads)
    else:
        started = getattr(executor, "has_threads", True)
    if started:
        return None

    def ready() -> None:
        try:
            executor.submit(_idle)
        except RuntimeError:  # shut down meanwhile: nothing to ready
            pass

    return ready


def _idle() -> None:
    """The job that leaves a new worker idle."""


def submit(executor: Executor | None, job: Job) -> None:
    """Offer ``job`` to the pool; a pool that is gone leaves it to the waiter (caller-runs)."""
    if executor is None:
        return
    try:
        executor.submit(job.run)
    except RuntimeError:  # shut down: whoever waits on the job runs it
        pass


def run_all(executor: Executor | None, fns: list[Callable[[], Any]], here: Sequence[bool] | None = None) -> list[Any]:
    """Run ``fns`` concurrently on ``executor`` and this thread; results in the given order.

    ``here`` marks the functions this thread runs itself, in order, while the others run
    on the executor (by default the first one).
    """
    if len(fns) == 1:
        return [fns[0]()]
    jobs = [Job(fn) for fn in fns]
    mine = list(here) if here is not None else [index == 0 for index in range(len(jobs))]
    for job, local in zip(jobs, mine):
        if not local:
            submit(executor, job)
    for job, local in zip(jobs, mine):
        if local:
            job.run()
    return [job.result() for job in jobs]
