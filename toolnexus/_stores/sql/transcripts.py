"""The handles' transcripts (``tn_messages``): ``rt.conversation_store`` of a stored tree,
next to the tree, and a settling turn's transcript committed with its outcome."""

from __future__ import annotations

import contextlib
import functools
import json
from typing import Any, Callable, Iterator

from ..conversations import ConversationStore
from .base import StateStore
from .handlerows import json_value

_COLUMNS = ("runtime_id", "conversation_id", "body")


class SqlTranscripts:
    """The ``tn_messages`` rows of one tree (``parts.Transcripts``); it is its own
    conversation store (conversation id = handle id)."""

    def __init__(self, state: StateStore, runtime_id: str) -> None:
        self._state = state
        self._runtime_id = runtime_id
        self._save = state.dialect.upsert("tn_messages", _COLUMNS, _COLUMNS[:2], _COLUMNS[2:])

    @property
    def conversations(self) -> ConversationStore:
        return self

    def get(self, id: str) -> list[dict[str, Any]] | None:
        rows = self._state.execute(
            "SELECT body FROM tn_messages WHERE runtime_id = ? AND conversation_id = ?", (self._runtime_id, id)
        )
        return json_value(rows[0][0]) if rows else None

    def save(self, id: str, messages: list[dict[str, Any]]) -> None:
        with self._state.transaction():
            self._state.execute(self._save, (self._runtime_id, id, json.dumps(list(messages))))

    @contextlib.contextmanager
    def saving(self, handle_id: str, messages: list[dict[str, Any]]) -> Iterator[Callable[[], None]]:
        yield functools.partial(self.save, handle_id, messages)
