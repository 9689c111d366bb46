"""A turn's journal rows (``tn_journal``): its input, its resume and each recorded step,
written inside the unit of work of the change they belong to."""

from __future__ import annotations

import json
import time
from typing import Any, ContextManager

from ..._team.handle import Handle
from ..journaling import JournalRows
from ..parts import Change
from .base import StateStore
from .handlerows import json_value

_COLUMNS = ("runtime_id", "handle_id", "serial", "segment", "kind", "step", "call_id", "status", "payload", "at")


class SqlJournal(JournalRows):
    """The ``tn_journal`` rows of one tree (``parts.Journals``)."""

    def __init__(self, state: StateStore, runtime_id: str, unit: Change) -> None:
        self._state = state
        self._runtime_id = runtime_id
        self._unit = unit
        self._put = state.dialect.upsert("tn_journal", _COLUMNS, _COLUMNS[:7], ("status", "payload", "at"))

    def change(self, *handles: Handle, dirty: bool = True) -> ContextManager[Any]:
        return self._unit(*handles, dirty=dirty)

    def get(
        self, handle_id: str, serial: int, segment: int, kind: str, step: int, call_id: str
    ) -> tuple[str, Any] | None:
        rows = self._state.execute(
            "SELECT status, payload FROM tn_journal"
            " WHERE runtime_id = ? AND handle_id = ? AND serial = ? AND segment = ?"
            " AND kind = ? AND step = ? AND call_id = ?",
            (self._runtime_id, handle_id, serial, segment, kind, step, call_id),
        )
        return (rows[0][0], json_value(rows[0][1]) if rows[0][1] is not None else None) if rows else None

    def put(
        self, handle_id: str, serial: int, segment: int, kind: str, step: int, call_id: str, status: str, payload: Any
    ) -> None:
        body = json.dumps(payload) if payload is not None else None
        self._state.execute(
            self._put, (self._runtime_id, handle_id, serial, segment, kind, step, call_id, status, body, time.time())
        )

    def rows(self, handle_id: str) -> list[tuple[int, int, str, int, str, str, Any]]:
        rows = self._state.execute(
            "SELECT serial, segment, kind, step, call_id, status, payload FROM tn_journal"
            " WHERE runtime_id = ? AND handle_id = ?",
            (self._runtime_id, handle_id),
        )
        return [(*row[:6], json_value(row[6]) if row[6] is not None else None) for row in rows]
