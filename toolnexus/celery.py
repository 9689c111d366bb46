"""Agent turns on Celery workers, the tree in a shared state (``toolnexus[celery]``).

``install(app, runtime_factory)`` registers the task ``toolnexus.run_turn`` on a Celery
app and returns a dispatcher for ``Runtime(..., state=..., dispatcher=...)``. From then on
``wake`` and ``resume`` commit each turn as queued in the state and send one message; a
worker claims the turn in the state and runs it. All correctness lives in the state: a
message is only a doorbell, so a duplicated or late one does nothing, and one that was
lost (a broker that was down) is sent again by the runtime's sweep.

Each worker process builds its runtime once, after fork, by calling ``runtime_factory()``
(never ``install``), so the factory may pass the very dispatcher ``install`` returned.
Run workers with the threads pool, late acknowledgement and a prefetch of one::

    app.conf.update(task_acks_late=True, task_reject_on_worker_lost=True, worker_prefetch_multiplier=1)
    celery -A myproject.tasks worker -P threads -c 8 -Q toolnexus
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any, Callable

from celery import Celery, signals  # type: ignore[import-untyped]

from . import _seconds as seconds
from .dispatch import run_turn
from .errors import ConfigError, DispatchError
from ._team.runtime import Runtime

log = logging.getLogger("toolnexus")

#: The name of the Celery task that runs one queued turn.
TASK_NAME = "toolnexus.run_turn"

#: The worker settings the task relies on; ``install`` does not change the app's config.
RECOMMENDED_SETTINGS: dict[str, Any] = {
    "task_acks_late": True,
    "task_reject_on_worker_lost": True,
    "worker_prefetch_multiplier": 1,
}


class CeleryDispatcher:
    """Sends "run this turn" through a Celery app; holds the worker process's runtime."""

    def __init__(self, app: Celery, runtime_factory: Callable[[], Runtime], queue: str, resend_after_s: float) -> None:
        self.app = app
        self.queue = queue
        #: A queued turn nobody claimed for this long gets its message again.
        self.resend_after_s = resend_after_s
        self._factory = runtime_factory
        self._lock = threading.Lock()  # guards: _runtime, _pid
        self._runtime: Runtime | None = None
        self._pid: int | None = None

    def __repr__(self) -> str:
        return f"CeleryDispatcher(app={self.app.main!r}, queue={self.queue!r})"

    def send(self, runtime_id: str, handle_id: str, serial: int, segment: int) -> None:
        """One message naming the turn; a broker error becomes a ``DispatchError``."""
        try:
            self.app.send_task(TASK_NAME, args=(runtime_id, handle_id, serial, segment), queue=self.queue, retry=False)
        except Exception as exc:  # kombu, redis and socket errors alike: the turn stays queued
            cause = f"{type(exc).__name__}: {exc}"
            raise DispatchError(f"the broker did not take the message for {handle_id}: {cause}") from exc

    # --- the worker process's runtime -----------------------------------------------------

    def worker_runtime(self) -> Runtime:
        """This process's runtime, built by the factory on first use (and again after a fork)."""
        with self._lock:
            if self._runtime is None or self._pid != os.getpid():
                runtime = self._factory()
                if not isinstance(runtime, Runtime):
                    raise ConfigError(f"the runtime factory returned {type(runtime).__name__}, not a Runtime")
                self._runtime, self._pid = runtime, os.getpid()
            return self._runtime

    def release_worker_runtime(self) -> None:
        """Let go of this process's runtime (worker shutdown): its turns are left to the others."""
        with self._lock:
            if self._pid != os.getpid():
                return  # none built here (a parent's, inherited over fork, is not ours)
            runtime, self._runtime = self._runtime, None
        if runtime is not None:
            runtime.release()

    def run_turn(self, runtime_id: str, handle_id: str, serial: int, segment: int) -> bool:
        """The task's body: claim the named turn and run it in this thread; false when the
        turn was not queued any more (a duplicated or late message)."""
        ran = run_turn(self.worker_runtime(), runtime_id, handle_id, serial, segment)
        if not ran:
            log.debug("turn %s #%d.%d is not queued any more; message ignored", handle_id, serial, segment)
        return ran


def install(
    app: Celery,
    runtime_factory: Callable[[], Runtime],
    *,
    queue: str = "toolnexus",
    resend_after: float = 30.0,
    resend_after_ms: float | None = None,  # deprecated: resend_after in milliseconds, with a warning
) -> CeleryDispatcher:
    """Register ``toolnexus.run_turn`` on ``app``; the dispatcher for ``Runtime(dispatcher=...)``.

    ``runtime_factory()`` builds a worker process's runtime on the shared state, with this
    dispatcher; workers call it once each, after fork. A queued turn that no runtime
    claimed within ``resend_after`` seconds gets its message again (``resend_after_ms``
    still works for this release, with a ``DeprecationWarning``).
    """
    given = seconds.durations("install", locals())
    dispatcher = CeleryDispatcher(app, runtime_factory, queue, seconds.duration("resend_after", given["resend_after"]))

    @app.task(  # type: ignore[untyped-decorator]
        name=TASK_NAME, shared=False, acks_late=True, reject_on_worker_lost=True, ignore_result=True
    )
    def run_turn(runtime_id: str, handle_id: str, serial: int, segment: int) -> bool:
        return dispatcher.run_turn(runtime_id, handle_id, serial, segment)

    def build_in_child(**_: Any) -> None:
        dispatcher.worker_runtime()  # a prefork or solo pool's process, after fork

    def build_when_ready(sender: Any = None, **_: Any) -> None:
        if getattr(sender, "app", None) is not app:
            return
        if type(getattr(sender, "pool", None)).__module__.endswith(".prefork"):
            return  # the pool's children build theirs after fork
        dispatcher.worker_runtime()  # threads pool: its heartbeat (recovery, re-sends) runs from now on

    def release(sender: Any = None, **_: Any) -> None:
        dispatcher.release_worker_runtime()

    signals.worker_process_init.connect(build_in_child, weak=False)
    signals.worker_ready.connect(build_when_ready, weak=False)
    signals.worker_process_shutdown.connect(release, weak=False)
    signals.worker_shutdown.connect(release, weak=False)
    return dispatcher


__all__ = ["install", "CeleryDispatcher", "TASK_NAME", "RECOMMENDED_SETTINGS"]
