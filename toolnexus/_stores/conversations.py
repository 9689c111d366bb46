"""Conversation stores: where ``ask`` and the runtime keep transcripts between turns.

The conversation is the unit of exclusion: ``Client.ask(id=...)`` and
``Client.resume(..., id=...)`` hold the conversation while they load, run and save it, so
concurrent calls on one conversation run one after the other and none of their exchanges
is lost. Inside one process that needs nothing from the store. A store shared between
processes adds an optional ``lock(id)`` method (see ``LockingStore``).
"""

from __future__ import annotations

import contextlib
import copy
import marshal
import threading
import weakref
from typing import Any, ContextManager, Iterator, Protocol, runtime_checkable

from ..errors import UnknownRequest


@runtime_checkable
class ConversationStore(Protocol):
    """Anything with these two methods can hold conversations (a database, a cache, ...).

    Implementations must be safe to call from several threads at once. A store that
    several processes share should also have ``lock(id)``: see ``LockingStore``.
    """

    def get(self, id: str) -> list[dict[str, Any]] | None: ...

    def save(self, id: str, messages: list[dict[str, Any]]) -> None: ...


@runtime_checkable
class LockingStore(Protocol):
    """A store that can exclude other processes from one conversation.

    ``lock(id)`` returns a context manager held while one ``ask`` or ``resume`` loads,
    runs and saves conversation ``id`` (a PostgreSQL advisory lock, a Redis lock, ...).
    It need not be re-entrant. Stores without it are still excluded within the process.
    """

    def lock(self, id: str) -> ContextManager[Any]: ...


def snapshot(messages: list[Any]) -> list[Any]:
    """A deep copy of a transcript (or of a request's tools, for the journal). Plain data
    (dicts, lists, strings, numbers: what a transcript is made of) is copied through
    ``marshal``, several times faster than ``copy.deepcopy`` and, like it, keeping shared
    parts shared; anything else (a subclass, an object of the caller's) goes through
    ``copy.deepcopy``."""
    try:
        copied: list[Any] = marshal.loads(marshal.dumps(messages))
    except ValueError:  # not plain data, or nested too deeply for marshal
        return copy.deepcopy(messages)
    return copied


class InMemoryStore:
    """The default store: a dict behind a lock, holding deep copies so callers cannot alias."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards: _conversations
        self._conversations: dict[str, list[dict[str, Any]]] = {}

    def get(self, id: str) -> list[dict[str, Any]] | None:
        with self._lock:
            messages = self._conversations.get(id)
        return snapshot(messages) if messages is not None else None

    def save(self, id: str, messages: list[dict[str, Any]]) -> None:
        copied = snapshot(list(messages))
        with self._lock:
            self._conversations[id] = copied

    def ids(self) -> list[str]:
        with self._lock:
            return list(self._conversations)

    def discard(self, id: str) -> None:
        """Forget conversation ``id`` (a runtime drops the transcripts of handles it let go)."""
        with self._lock:
            self._conversations.pop(id, None)


class ConversationGuard:
    """In-process exclusion for the conversations of one store, and the request each one
    was left waiting on (so a stale or repeated answer is refused, not re-applied)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards: _holders, _open
        self._holders: dict[str, tuple[threading.Lock, int]] = {}  # only while held or awaited
        self._open: dict[str, str] = {}  # conversation id -> id of the request it waits on

    @contextlib.contextmanager
    def exclusive(self, conversations: object, id: str) -> Iterator[None]:
        """Hold conversation ``id``: in this process, then through the store's own lock."""
        with self._lock:
            lock, users = self._holders.get(id, (None, 0))
            if lock is None:
                lock = threading.Lock()
            self._holders[id] = (lock, users + 1)
        try:
            with lock:  # waits only for the holder's own run, which its limits bound
                shared = (
                    conversations.lock(id)
                    if isinstance(conversations, LockingStore) and callable(conversations.lock)
                    else None
                )
                with shared if shared is not None else contextlib.nullcontext():
                    yield
        finally:
            with self._lock:
                lock, users = self._holders[id]
                if users == 1:
                    del self._holders[id]
                else:
                    self._holders[id] = (lock, users - 1)

    def claim(self, id: str, request_id: str) -> str | None:
        """Take the answer to ``request_id`` for conversation ``id`` (hold it first).

        Returns the request claimed, or None when this process never saw the conversation
        wait (the transcript decides then).

        Raises:
            UnknownRequest: the conversation waits on another request.
        """
        with self._lock:
            waiting = self._open.get(id)
            if waiting is not None and waiting != request_id:
                raise UnknownRequest(f"conversation {id!r} is not waiting on request {request_id!r}")
            return self._open.pop(id, None)

    def left_waiting(self, id: str, request_id: str | None) -> None:
        """Record what conversation ``id`` waits on after a run (None: nothing)."""
        with self._lock:
            if request_id is None:
                self._open.pop(id, None)
            else:
                self._open[id] = request_id


_guards: weakref.WeakKeyDictionary[Any, ConversationGuard] = weakref.WeakKeyDictionary()
_guards_lock = threading.Lock()  # guards: _guards


def guard_for(conversations: object) -> ConversationGuard:
    """The one guard of a conversation store in this process, shared by every client that
    uses it (a store that cannot be weakly referenced gets a guard for the caller alone)."""
    with _guards_lock:
        try:
            guard = _guards.get(conversations)
            if guard is None:
                guard = _guards[conversations] = ConversationGuard()
        except TypeError:
            guard = ConversationGuard()
    return guard
