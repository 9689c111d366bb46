"""Cassettes: real model exchanges recorded once to a JSONL file, replayed offline after.

A cassette is a route override (``_model/transport/overrides``) for the block it is
active in, so it sees every HTTP model exchange of the process, whatever client, runtime,
thread, wire style or streaming mode made it. Recording, it sends each request on its way
and keeps what came back as it was read (a stream's events as they arrived); replaying, it
answers each request from the first unused recording that matches it, a streamed one
event by event. The file holds no request header, and the credentials of the transport
are shown as ``***`` in what it does hold.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any, Iterable

import attrs

from .._diff import ABSENT, canonical, first_difference
from ..errors import CassetteMismatch, ConfigError
from .._model.cancel import CancelScope
from .._model.transport import overrides
from .._model.transport.base import OpenReply, Route, Waiting
from .route import event_pieces

MODES = ("once", "none", "all")
FIELDS = ("method", "path", "body", "status", "content_type", "response")
_SHOWN = 60  # characters of a differing value shown in a mismatch


@attrs.frozen
class Recording:
    """One exchange of the file, with its body as matching sees it."""

    line: int
    method: str
    path: str
    body: Any
    status: int
    content_type: str
    response: str
    matched: Any  # the body without the ignored fields
    key: str  # ``matched`` as canonical JSON (keys sorted)


class Cassette:
    """Records or replays every HTTP model exchange of the process while its block runs
    (see ``toolnexus.testing.cassette``)."""

    def __init__(self, path: str | os.PathLike[str], mode: str = "once", *, ignore: Iterable[str] = ()) -> None:
        if mode not in MODES:
            raise ConfigError(f"cassette mode must be one of {', '.join(MODES)}, not {mode!r}")
        #: The file, JSONL, one exchange a line.
        self.path = Path(path)
        #: ``"once"``, ``"none"`` or ``"all"``.
        self.mode = mode
        self._ignore = tuple(_pattern(each) for each in ignore)
        self._lock = threading.Lock()  # guards: _taken, _kept, recorded, replayed, _active
        self._recordings: list[Recording] = []
        self._taken: list[bool] = []
        self._kept: list[dict[str, Any]] = []
        self._replaying = False
        self._active = False
        #: Exchanges recorded (written to the file when the block ends).
        self.recorded = 0
        #: Exchanges answered from the file.
        self.replayed = 0

    def __repr__(self) -> str:
        return f"Cassette(path={str(self.path)!r}, mode={self.mode!r})"

    @property
    def replaying(self) -> bool:
        """Whether the block answers from the file (else it records)."""
        return self._replaying

    def __enter__(self) -> Cassette:
        exists = self.path.is_file()
        if self.mode == "none" and not exists:
            raise ConfigError(f"cassette {self.path} does not exist (mode 'none' replays only)")
        self._replaying = self.mode == "none" or (self.mode == "once" and exists and self.path.stat().st_size > 0)
        if self._replaying:
            self._recordings = self._load()
            self._taken = [False] * len(self._recordings)
        with self._lock:
            if self._active:
                raise ConfigError(f"cassette {self.path} is already active")
            self._active = True
        overrides.install(self._open)
        return self

    def __exit__(self, *exc_info: object) -> None:
        overrides.remove(self._open)
        with self._lock:
            self._active = False
            kept = list(self._kept)
        if not self._replaying and (kept or self.mode == "all"):
            self._write(kept)

    def _open(
        self, request: overrides.Outgoing, onward: Route, deadline: float | None, scope: CancelScope, waiting: Waiting
    ) -> OpenReply:
        """Replay ``request``, or send it on and record the reply."""
        if not self._replaying:
            reply = onward.open(request.payload, deadline, scope, waiting, request.stream)
            return _Taped(reply, self, request)
        body = _body(request)
        key = canonical(_without(body, self._ignore))
        with self._lock:
            found = self._take(request, key)
            if found is not None:
                self.replayed += 1
        if found is None:
            raise overrides.PassedThrough(self._mismatch(request, body))
        if waiting:
            waiting.pop()()  # the request is out
        streamed = "event-stream" in found.content_type.lower()
        content = found.response.encode("utf-8")
        pieces = event_pieces(content) if streamed else [content]
        return overrides.CannedReply(found.status, {"Content-Type": found.content_type}, pieces, scope, deadline)

    def _take(self, request: overrides.Outgoing, key: str) -> Recording | None:
        for index, recording in enumerate(self._recordings):
            if self._taken[index] or recording.key != key:
                continue
            if recording.method == request.method and recording.path == request.path:
                self._taken[index] = True
                return recording
        return None

    def _mismatch(self, request: overrides.Outgoing, body: Any) -> CassetteMismatch:
        where = f"{request.method} {request.path}"
        same = [
            (index, each)
            for index, each in enumerate(self._recordings)
            if (each.method, each.path) == (request.method, request.path)
        ]
        if not same:
            detail = f"the cassette has no recording of {where}"
        else:
            now = _without(body, self._ignore)
            with self._lock:
                ranked = sorted(same, key=lambda pair: (_distance(pair[1].matched, now), self._taken[pair[0]], pair[0]))
            index, nearest = ranked[0]
            difference = first_difference(nearest.matched, now, "")
            if difference is None:
                detail = f"every recording of {where} that matches was already used (a recording serves one request)"
            else:
                field, recorded, sent = difference
                detail = (
                    f"the nearest recording (line {nearest.line}) differs first at {field or 'the body'}: "
                    f"recorded {_shown(recorded)}, sent {_shown(sent)}"
                )
        message = f"no recorded exchange for {where} in cassette {self.path}: {detail}"
        return CassetteMismatch(message, status=None, url=request.public_url, cause="no recorded exchange")

    def _record(self, request: overrides.Outgoing, status: int, content_type: str, content: bytes) -> None:
        """Record one exchange whose reply was read whole (called by the reply)."""
        entry = {
            "method": request.method,
            "path": request.path,
            "body": _body(request),
            "status": status,
            "content_type": content_type,
            "response": request.scrub(content.decode("utf-8", "replace")),
        }
        with self._lock:
            if self._active:
                self._kept.append(entry)
                self.recorded += 1

    def _load(self) -> list[Recording]:
        recordings = []
        with open(self.path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if line.strip():
                    recordings.append(self._recording(number, line))
        return recordings

    def _recording(self, number: int, line: str) -> Recording:
        try:
            entry = json.loads(line)
            if not isinstance(entry, dict) or any(field not in entry for field in FIELDS):
                raise ValueError(f"an exchange has the fields {', '.join(FIELDS)}")
            matched = _without(entry["body"], self._ignore)
            return Recording(
                line=number,
                method=str(entry["method"]),
                path=str(entry["path"]),
                body=entry["body"],
                status=int(entry["status"]),
                content_type=str(entry["content_type"]),
                response=str(entry["response"]),
                matched=matched,
                key=canonical(matched),
            )
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"cassette {self.path} line {number} is not a recorded exchange: {exc}") from None

    def _write(self, kept: list[dict[str, Any]]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_name(self.path.name + ".partial")
        with open(partial, "w", encoding="utf-8") as handle:
            for entry in kept:
                handle.write(json.dumps(entry, ensure_ascii=False) + "\n")
        os.replace(partial, self.path)


class _Taped:
    """A reply on its way to the exchange, kept by the cassette once it was read whole."""

    __slots__ = ("status", "headers", "_reply", "_cassette", "_request", "_parts", "_kept")

    def __init__(self, reply: OpenReply, cassette: Cassette, request: overrides.Outgoing) -> None:
        self.status = reply.status
        self.headers = reply.headers
        self._reply = reply
        self._cassette = cassette
        self._request = request
        self._parts: list[bytes] = []
        self._kept = False

    def read_all(self) -> bytes:
        content = self._reply.read_all()
        self._parts.append(content)
        return content

    def read_some(self, until: float | None) -> bytes:
        piece = self._reply.read_some(until)
        self._parts.append(piece)
        return piece

    def done(self) -> None:
        self._reply.done()
        self._keep()

    def abort(self, whole: bool = False) -> None:
        self._reply.abort(whole)
        if whole:
            self._keep()

    def _keep(self) -> None:
        if not self._kept:
            self._kept = True
            content_type = self.headers.get("Content-Type") or ""
            self._cassette._record(self._request, self.status, content_type, b"".join(self._parts))


def _body(request: overrides.Outgoing) -> Any:
    """The request's JSON, with the transport's credentials shown as ``***``."""
    return json.loads(request.scrub(request.payload.decode("utf-8")))


def _pattern(path: str) -> tuple[str, ...]:
    if not isinstance(path, str) or not path or any(not part for part in path.split(".")):
        raise ConfigError(f"an ignored field is a dotted path such as 'messages.*.name', not {path!r}")
    return tuple(path.split("."))


def _without(value: Any, patterns: tuple[tuple[str, ...], ...]) -> Any:
    """``value`` without the fields the patterns name (``*`` is any key or index)."""
    if not patterns or not isinstance(value, (dict, list)):
        return value
    items = value.items() if isinstance(value, dict) else enumerate(value)
    kept: list[tuple[Any, Any]] = []
    for key, item in items:
        below = tuple(each[1:] for each in patterns if each[0] in ("*", str(key)))
        if any(not each for each in below):
            continue  # a pattern ends here: the field is left out
        kept.append((key, _without(item, below)))
    return dict(kept) if isinstance(value, dict) else [item for _, item in kept]


def _distance(recorded: Any, sent: Any) -> int:
    """How many fields differ: the nearest recording differs in the fewest."""
    if isinstance(recorded, dict) and isinstance(sent, dict):
        keys = set(recorded) | set(sent)
        return sum(_distance(recorded[k], sent[k]) if k in recorded and k in sent else 1 for k in keys)
    if isinstance(recorded, list) and isinstance(sent, list):
        shared = min(len(recorded), len(sent))
        return sum(_distance(recorded[i], sent[i]) for i in range(shared)) + abs(len(recorded) - len(sent))
    return 0 if canonical(recorded) == canonical(sent) else 1


def _shown(value: Any) -> str:
    if value is ABSENT:
        return "nothing"
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."
