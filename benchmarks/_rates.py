"""Rates the benchmarks share: calls per second from a number of threads, and medians of
measurements taken in alternating rounds (so that they share the machine's noise)."""

from __future__ import annotations

import statistics
import threading
import time
from typing import Callable

#: Thread ``t``'s first offset is ``t * THREAD_OFFSET``.
THREAD_OFFSET = 100000


def per_second(threads: int, each: int, work: Callable[[int], None]) -> float:
    """Calls per second when ``threads`` threads, started together, each run
    ``work(offset)`` for ``offset`` in ``t * THREAD_OFFSET + 0..each-1`` (``t``: the thread's number)."""

    def thread_work(first: int) -> None:
        for offset in range(first, first + each):
            work(offset)

    workers = [threading.Thread(target=thread_work, args=(t * THREAD_OFFSET,)) for t in range(threads)]
    begun = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return each * threads / (time.perf_counter() - begun)


def medians_of(plans: dict[str, Callable[[], float]], rounds: int) -> dict[str, float]:
    """The median of each plan over ``rounds`` rounds that alternate the plans (after one
    warm-up round, not counted)."""
    samples: dict[str, list[float]] = {label: [] for label in plans}
    for plan in plans.values():
        plan()
    for _ in range(rounds):
        for label, plan in plans.items():
            samples[label].append(plan())
    return {label: statistics.median(values) for label, values in samples.items()}
