"""Plain JSON data compared: its canonical text and the first field where two differ.

A cassette names the field where a request differs from its nearest recording, and a
replay names the field where a step differs from its record: both ask here.
"""

from __future__ import annotations

import json
from typing import Any


def canonical(value: Any) -> str:
    """``value`` as JSON text with its keys sorted: equal data, equal text."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def first_difference(recorded: Any, now: Any, where: str = "") -> tuple[str, Any, Any] | None:
    """The first field (keys in sorted order, items in order) where the two differ, as a
    path (``messages[1].content``) with the two values there (``ABSENT`` where one side
    has nothing), or ``None`` when they are equal."""
    if isinstance(recorded, dict) and isinstance(now, dict):
        for key in sorted(set(recorded) | set(now)):
            field = f"{where}.{key}" if where else str(key)
            if key not in recorded or key not in now:
                return field, recorded.get(key, ABSENT), now.get(key, ABSENT)
            found = first_difference(recorded[key], now[key], field)
            if found is not None:
                return found
        return None
    if isinstance(recorded, list) and isinstance(now, list):
        for index in range(max(len(recorded), len(now))):
            field = f"{where}[{index}]"
            if index >= len(recorded) or index >= len(now):
                return field, _item(recorded, index), _item(now, index)
            found = first_difference(recorded[index], now[index], field)
            if found is not None:
                return found
        return None
    if canonical(recorded) != canonical(now):
        return where, recorded, now
    return None


def _item(items: list[Any], index: int) -> Any:
    return items[index] if index < len(items) else ABSENT


class _Absent:
    def __repr__(self) -> str:
        return "nothing"


#: What ``first_difference`` gives for the side of a field that has nothing there.
ABSENT = _Absent()
