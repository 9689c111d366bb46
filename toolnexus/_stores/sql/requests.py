"""Requests waiting for an answer (``tn_requests``): the park index and the answer claim,
one conditional statement each, so exactly one answer wins across processes."""

from __future__ import annotations

import json
import time
from typing import Any, Callable

from ..._team.handle import Handle
from ...data import Request
from ...wire import from_wire, to_wire
from .base import StateStore
from .handlerows import json_value


class SqlRequests:
    """The ``tn_requests`` rows of one tree (``parts.ParkedRequests``)."""

    def __init__(self, state: StateStore, runtime_id: str) -> None:
        self._state = state
        self._runtime_id = runtime_id
        self._park = state.dialect.insert_ignoring(
            "tn_requests (runtime_id, request_id, handle_id, status, request, created_at)"
            " VALUES (?, ?, ?, 'open', ?, ?)"
        )

    def park(self, request: Request, handle_id: str) -> None:
        """Park ``request`` on the deepest handle whose tool asked (children settle first)."""
        self._state.execute(
            self._park, (self._runtime_id, request.id, handle_id, json.dumps(to_wire(request)), time.time())
        )

    def parked(self, request_id: str) -> str | None:
        rows = self._state.execute(
            "SELECT handle_id FROM tn_requests WHERE runtime_id = ? AND request_id = ? AND status = 'open'",
            (self._runtime_id, request_id),
        )
        return rows[0][0] if rows else None

    def unpark(self, request_id: str, outcome: str, answer: Any = None) -> str | None:
        rows = self._state.execute(
            "UPDATE tn_requests SET status = ?, answer = ?, closed_at = ?"
            " WHERE runtime_id = ? AND request_id = ? AND status = 'open' RETURNING handle_id",
            (outcome, json.dumps(answer) if answer is not None else None, time.time(), self._runtime_id, request_id),
        )
        return rows[0][0] if rows else None

    def suspended_on(self, request_id: str, table: Callable[[], list[Handle]]) -> list[str]:
        rows = self._state.execute(
            "SELECT id FROM tn_handles WHERE runtime_id = ? AND pending_id = ?", (self._runtime_id, request_id)
        )
        return [row[0] for row in rows]

    def open_requests(self) -> list[Request]:
        rows = self._state.execute(
            "SELECT request FROM tn_requests WHERE runtime_id = ? AND status = 'open' ORDER BY created_at",
            (self._runtime_id,),
        )
        return [from_wire(Request, json_value(row[0])) for row in rows]
