"""The handles' rows (``tn_handles``): a record's body through ``wire``'s converter
(``handlerows``), read, re-read when another connection changed it, and written by the
unit of work (``unit.py``) that changed it."""

from __future__ import annotations

import time
from typing import Any

import attrs

from ..._team.handle import Handle
from ..._team.record import HandleRecord
from .base import StateStore
from .handlerows import body_of, json_value, record_of, spawn_no

#: A handle row's columns, in the order ``write`` gives them.
_COLUMNS = (
    "runtime_id",
    "id",
    "parent_id",
    "spawn_no",
    "state",
    "version",
    "settled",
    "pending_id",
    "body",
    "updated_at",
)
_RECORD_FIELDS = tuple(field.name for field in attrs.fields(HandleRecord))


class SqlRecords:
    """The ``tn_handles`` rows of one tree (``parts.Records``)."""

    def __init__(self, state: StateStore, runtime_id: str) -> None:
        self._state = state
        self._runtime_id = runtime_id
        self._upsert = state.dialect.upsert("tn_handles", _COLUMNS, ("runtime_id", "id"), _COLUMNS[4:])

    def load(self, handle_id: str) -> HandleRecord | None:
        rows = self._state.execute(
            "SELECT version, body FROM tn_handles WHERE runtime_id = ? AND id = ?", (self._runtime_id, handle_id)
        )
        return self._record(handle_id, rows[0][0], rows[0][1]) if rows else None

    def children(self, handle: Handle) -> list[str]:
        return self.child_ids(handle.id)

    def child_ids(self, handle_id: str) -> list[str]:
        """The ids of ``handle_id``'s children, in spawn order."""
        rows = self._state.execute(
            "SELECT id FROM tn_handles WHERE runtime_id = ? AND parent_id = ? ORDER BY spawn_no",
            (self._runtime_id, handle_id),
        )
        return [row[0] for row in rows]

    def live(self) -> list[tuple[str, str]]:
        """``(id, agent name)`` of every handle that is not closed, in id order."""
        rows = self._state.execute(
            "SELECT id, body FROM tn_handles WHERE runtime_id = ? AND state <> 'closed' ORDER BY id",
            (self._runtime_id,),
        )
        return [(row[0], json_value(row[1])["name"]) for row in rows]

    def refresh(self, handles: list[Handle], seen: int | None, *, locking: bool) -> None:
        """Re-read the records another connection may have changed, in one statement.

        ``seen`` is the state's count of the others' commits (``foreign_commits``): a
        record verified at that count needs no read, where the count is exact (a state
        whose transactions exclude every other writer), or outside a transaction. Inside
        one on a state where it may lag (PostgreSQL), ``locking`` reads, and locks, every
        row the unit changes.
        """
        exact = seen is not None and (not locking or self._state.exclusive_transactions)
        stale = [
            handle
            for handle in handles
            if handle.record.version != 0  # made here and not written yet: nothing to read
            and not (exact and handle.verified == seen and handle.record.version >= 0)
        ]
        if not stale:
            return
        marks = ", ".join("?" for _ in stale)
        # ORDER BY: every transaction locks rows in one order (ids sort ancestors first), or
        # two of them could each hold a row the other waits for.
        select = f"SELECT id, version, body FROM tn_handles WHERE runtime_id = ? AND id IN ({marks}) ORDER BY id"
        if locking:
            select = self._state.dialect.locking(select)
        found = {row[0]: row for row in self._state.execute(select, (self._runtime_id, *(h.id for h in stale)))}
        for handle in stale:
            handle.verified = seen
            row = found.get(handle.id)
            if row is None or row[1] == handle.record.version:
                continue
            fresh = self._record(handle.id, row[1], row[2])
            for name in _RECORD_FIELDS:
                setattr(handle.record, name, getattr(fresh, name))

    def write(self, handle: Handle, seen: int | None) -> None:
        """Write ``handle``'s record as a new version, as fresh as the unit's read of the
        others' commits (``seen``)."""
        record = handle.record
        record.version = max(record.version, 0) + 1
        handle.verified = seen
        pending = record.pending
        self._state.execute(
            self._upsert,
            (
                self._runtime_id,
                record.id,
                record.parent,
                spawn_no(record.id),
                record.state,
                record.version,
                record.settled,
                pending.id if pending is not None else None,
                body_of(record),
                time.time(),
            ),
        )

    def _record(self, handle_id: str, version: int, body: Any) -> HandleRecord:
        return record_of(handle_id, version, body, self.child_ids(handle_id))
