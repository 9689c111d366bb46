"""A handle record as a row of ``tn_handles``: its body through ``wire``'s converter, and
views of the rows a query read (a stored tree's listing, the runs ``toolnexus show``
prints). The fields that are columns or rows of their own (id, children, version) are not
in the body: they are put back when a record is read.
"""

from __future__ import annotations

import functools
import json
from typing import Any, Callable, Iterable

from ...data import HandleView
from ..._team.record import HandleRecord, TaskEntry, view_of
from ...wire import record_codec

ROOT = "root"

#: What a listing query reads of a handle row, in this order.
LISTED_COLUMNS = "id, parent_id, spawn_no, version, body"

_DUMPS = json.JSONEncoder(separators=(",", ":")).encode


@functools.cache
def _codec() -> tuple[Callable[[HandleRecord], dict[str, Any]], Callable[[dict[str, Any]], HandleRecord]]:
    """The record through the one converter, without the fields that are columns or rows
    (id, children, version); the reattachment index as a list (JSON keys are strings)."""

    def keys_out(keys: dict[tuple[str, str], TaskEntry]) -> list[list[Any]]:
        return [[agent, prompt, entry.serial, entry.child, entry.call] for (agent, prompt), entry in keys.items()]

    def keys_in(rows: Any, _: Any) -> dict[tuple[str, str], TaskEntry]:
        return {(agent, prompt): TaskEntry(serial, child, call) for agent, prompt, serial, child, call in rows}

    hooks: dict[str, tuple[Callable[[Any], Any], Callable[[Any, Any], Any]]] = {"task_keys": (keys_out, keys_in)}
    return record_codec(HandleRecord, omit=("id", "children", "version"), hooks=hooks)


def body_of(record: HandleRecord) -> str:
    """The row body of ``record``."""
    return _DUMPS(_codec()[0](record))


def record_of(handle_id: str, version: int, body: Any, children: list[str]) -> HandleRecord:
    """The record a row holds, with the columns and rows kept beside its body."""
    data = json_value(body)
    data.update(id=handle_id, version=version, children=children)
    return _codec()[1](data)


def spawn_no(handle_id: str) -> int:
    """The spawn number a handle id ends with (``root/a.7`` -> 7): children sort by it."""
    number = handle_id.rsplit("/", 1)[-1].rsplit(".", 1)[-1]
    return int(number) if number.isdigit() else 0


def json_value(value: Any) -> Any:
    """A JSON column as Python data (a driver may have decoded it already)."""
    return json.loads(value) if isinstance(value, (str, bytes)) else value


def views_of_rows(rows: Iterable[tuple[Any, ...]]) -> list[HandleView]:
    """``records_of_rows`` as the views ``handles()`` lists."""
    return [view_of(record) for record in records_of_rows(rows)]


def records_of_rows(rows: Iterable[tuple[Any, ...]]) -> list[HandleRecord]:
    """The records of the rows a listing read (``LISTED_COLUMNS``), root first, then
    pre-order with children in spawn order; a row whose parent was not read has no place
    and is left out."""
    rows = list(rows)
    below: dict[str | None, list[tuple[int, str]]] = {}
    for handle_id, parent_id, number, _, _ in rows:
        below.setdefault(parent_id, []).append((number, handle_id))
    for children in below.values():
        children.sort()
    records = {
        handle_id: record_of(handle_id, version, body, [child for _, child in below.get(handle_id, [])])
        for handle_id, _, _, version, body in rows
    }
    ordered: list[HandleRecord] = []
    stack = [ROOT] if ROOT in records else []
    while stack:
        record = records[stack.pop()]
        ordered.append(record)
        stack.extend(reversed([child for child in record.children if child in records]))
    return ordered
