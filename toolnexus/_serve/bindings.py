"""What belongs to whom (CONTRACT §20): public ids bound to a principal and a handle.

A client never sees a handle id (``root/editor.1``, guessable by counting); it sees a
public id, random (``new_id``: 128 bits from ``secrets``, URL-safe) or chosen by the
protocol (an AG-UI ``threadId``), bound to the principal that made it. ``bindings_of(rt)``
is the runtime's binding store: rows of ``tn_bindings`` in the §11 state when the runtime
has one (so every worker process agrees), else a dictionary in this process. It is decided
once per runtime.

A ``Binding`` is ``(surface, principal, id) -> handle`` plus ``data``, a JSON object the
surface owns (AG-UI: open interrupts and pending frontend tool calls; A2A: the context id
and the task state; Flask runs: nothing), and ``version``, bumped by every update:

- ``bind(surface, principal, handle, data, id=None)``: a new binding (``id`` random unless
  given); ``None`` when that ``(surface, principal, id)`` is taken (two workers making the
  same thread at once: one wins, the other reads the winner's).
- ``get(surface, principal, id)``: the binding, or ``None`` when there is none *or it is
  another principal's*: a surface answers both the same (``refused.not_found``).
- ``update(binding, data)``: compare-and-set on ``binding.version``, atomic across
  processes; the new binding, or ``None`` when another request changed (or deleted) it
  first: read it again and decide again (``change`` does that loop).
- ``delete(binding)``: whether it was there.

Pruning a run (``rt.prune``) deletes the bindings of its handles with it.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Callable, Protocol

import attrs

from .._team.port import port_of
from ..wire import check_json
from .refused import Refused

if TYPE_CHECKING:
    from .._team.runtime import Runtime
    from .._stores.sql.base import StateStore

#: Random bytes in a public id: 128 bits, 22 URL-safe characters.
ID_BYTES = 16
#: The longest id a surface looks up (a client's own ids included); longer is not found.
MAX_ID = 200
#: How often ``change`` reads again and retries when another request won the update.
CHANGE_ATTEMPTS = 16


def new_id() -> str:
    """A fresh public id: 128 random bits, URL-safe (``[A-Za-z0-9_-]``, 22 characters)."""
    return secrets.token_urlsafe(ID_BYTES)


@attrs.frozen
class Binding:
    """A public ``id`` of ``surface``, bound to ``principal`` and to the handle ``handle``;
    ``data`` is the surface's own JSON object; ``version`` counts its updates."""

    surface: str
    principal: str
    id: str
    handle: str
    data: dict[str, Any] = attrs.field(factory=dict)
    version: int = 1


class Bindings(Protocol):
    """A runtime's binding store (see the module's docstring)."""

    def bind(
        self, surface: str, principal: str, handle: str, data: dict[str, Any] | None = None, *, id: str | None = None
    ) -> Binding | None: ...

    def get(self, surface: str, principal: str, id: str) -> Binding | None: ...

    def update(self, binding: Binding, data: dict[str, Any]) -> Binding | None: ...

    def delete(self, binding: Binding) -> bool: ...


def change(
    store: Bindings, surface: str, principal: str, id: str, edit: Callable[[Binding], dict[str, Any]]
) -> Binding:
    """Read the binding, ``edit`` its data (a new dict from the binding as it is now) and
    write it back, again from a fresh read whenever another request won the update.

    Raises:
        Refused: ``404``, no such binding for this principal (or it went meanwhile);
            ``409`` when other requests kept winning.
    """
    for _ in range(CHANGE_ATTEMPTS):
        found = store.get(surface, principal, id)
        if found is None:
            raise Refused(404, f"no {surface} {id!r}")
        updated = store.update(found, edit(found))
        if updated is not None:
            return updated
    raise Refused(409, f"{surface} {id!r} is being changed by other requests; try again")


def lookable(id: object) -> bool:
    """Whether ``id`` can name a binding at all (text of a sane length that the state can
    store); anything else is simply not found."""
    if not isinstance(id, str) or not 0 < len(id) <= MAX_ID:
        return False
    try:
        id.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: no store can hold it
        return False
    return True


def _dumps(data: dict[str, Any]) -> str:
    if not isinstance(data, dict):
        raise TypeError(f"a binding's data is a JSON object, not {type(data).__name__}")
    check_json(data, "a binding's data")
    return json.dumps(data, separators=(",", ":"))


