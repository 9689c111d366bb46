"""One model call at a time, through the engine a ``Client`` or ``Runtime`` builds, plain or
streamed: what the streamed-exchange tests drive. ``Asked`` records every text piece (with
the time it arrived) and every retry announcement, in one ordered log."""

from __future__ import annotations

import threading
import time

from toolnexus._model.cancel import CancelScope, TurnGate
from toolnexus._model.engine import ConnectionOptions, ModelCall, build_engine


def engine_for(server, via=None, **options):
    """The HTTP engine for ``server`` (model calls without retries unless asked)."""
    options.setdefault("retries", 0)
    options.setdefault("retry_base", 0.001)
    return build_engine(ConnectionOptions(base_url=server.base_url, **(via or {}), **options))


class Asked:
    """A model call: ``run()`` returns its reply (or raises); ``log`` holds ``("text",
    delta)`` and ``("retry", attempt, cause)`` entries in order, ``texts`` the deltas,
    ``times`` when each delta arrived (``time.monotonic()``)."""

    def __init__(self, engine, streamed, *, scope=None, gate=None, on_text=None, on_retry=None, messages=None):
        self.engine = engine
        self.scope = scope if scope is not None else CancelScope()
        self.log = []
        self.times = []
        self._lock = threading.Lock()
        self._on_text = on_text
        self._on_retry = on_retry
        self.call = ModelCall(
            model="m",
            system=None,
            messages=messages or [{"role": "user", "content": "go"}],
            tools=[],
            scope=self.scope,
            gate=gate,
            on_text=self._text if streamed else None,
            on_retry=self._retry,
        )

    def _text(self, delta):
        with self._lock:
            self.log.append(("text", delta))
            self.times.append(time.monotonic())
        if self._on_text is not None:
            self._on_text(delta)

    def _retry(self, attempt, cause):
        with self._lock:
            self.log.append(("retry", attempt, cause))
        if self._on_retry is not None:
            self._on_retry(attempt, cause)

    @property
    def texts(self):
        return [entry[1] for entry in self.log if entry[0] == "text"]

    @property
    def retries(self):
        return [entry[1:] for entry in self.log if entry[0] == "retry"]

    def run(self):
        return self.engine.complete(self.call)


def one_slot():
    return TurnGate(1)
