"""Token counts as providers report them, and the replies' shared normalisation helpers.

A count that is not a plain non-negative int counts as 0 with a warning, so a broken or
hostile endpoint can never lower a ledger or a counter.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from typing import Any, Callable, Iterable, Sequence

log = logging.getLogger("toolnexus")


def count(value: Any, field: str) -> int:
    """``value`` as a token count; absent is 0, anything but a non-negative int is 0 and warned."""
    if value is None:
        return 0
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    log.warning("model reply reports %s=%r; counted as 0 tokens", field, _short(value))
    return 0


def _short(value: Any) -> Any:
    text = repr(value)
    return value if len(text) <= 40 else text[:40] + "..."


class Once:
    """Remembers which warnings one client (or runtime) has logged already."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards: _seen
        self._seen: set[str] = set()

    def warn(self, key: str, message: str, *args: Any) -> None:
        with self._lock:
            if key in self._seen:
                return
            self._seen.add(key)
        log.warning(message, *args)


def fingerprint(data: Any) -> str:
    """A digest of a reply, so ids made up for it are the same on every parse."""
    try:
        text = json.dumps(data, sort_keys=True, ensure_ascii=False, default=repr)
    except (TypeError, ValueError):
        text = repr(data)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def unique_ids(raw_ids: Iterable[Any], reply: Any, prefix: str) -> list[str]:
    """One id per call: the model's own when it is a non-empty string not used earlier in
    the reply, else one derived from the whole ``reply`` and the call's position (the
    digest is taken only when an id is missing)."""
    out: list[str] = []
    seen: set[str] = set()
    seed: str | None = None
    for index, raw in enumerate(raw_ids):
        if isinstance(raw, str) and raw:
            candidate = raw if raw not in seen else f"{raw}_{index}"
        else:
            seed = seed or fingerprint(reply)
            candidate = f"{prefix}{seed[:20]}_{index}"
        while candidate in seen:
            candidate += "_"
        seen.add(candidate)
        out.append(candidate)
    return out


def encode_arguments(raw: Any) -> str:
    """Tool-call arguments as the JSON text the openai shape requires."""
    if isinstance(raw, str):
        return raw
    if raw is None:
        return "{}"
    try:
        return json.dumps(raw, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError):
        return json.dumps(str(raw))


def output_text(output: Any) -> str:
    """A tool's output as the text sent to the model: a non-str value is sent as its ``str()``."""
    return output if isinstance(output, str) else str(output)


Message = dict[str, Any]


def answer_every_turn(
    messages: list[Message],
    has_calls: Callable[[Message], bool],
    answer_turn: Callable[[Message, Sequence[Message]], tuple[list[Message], int]],
) -> list[Message]:
    """Walk a transcript; after each message with tool calls, ``answer_turn(message, rest)``
    gives the messages that answer it (every call once) and how many of ``rest`` it used."""
    out: list[Message] = []
    index = 0
    while index < len(messages):
        message = messages[index]
        out.append(message)
        index += 1
        if has_calls(message):
            answers, used = answer_turn(message, messages[index:])
            out.extend(answers)
            index += used
    return out
