"""An event id as a stream's cursor: what ``Last-Event-ID`` and ``after=`` may say."""

from __future__ import annotations

from ..errors import ToolnexusError

#: The most digits a part of an event id has: every serial a store holds is below 2**63.
ID_DIGITS = 18


def parse_after(after: str | None) -> tuple[int, int] | None:
    """An event id as a cursor ``(serial, k)``.

    Raises:
        ToolnexusError: ``after`` is not an id a store can hold: ``"42"``, or ``"42.3"`` for
            a text piece, each part at most 18 digits (so below 2**63).
    """
    if after is None:
        return None
    serial, dot, k = str(after).strip().partition(".")
    if not _digits(serial) or (dot and not _digits(k)):
        shown = str(after)[:40]
        raise ToolnexusError(
            f"not an event id: {shown!r} (an id is a serial like '42', or '42.3' for a text piece,"
            f" each part at most {ID_DIGITS} digits)"
        )
    return int(serial), int(k) if dot else 0


def _digits(text: str) -> bool:
    return 0 < len(text) <= ID_DIGITS and text.isascii() and text.isdigit()