class MemoryBindings:
    """Bindings of a runtime without a state: they live and end with this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards: _rows (a leaf)
        self._rows: dict[tuple[str, str, str], Binding] = {}

    def bind(
        self, surface: str, principal: str, handle: str, data: dict[str, Any] | None = None, *, id: str | None = None
    ) -> Binding | None:
        fresh = json.loads(_dumps(data or {}))
        while True:
            made = Binding(surface, principal, id if id is not None else new_id(), handle, fresh)
            with self._lock:
                added = self._add(made)
            if added is not None or id is not None:
                return added  # taken: ``None`` for a chosen id; a random one is drawn again

    def _add(self, made: Binding) -> Binding | None:
        key = (made.surface, made.principal, made.id)
        if key in self._rows:
            return None
        self._rows[key] = made
        return made

    def get(self, surface: str, principal: str, id: str) -> Binding | None:
        if not lookable(id):
            return None
        with self._lock:
            return self._rows.get((surface, principal, id))

    def update(self, binding: Binding, data: dict[str, Any]) -> Binding | None:
        fresh = json.loads(_dumps(data))
        key = (binding.surface, binding.principal, binding.id)
        with self._lock:
            now = self._rows.get(key)
            if now is None or now.version != binding.version:
                return None
            self._rows[key] = changed = attrs.evolve(now, data=fresh, version=now.version + 1)
            return changed

    def delete(self, binding: Binding) -> bool:
        with self._lock:
            return self._rows.pop((binding.surface, binding.principal, binding.id), None) is not None


#: One binding's row: the primary key of ``tn_bindings``.
_KEY = "runtime_id = ? AND surface = ? AND principal = ? AND public_id = ?"


class SqlBindings:
    """Bindings as ``tn_bindings`` rows of one tree in a state: every worker process
    of the app reads the same ones. Each change is one statement (an insert that yields to
    an existing row, an update conditional on the version), so it is atomic across
    processes on SQLite, PostgreSQL and Django's database alike."""

    def __init__(self, state: StateStore, runtime_id: str) -> None:
        self._state = state
        self._runtime_id = runtime_id

    def bind(
        self, surface: str, principal: str, handle: str, data: dict[str, Any] | None = None, *, id: str | None = None
    ) -> Binding | None:
        body = _dumps(data or {})
        while True:
            chosen = id if id is not None else new_id()
            with self._state.transaction():
                rows = self._state.execute(
                    "INSERT INTO tn_bindings (runtime_id, surface, principal, public_id, handle_id, data, version,"
                    " created_at) VALUES (?, ?, ?, ?, ?, ?, 1, ?)"
                    " ON CONFLICT (runtime_id, surface, principal, public_id) DO NOTHING RETURNING version",
                    (self._runtime_id, surface, principal, chosen, handle, body, time.time()),
                )
            if rows:
                return Binding(surface, principal, chosen, handle, json.loads(body))
            if id is not None:
                return None  # taken (random ids do not collide: a new one is drawn)

    def get(self, surface: str, principal: str, id: str) -> Binding | None:
        if not lookable(id):
            return None
        rows = self._state.execute(
            f"SELECT handle_id, data, version FROM tn_bindings WHERE {_KEY}", (self._runtime_id, surface, principal, id)
        )
        if not rows:
            return None
        handle, data, version = rows[0]
        return Binding(surface, principal, id, str(handle), json.loads(data), int(version))

    def update(self, binding: Binding, data: dict[str, Any]) -> Binding | None:
        body = _dumps(data)
        with self._state.transaction():
            rows = self._state.execute(
                f"UPDATE tn_bindings SET data = ?, version = version + 1 WHERE {_KEY} AND version = ?"
                " RETURNING version",
                (body, *self._key(binding), binding.version),
            )
        return attrs.evolve(binding, data=json.loads(body), version=int(rows[0][0])) if rows else None

    def delete(self, binding: Binding) -> bool:
        with self._state.transaction():
            rows = self._state.execute(f"DELETE FROM tn_bindings WHERE {_KEY} RETURNING version", self._key(binding))
        return bool(rows)

    def _key(self, binding: Binding) -> tuple[str, str, str, str]:
        return self._runtime_id, binding.surface, binding.principal, binding.id


_lock = threading.Lock()  # guards: _of
_of: weakref.WeakKeyDictionary[Runtime, Bindings] = weakref.WeakKeyDictionary()


def bindings_of(rt: Runtime) -> Bindings:
    """The binding store of ``rt``: in its state when it has one, else in this process
    (kept as long as ``rt`` is). Decided on first use, once per runtime."""
    with _lock:
        found = _of.get(rt)
        if found is None:
            tree_store = port_of(rt).tree_store  # where the runtime keeps its tree
            state = tree_store.state
            found = _of[rt] = MemoryBindings() if state is None else SqlBindings(state, tree_store.runtime_id)
        return found
