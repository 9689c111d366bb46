"""Conversation stores: where ``ask`` and the runtime keep transcripts between turns."""

from __future__ import annotations

import copy
import threading
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class ConversationStore(Protocol):
    """Anything with these two methods can hold conversations (a database, a cache, ...).

    Implementations must be safe to call from several threads at once.
    """

    def get(self, id: str) -> list[dict[str, Any]] | None: ...

    def save(self, id: str, messages: list[dict[str, Any]]) -> None: ...


class InMemoryStore:
    """The default store: a dict behind a lock, holding deep copies so callers cannot alias."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards: _conversations
        self._conversations: dict[str, list[dict[str, Any]]] = {}

    def get(self, id: str) -> list[dict[str, Any]] | None:
        with self._lock:
            messages = self._conversations.get(id)
        return copy.deepcopy(messages) if messages is not None else None

    def save(self, id: str, messages: list[dict[str, Any]]) -> None:
        snapshot = copy.deepcopy(list(messages))
        with self._lock:
            self._conversations[id] = snapshot

    def ids(self) -> list[str]:
        with self._lock:
            return list(self._conversations)
