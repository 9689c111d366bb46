"""Bodies (CONTRACT §20): a served surface takes JSON only, and only so much of it.

``json_body(content_type, length, read, limit=...)`` is the one check every surface runs
before anything starts, in this order:

1. ``Content-Type`` must be ``application/json`` (parameters such as ``charset`` allowed):
   anything else, or none, is ``Refused(415)``. A page on another site can then not post
   without a CORS preflight (``text/plain`` and form posts are "simple" requests).
2. At most ``limit`` bytes (``MAX_BODY`` by default): a ``Content-Length`` over it is
   ``Refused(413)`` before a byte is read; a body without one is read up to ``limit`` and
   one byte more, and refused as soon as that byte comes.
3. Strict JSON (``wire.parse_json``): malformed, not UTF-8, ``NaN``/``Infinity``, or nested
   deeper than 64 levels is ``Refused(400)``.

``read(n)`` is the framework's read of the request body (``environ["wsgi.input"].read``,
``flask.request.stream.read``, Django's ``request.read``); ``length`` its
``Content-Length`` (``None`` when absent).
"""

from __future__ import annotations

from typing import Any, Callable

from ..errors import ConfigError, WireError
from ..wire import parse_json
from .refused import Refused

#: The largest body a surface reads unless told otherwise: 1 MiB.
MAX_BODY = 1 << 20
#: The one media type a served surface takes.
JSON_TYPE = "application/json"
#: How much a body is read at a time.
_CHUNK = 1 << 16


def check_type(content_type: str | None) -> None:
    """Refuse a body that is not declared ``application/json``.

    Raises:
        Refused: ``415``.
    """
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media != JSON_TYPE:
        shown = f"{(content_type or '')[:60]!r}" if content_type else "none"
        raise Refused(415, f"send the body as Content-Type: {JSON_TYPE} (got {shown})")


def content_length(raw: object) -> int | None:
    """A ``Content-Length`` value as a number of bytes; ``None`` when absent.

    Raises:
        Refused: ``400``, a value that is not a number of bytes.
    """
    if raw is None or raw == "":
        return None
    text = str(raw).strip()
    if not (text.isascii() and text.isdigit()) or len(text) > 18:
        raise Refused(400, "Content-Length is not a number of bytes")
    return int(text)


def read_limited(read: Callable[[int], bytes], length: int | None, limit: int) -> bytes:
    """The body, never more than ``limit`` bytes of it.

    Raises:
        Refused: ``413``, ``length`` or the body is over ``limit`` (nothing more is read).
    """
    if length is not None and length > limit:
        raise Refused(413, f"the body is {length} bytes; at most {limit} are taken")
    want = length if length is not None else limit + 1
    parts: list[bytes] = []
    got = 0
    while got < want:
        chunk = read(min(_CHUNK, want - got))
        if not chunk:
            break
        parts.append(chunk)
        got += len(chunk)
    if got > limit:
        raise Refused(413, f"the body is over {limit} bytes")
    return b"".join(parts)


def parse(data: bytes, what: str) -> Any:
    """Strict JSON.

    Raises:
        Refused: ``400``.
    """
    try:
        return parse_json(data, what=what)
    except WireError as exc:
        raise Refused(400, str(exc)) from None


def json_body(
    content_type: str | None,
    length: int | None,
    read: Callable[[int], bytes],
    *,
    limit: int = MAX_BODY,
    what: str = "the body",
) -> Any:
    """Check the type, read at most ``limit`` bytes, parse strictly (see the module's
    docstring for the order and the answers).

    Raises:
        Refused: ``415``, ``413`` or ``400``.
    """
    check_type(content_type)
    return parse(read_limited(read, length, limit), what)


def check_limit(limit: object, what: str) -> int:
    """A body limit option as a number of bytes.

    Raises:
        ConfigError: not a positive whole number.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ConfigError(f"{what} must be a positive number of bytes, not {limit!r}")
    return limit
