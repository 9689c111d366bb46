"""Token counts as providers report them: anything that is not a plain int counts as 0."""

from __future__ import annotations

from typing import Any


def count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
