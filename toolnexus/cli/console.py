"""What a person sees while a team runs: what the team does, the live handle tree, and
approval prompts.

What the team does (its delegations, tool calls and text, from ``activity``) is printed
line by line as it happens. On a terminal the tree is redrawn in place below those lines,
each running handle with the last line of the text its model is writing; when the output is
piped, the tree is printed once when the run stops for a question. Approvals are asked at
the terminal (``Approve? [y/n]``), taken from a fixed decision, or read as one line from
piped stdin.
"""

from __future__ import annotations

import os
import shutil
import threading
from typing import IO, Mapping, Sequence

from ..data import AgentResult, Answer, HandleView, Request, make_answer
from ..errors import UnknownHandle
from .._team.runtime import Runtime
from .activity import Feed, Narrator

REFRESH_S = 0.1
#: How long a command waits for the lines of a run's result to be printed before it goes on.
CATCH_UP_S = 2.0

_CSI = "\x1b["


# --- the live handle tree ----------------------------------------------------------------


def tree_lines(
    views: Sequence[HandleView], texts: Mapping[str, str] | None = None, states: Mapping[str, str] | None = None
) -> list[str]:
    """One aligned line per handle, indented by depth below the shallowest one: id, state,
    turns, tokens, and the cost when any handle of the tree has one (a model with a price);
    with ``texts``, a running handle's text (its last line) below it. ``states`` gives the
    word shown for a handle instead of its state (``interrupted`` for an idle one whose turn
    was interrupted, say)."""
    if not views:
        return []
    top = min(view.id.count("/") for view in views)
    depth = {view.id: view.id.count("/") - top for view in views}
    width = max(2 * depth[view.id] + len(view.id) for view in views)
    shown = {view.id: (states or {}).get(view.id, view.state) for view in views}
    state_width = max(9, *(len(word) for word in shown.values()))
    priced = any(view.cost is not None for view in views)
    lines = []
    for view in views:
        label = "  " * depth[view.id] + view.id
        line = f"{label:<{width}}  {shown[view.id]:<{state_width}}  turns {view.turns:>2}  tokens {view.tokens:>6}"
        if priced:
            shown_cost = dollars(view.cost) if view.cost is not None else "-"  # nothing it spent was priced
            line += f"  cost {shown_cost:>10}"
        if view.pending is not None:
            line += "  (waiting for an answer)"
        lines.append(line.rstrip())
        text = (texts or {}).get(view.id, "").strip()
        if text and view.state == "running":
            lines.append("  " * depth[view.id] + "  > " + text.splitlines()[-1])
    return lines


def run_views(rt: Runtime, top: str | None) -> list[HandleView]:
    """The handles of one run: ``top`` and its subtree, pre-order (none before it exists).
    A handle pruned meanwhile is left out."""
    views: list[HandleView] = []
    stack = [top] if top is not None else []
    while stack:
        try:
            view = rt.inspect(stack.pop())
        except UnknownHandle:
            continue
        views.append(view)
        stack.extend(reversed(view.children))
    return views


def dollars(cost: float) -> str:
    """A cost as the tree shows it: US dollars to a millionth (model calls cost fractions of a cent)."""
    return f"${cost:.6f}"


