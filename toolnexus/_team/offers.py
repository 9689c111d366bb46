"""Tools a host offers one handle's model, beside its agent's own: kept in the handle's
record (so every process that runs its turns offers them), and run by the host
(``_tools.hosted``). The AG-UI endpoint offers a front end's tools to a thread's agent.
"""

from __future__ import annotations

from typing import Any, Sequence

from .._tools.hosted import hosted_tool
from .._tools.tools import Tool
from .handle import Handle
from .tree import HandleTree


def offer(tree: HandleTree, handle_id: str, specs: Sequence[dict[str, Any]]) -> None:
    """Offer ``specs`` (``{"name", "description", "parameters"}``) to the model of the
    handle's turns from the next one on, instead of what it was offered before (one unit
    of work)."""
    handle = tree.get(handle_id)
    with handle.lock, tree.store.change(handle):
        handle.record.offered = [dict(spec) for spec in specs]


def offered(handle: Handle) -> list[Tool]:
    """The tools offered to ``handle``'s model now."""
    with handle.lock:
        specs = list(handle.record.offered)
    return [hosted_tool(spec) for spec in specs]
