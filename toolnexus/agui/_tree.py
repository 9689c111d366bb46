"""The thread's handle tree as AG-UI state (CONTRACT §21): one ``STATE_SNAPSHOT`` when a run
starts, then ``STATE_DELTA`` patches (RFC 6902) as it changes.

A client applies each patch to exactly what it holds: the snapshot, then every delta in
order, and a patch that does not apply is dropped whole (later ones then drift). So this
module keeps the document as it sent it and patches only what it knows is there: a handle
seen for the first time is added whole, a changed field is replaced, nothing is removed.
Every path is under ``/toolnexus/handles``: the client's own keys are never touched.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable

from ..errors import UnknownHandle
from ._input import STATE_KEY

if TYPE_CHECKING:
    from .._team.runtime import Runtime
    from ..data import HandleView

#: The fields of one handle in the state, as ``HandleView`` has them.
FIELDS = ("agent", "state", "parent", "turns", "tokens")


def pointer(*keys: str) -> str:
    """A JSON Pointer to ``keys`` (``~`` written ``~0``, then ``/`` written ``~1``)."""
    return "".join("/" + key.replace("~", "~0").replace("/", "~1") for key in keys)


def entry(view: HandleView) -> dict[str, Any]:
    """One handle as the state shows it."""
    return {"agent": view.name, "state": view.state, "parent": view.parent, "turns": view.turns, "tokens": view.tokens}


class TreeState:
    """The tree of one thread as this run's client holds it."""

    def __init__(self, rt: Runtime, thread: str) -> None:
        self._rt = rt
        self.thread = thread
        self.handles: dict[str, dict[str, Any]] = {}

    def snapshot(self, state: dict[str, Any]) -> dict[str, Any]:
        """The client's own ``state`` with the tree under ``toolnexus``: the thread's
        handle and its descendants, as they are now."""
        self.handles = {view.id: entry(view) for view in self._walk(self.thread)}
        tree = {"thread": self.thread, "handles": {key: dict(value) for key, value in self.handles.items()}}
        return {**state, STATE_KEY: tree}

    def patch(self, handle_ids: Iterable[str]) -> list[dict[str, Any]]:
        """The operations that bring the client's copy of these handles up to date."""
        ops: list[dict[str, Any]] = []
        for handle_id in dict.fromkeys(handle_ids):
            try:
                view = self._rt.inspect(handle_id)
            except UnknownHandle:  # pruned meanwhile: what the client holds stays
                continue
            fresh = entry(view)
            held = self.handles.get(handle_id)
            where = (STATE_KEY, "handles", handle_id)
            if held is None:
                ops.append({"op": "add", "path": pointer(*where), "value": dict(fresh)})
            else:
                changed = (key for key in FIELDS if held.get(key) != fresh[key])
                ops.extend({"op": "replace", "path": pointer(*where, key), "value": fresh[key]} for key in changed)
            self.handles[handle_id] = fresh
        return ops

    def lineage(self, handle_id: str) -> list[str]:
        """``handle_id`` and its ancestors up to the thread's handle (their tokens roll up)."""
        chain = [handle_id]
        while chain[-1] != self.thread and "/" in chain[-1] and chain[-1].startswith(self.thread + "/"):
            chain.append(chain[-1].rsplit("/", 1)[0])
        return chain

    def _walk(self, handle_id: str) -> list[HandleView]:
        found: list[HandleView] = []
        todo = [handle_id]
        while todo:
            try:
                view = self._rt.inspect(todo.pop())
            except UnknownHandle:
                continue
            found.append(view)
            todo.extend(reversed(view.children))
        return found
