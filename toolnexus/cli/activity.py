"""What a team does, told as it happens: each tool call (a delegation is a
``task(agent=..., prompt=...)`` call), what it returned, the text each model writes (each
line as soon as it is complete), a question a run stops on, a model call tried again.

``Narrator`` turns the events of ``Runtime.stream`` into such lines, each led by the handle
it is about (its last id segment, indented by its depth in the run). ``Feed`` reads the
stream of the whole tree on a thread of its own, hands the lines to a sink (the live
tree's ``log``), keeps the text each handle's model is writing now (shown under a running
handle on a terminal), and tells a waiting command when the run's result has been told.
"""

from __future__ import annotations

import collections
import json
import threading
from typing import Any, Callable

from ..data import Event
from .._team.runtime import Runtime

#: Characters of one argument value, and of a tool's result, that a line shows.
VALUE_CHARS = 80
OUTPUT_CHARS = 100
#: Results remembered for ``Feed.told`` (a command waits for one of the latest).
_RESULTS_KEPT = 256


def clipped(text: str, limit: int) -> str:
    """``text`` on one line, cut to ``limit`` characters (``...`` marks a cut)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def call_text(name: str, arguments: Any) -> str:
    """A tool call as a reader takes it in: ``search(query="budgets")``. ``arguments`` is
    the JSON text the model sent (or already a dict); text that is not a JSON object is
    shown as it came."""
    try:
        values = json.loads(arguments) if isinstance(arguments, str) else arguments
    except ValueError:
        values = None
    if not isinstance(values, dict):
        return f"{name}({clipped(str(arguments), VALUE_CHARS)})"
    shown = (f"{key}={clipped(json.dumps(value, ensure_ascii=False), VALUE_CHARS)}" for key, value in values.items())
    return f"{name}({', '.join(shown)})"


class Narrator:
    """Lines for the events of one run (``top()``, the id of its top handle; every run under
    the root while it is None). Used by one thread at a time: the feed's."""

    def __init__(self, top: Callable[[], str | None]) -> None:
        self._top = top
        self._partial: dict[str, str] = {}  # handle -> the text of a line not complete yet
        self._streamed: set[str] = set()  # handles whose current reply came as text events
        self._told: collections.deque[str] = collections.deque(maxlen=_RESULTS_KEPT)  # request ids

    def lines(self, event: Event) -> list[str]:
        """What ``event`` tells a reader; nothing for the events of another run, and for
        those the other lines already say (states, spawns, results)."""
        who = self._who(event.handle)
        if who is None:
            return []
        handle, data = str(event.handle), event.data
        if event.kind == "text":
            return self._text(who, handle, str(data.get("delta") or ""))
        if event.kind == "message":
            return self._message(who, handle, str(data.get("text") or ""))
        if event.kind == "tool_call":
            return [f"{who}: {call_text(str(data.get('name')), data.get('arguments'))}"]
        if event.kind == "tool_result":
            said = "failed:" if data.get("is_error") else "->"
            return [f"{who}: {data.get('name')} {said} {clipped(str(data.get('output') or ''), OUTPUT_CHARS)}"]
        if event.kind == "pending":
            return self._question(who, data.get("request"))
        if event.kind == "retry":
            self._partial.pop(handle, None)
            self._streamed.discard(handle)
            return [f"{who}: the model call failed ({data.get('cause')}); retry {data.get('attempt')}"]
        return []

    def _who(self, handle: str | None) -> str | None:
        if handle is None:
            return None
        top = self._top()
        if top is None:
            depth = handle.count("/") - 1
        elif handle == top or handle.startswith(top + "/"):
            depth = handle.count("/") - top.count("/")
        else:
            return None
        return "  " * max(depth, 0) + handle.rsplit("/", 1)[-1]

    def _text(self, who: str, handle: str, delta: str) -> list[str]:
        self._streamed.add(handle)
        *complete, rest = (self._partial.get(handle, "") + delta).split("\n")
        self._partial[handle] = rest
        return [f"{who} > {line}" for line in complete if line.strip()]

    def _message(self, who: str, handle: str, text: str) -> list[str]:
        rest = self._partial.pop(handle, "")
        if handle not in self._streamed:  # no text event came: the reply as a whole
            rest = text
        self._streamed.discard(handle)
        return [f"{who} > {line}" for line in rest.split("\n") if line.strip()]

    def _question(self, who: str, request: Any) -> list[str]:
        if not isinstance(request, dict) or request.get("id") in self._told:
            return []  # every handle up the path waits on the same request: told once
        self._told.append(str(request.get("id")))
        prompt = clipped(str(request.get("prompt") or ""), OUTPUT_CHARS)
        return [f"{who}: waits for an answer ({request.get('kind')}): {prompt}"]


class Feed:
    """The stream of the whole tree, read on a thread of its own (watching it makes every
    model call stream): each event's lines go to ``sink``, the text a handle's model is
    writing now is kept for ``texts()``, and ``told`` waits for a result to be told."""

    def __init__(self, rt: Runtime, narrator: Narrator, sink: Callable[[list[str]], None]) -> None:
        self._narrator = narrator
        self._sink = sink
        self._changed = threading.Condition()  # guards: _texts, _fresh, _results, _seen, _mark
        self._texts: dict[str, str] = {}
        self._fresh: set[str] = set()  # handles whose next piece of text starts a new reply
        self._results: collections.deque[tuple[int, str, str]] = collections.deque(maxlen=_RESULTS_KEPT)
        self._seen = 0  # results read so far
        self._mark = 0  # the last result ``told`` matched: the next wait looks past it
        self._stream = rt.stream(rt.root)
        self._thread = threading.Thread(target=self._read, name="toolnexus-tree-feed", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for event in self._stream:
                if event.handle is not None:
                    self._take(event)
        except Exception:  # a display problem must never take the run down
            return

    def _take(self, event: Event) -> None:
        handle, kind, data = str(event.handle), event.kind, event.data
        with self._changed:
            if kind == "text":
                start = handle in self._fresh
                self._fresh.discard(handle)
                self._texts[handle] = ("" if start else self._texts.get(handle, "")) + str(data.get("delta") or "")
            elif kind in ("message", "retry") or (kind == "state" and data.get("to") == "running"):
                self._fresh.add(handle)  # the next reply (or the retried one) starts afresh
        lines = self._narrator.lines(event)
        if lines:
            self._sink(lines)
        if kind == "result":
            with self._changed:
                self._seen += 1
                self._results.append((self._seen, handle, str(data.get("status"))))
                self._changed.notify_all()

    def texts(self) -> dict[str, str]:
        """The text each handle's model wrote in its current reply so far."""
        with self._changed:
            return dict(self._texts)

    def told(self, handle: str, status: str, timeout: float) -> bool:
        """Wait until ``handle``'s result with ``status`` (later than the last one this
        matched) has been told; whether it was within ``timeout`` seconds."""

        def found() -> int | None:
            return next((n for n, h, s in self._results if n > self._mark and h == handle and s == status), None)

        with self._changed:
            if not self._changed.wait_for(lambda: found() is not None, timeout=timeout):
                return False
            self._mark = found() or self._mark
            return True

    def stop(self) -> None:
        self._stream.close()
        self._thread.join(timeout=2.0)
