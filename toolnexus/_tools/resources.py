"""Closing what tools belong to: a runtime or client that closes closes the ``resource`` of
every tool it was given (an MCP server's connection), each once, whatever it raises."""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Any, Iterable

from .tools import Tool

log = logging.getLogger("toolnexus")


def close_resources(tools: Iterable[Tool]) -> None:
    """Close the distinct resources of ``tools``; a failing ``close`` is logged."""
    seen: list[Any] = []
    for each in tools:
        resource = each.resource
        if resource is not None and not any(resource is known for known in seen):
            seen.append(resource)
    for resource in seen:
        _close(resource)


def _close(resource: Any) -> None:
    try:
        resource.close()
    except Exception:
        log.warning("closing %r failed", resource, exc_info=True)


class Held:
    """The resources of the toolkits a client ran, held weakly (a resource the host drops
    is not kept alive by the client), closed by ``close``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards: _resources
        self._resources: weakref.WeakSet[Any] = weakref.WeakSet()

    def track(self, tools: Iterable[Tool]) -> None:
        found = [each.resource for each in tools if each.resource is not None]
        if found:
            with self._lock:
                self._resources.update(found)

    def close(self) -> None:
        with self._lock:
            resources, self._resources = list(self._resources), weakref.WeakSet()
        for resource in resources:
            _close(resource)
