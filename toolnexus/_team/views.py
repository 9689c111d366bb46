"""The runtime's read-only views of its tree: what a handle is now, the tree as a list,
its log, its open requests, its metrics. ``Runtime`` is these and its verbs; none of them
changes anything."""

from __future__ import annotations

from typing import Any

from ..data import Budget, HandleView, Request
from .._stores.conversations import ConversationStore
from .agentdef import AgentDef
from .handle import Handle
from .spawning import Spawner
from .tree import HandleTree
from .turns import TurnRunner


class TreeViews:
    """The read-only half of ``Runtime`` (it sets these parts when it is built)."""

    _tree: HandleTree
    _spawner: Spawner
    _turns: TurnRunner
    _inline: bool

    @property
    def conversation_store(self) -> ConversationStore:
        """The store every handle's transcript is in (conversation id = handle id): the
        ``store=`` given, an ``InMemoryStore``, or with a state the state's own."""
        return self._tree.store.transcripts.conversations

    @property
    def inline(self) -> bool:
        """Whether turns and tool calls run on the waiting thread (no worker threads)."""
        return self._inline

    def definition(self, name: str) -> AgentDef:
        """The registry's definition of an agent.

        Args:
            name: the agent's name.

        Returns:
            Its ``AgentDef`` (with its team as names).

        Raises:
            SpawnError: no agent has that name (``unknown agent``).
        """
        return self._spawner.definition(name)

    def inspect(self, h: Handle | str) -> HandleView:
        """What a handle is now, read from the state when another process changed it.

        Args:
            h: the handle, or its id (an older closed one too, until ``prune``).

        Returns:
            Its ``HandleView``: state, parent, children, turns, tokens, tool calls, cost,
            inbox and pending request.

        Raises:
            UnknownHandle: ``h`` is not a handle of this tree.
        """
        handle = self._tree.get(h)
        with handle.lock:
            handle.sync()
            return handle.view()

    def budget(self, h: Handle | str) -> Budget:
        """The handle's effective budget, as carved at spawn.

        Args:
            h: the handle, or its id.

        Returns:
            Each limit as the handle has it: its own, capped by what its parent had left.

        Raises:
            UnknownHandle: ``h`` is not a handle of this tree.
        """
        return self._tree.get(h).record.budget

    def handles(self) -> list[HandleView]:
        """The tree as a list.

        Returns:
            The live handles and at most ``keep_closed`` most recently closed ones, root
            first, then pre-order with children in spawn order (an older closed handle stays
            readable by id through ``inspect``, until ``prune`` removes it).

        Raises:
            StateError: the tree's state store cannot be read.
        """
        return self._tree.listing()

    def transitions(self, h: Handle | str) -> list[str]:
        """Every state change of a handle so far, in order.

        Args:
            h: the handle, or its id.

        Returns:
            Each change as ``"<from>→<to>"`` (``"idle→running"``, ``"running→suspended"``...).

        Raises:
            UnknownHandle: ``h`` is not a handle of this tree.
        """
        handle = self._tree.get(h)
        with handle.lock:
            handle.sync()
            return list(handle.record.transitions)

    def events(self) -> list[dict[str, Any]]:
        """The runtime's log: what happened to the tree's handles, oldest first.

        Returns:
            One dict per entry, with ``"event"`` (``spawn``, ``wake_queued``,
            ``wake_dequeued``, ``reattach``, ``post_rejected``, ``close``, ``recovered``...)
            and ``"handle"``, and the entry's own fields.

        Raises:
            StateError: the tree's state store cannot be read.
        """
        return self._tree.store.events.runtime_log()

    def open_requests(self) -> list[Request]:
        """The questions waiting for a person.

        Returns:
            Every request waiting for a ``resume``, once each (as the asking handle has it).

        Raises:
            StateError: the tree's state store cannot be read.
        """
        return self._tree.store.requests.open_requests()

    def metrics(self) -> str:
        """The runtime's metrics, for a Prometheus scrape.

        Returns:
            Prometheus text for every agent's model calls, tool calls, runs and cost.
        """
        return self._turns.metrics.render()