class LiveTree:
    """Shows what a run does and ``rt.handles()`` while it goes on; with ``one_run``, only
    the run ``follow`` names (nothing before it is named).

    The lines of what the team does (``activity``) are printed as they happen. With the
    tree ``enabled``, on a terminal it is redrawn in place below them with ANSI cursor
    movement, from a small refresh thread that wakes every ``REFRESH_S``
    seconds on an ``Event`` and draws only when the tree changed; otherwise it is printed as
    plain lines when the run stops for a question (``pause``). ``stop()`` ends and joins
    the threads.
    """

    def __init__(
        self, rt: Runtime, stream: IO[str], *, tty: bool | None = None, enabled: bool = True, one_run: bool = False
    ) -> None:
        self._rt = rt
        self._one_run = one_run
        self._top: str | None = None  # with one_run: the top handle of the run shown
        self._out = stream
        self._tty = _is_tty(stream) if tty is None else tty
        self._enabled = enabled
        self._feed: Feed | None = None
        self._lock = threading.Lock()  # guards: _last, _drawn, _paused, _held, writes to the stream
        self._last: list[str] | None = None
        self._drawn = 0
        self._paused = False
        self._held: list[str] = []  # lines of what the team did while a question was asked
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = False

    def __enter__(self) -> LiveTree:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def _live(self) -> bool:
        """Whether the tree is redrawn in place (a terminal)."""
        return self._enabled and self._tty

    def start(self) -> None:
        if self._started:
            return
        self._started = True
        if self._live:
            self._write(f"{_CSI}?25l")  # hide the cursor while redrawing
        self._feed = Feed(self._rt, Narrator(lambda: self._top if self._one_run else None), self.log)
        if self._live:
            self._thread = threading.Thread(target=self._loop, name="toolnexus-tree", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """End the threads and wait for them; on a terminal, draw the tree's last change."""
        if not self._started:
            return
        self._started = False
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._feed is not None:
            self._feed.stop()
        if self._live:
            self.refresh()
            self._write(f"{_CSI}?25h")
        self._feed = None

    def caught_up(self, result: AgentResult) -> None:
        """Wait (at most ``CATCH_UP_S``) until what led to ``result`` has been printed."""
        if self._feed is not None and result.handle_id:
            self._feed.told(result.handle_id, result.status, CATCH_UP_S)

    def pause(self, result: AgentResult | None = None) -> None:
        """Print what led to ``result`` and the current tree, then stop printing (so a
        question can be asked below them)."""
        if result is not None:
            self.caught_up(result)
        self.refresh()
        with self._lock:
            self._paused = True
            self._drawn = 0  # what comes next is printed below; start a fresh region
        if self._live:
            self._write(f"{_CSI}?25h")  # the person answering needs to see the cursor

    def unpause(self) -> None:
        with self._lock:
            self._paused = False
            self._last = None
            held, self._held = self._held, []
        if self._live:
            self._write(f"{_CSI}?25l")
        if held:
            self.log(held)

    def follow(self, top: str) -> None:
        """Show the run whose top handle is ``top`` (with ``one_run``)."""
        self._top = top

    @property
    def following(self) -> str | None:
        """The top handle of the run ``follow`` named."""
        return self._top

    def views(self) -> list[HandleView]:
        """What the tree shows: the handles of the run it follows, or every handle."""
        return run_views(self._rt, self._top) if self._one_run else self._rt.handles()

    def refresh(self) -> None:
        if not self._enabled:
            return
        feed = self._feed
        lines = tree_lines(self.views(), feed.texts() if feed is not None and self._tty else None)
        with self._lock:
            if self._paused or lines == self._last:
                return
            self._last = lines
            if self._tty:
                self._redraw(lines)
            else:
                self._out.write("\n" + "\n".join(lines) + "\n")
                self._out.flush()

    def log(self, lines: list[str]) -> None:
        """Print lines of what the team did: above the tree on a terminal; kept until the
        question is answered while one is asked."""
        with self._lock:
            if self._paused:
                self._held.extend(lines)
                return
            if not self._live:
                self._out.write("".join(line + "\n" for line in lines))
                self._out.flush()
                return
            clear = f"{_CSI}{self._drawn}F" if self._drawn else "\r"
            self._out.write(clear + f"{_CSI}J" + "".join(line + "\n" for line in lines))
            self._drawn = 0
            if self._last:
                self._redraw(self._last)
            else:
                self._out.flush()

    def _redraw(self, lines: list[str]) -> None:
        columns = max(20, shutil.get_terminal_size((100, 24)).columns - 1)
        parts = [f"{_CSI}{self._drawn}F" if self._drawn else "\r"]
        parts += [f"{_CSI}2K{line[:columns]}\n" for line in lines]
        parts.append(f"{_CSI}J")  # clear what a longer previous tree left below
        self._out.write("".join(parts))
        self._out.flush()
        self._drawn = len(lines)

    def _loop(self) -> None:
        while not self._stop.wait(REFRESH_S):
            try:
                self.refresh()
            except Exception:  # a display problem must never take the run down
                return

    def _write(self, text: str) -> None:
        with self._lock:
            self._out.write(text)
            self._out.flush()


def _is_tty(stream: IO[str]) -> bool:
    try:
        return bool(stream.isatty()) and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):
        return False


# --- approvals -------------------------------------------------------------------------


class Approver:
    """Answers approval requests: a fixed decision (``--yes``/``--no``), the person at the
    terminal (asked until they type y or n), or one line read from piped stdin. End of
    input declines."""

    def __init__(self, decision: bool | None, stdin: IO[str], out: IO[str]) -> None:
        self._decision = decision
        self._in = stdin
        self._out = out

    def __call__(self, request: Request) -> Answer:
        path = "/".join((request.data or {}).get("path") or [])
        where = f" (from {path})" if path else ""
        self._say(f"\n{request.kind} needed{where}:\n  {request.prompt}\n")
        ok = self._decide()
        return make_answer(request.id, ok) if ok else make_answer(request.id, False, reason="declined")

    def _decide(self) -> bool:
        if self._decision is not None:
            self._say(f"Approve? [y/n] {'y' if self._decision else 'n'} ({'--yes' if self._decision else '--no'})\n\n")
            return self._decision
        interactive = _is_tty(self._in)
        while True:
            self._say("Approve? [y/n] ")
            line = self._in.readline()
            if not line:  # end of input: nobody can say yes
                self._say("(no answer: declined)\n\n")
                return False
            reply = line.strip().lower()
            if not interactive:
                self._say(f"{reply}\n")
            if reply in ("y", "yes"):
                self._say("\n")
                return True
            if reply in ("n", "no") or not interactive:
                self._say("\n")
                return False
            self._say("please answer y or n\n")

    def _say(self, text: str) -> None:
        self._out.write(text)
        self._out.flush()
