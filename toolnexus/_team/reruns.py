"""A recorded run again: replayed with today's code (``replay``), or continued from one of
its steps as a new run (``fork``). ``Runtime`` is these verbs too; the work is
``replay.py``'s and ``forking.py``'s."""

from __future__ import annotations

from typing import Any, Callable

from ..data import Answer, ReplayReport
from ..errors import ConfigError, ReplayError
from . import forking
from .handle import RUNNING, SUSPENDED, Handle
from .replay import TOOL_MODES, Replayer, Sources
from .spawning import Spawner
from .tree import HandleTree
from .turns import TurnRunner


class Reruns:
    """The replay and fork verbs of ``Runtime`` (it sets these parts when it is built)."""

    _tree: HandleTree
    _spawner: Spawner
    _turns: TurnRunner
    root: Handle
    retry: Callable[[Handle | str], None]  # Runtime's verb

    def replay(self, run: Handle | str, *, tools: str = "recorded") -> ReplayReport:
        """Replay a settled run with the registry as it is now (souls, tools, teams,
        outputs), its journal answering every model step at every depth: no model is
        asked, nothing goes over the network, nothing is written. Each step's request is
        compared with the recorded one; the replay stops at the first difference.

        A ``task`` call replays the child the recorded call made; recorded Answers are
        given again, so a replay never suspends. A runtime opened only to replay needs no
        model options: ``Runtime(registry, state=FILE)``, in any process that can open it.

        Args:
            run: the run's handle (a child of the root, as ``run_agent`` made it), or its id.
            tools: ``"recorded"`` serves the recorded tool results (no tool runs);
                ``"live"`` runs today's tools and compares their ``output`` and ``is_error``.

        Returns:
            A ``ReplayReport``: ``same``, or the first ``Divergence`` (handle, step, kind,
            field, recorded and actual), with the run's recorded result, tokens and cost.

        Raises:
            UnknownHandle: ``run`` is not a handle of this tree.
            ReplayError: the run, or a handle in it, is running or suspended, or has no
                journal (pruned, or recorded before requests were kept); the message names it.
            ConfigError: ``tools`` is neither ``"recorded"`` nor ``"live"``.
        """
        if tools not in TOOL_MODES:
            raise ConfigError(f"tools must be one of {', '.join(TOOL_MODES)}, not {tools!r}")
        handle = self._tree.get(run)
        if handle is self.root:
            raise ReplayError("the root handle runs no agent: replay one of its children")
        for each in self._tree.walk(handle):
            with each.lock:
                each.sync()
                if each.record.state in (RUNNING, SUSPENDED) or each.busy:
                    raise ReplayError(f"{each.id} is {each.record.state}: replay a run once it has settled")
        replayer = Replayer(self._sources(), live=tools == "live")
        replayer.run(handle.id)
        view = self._tree_view(handle)
        with handle.lock:
            result = handle.record.result
        session = replayer.session
        return ReplayReport(run=handle.id, same=session.divergence is None, divergence=session.divergence,
                            result=result, tokens=view.tokens, cost=view.cost, steps=session.steps)

    def fork(
        self, h: Handle | str, *, at: int | None = None, prompt: str | None = None, answer: Answer | None = None
    ) -> Handle:
        """Start a new run whose history up to a step is ``h``'s recorded one (replies,
        tool results, children and their answers served from the journal: no model asked,
        no tool run, nothing charged), going on live from there. It is a new handle under
        the root (``root/<name>.<n>``), running when this returns: ``wait`` it. The original
        run, its results, transcripts and journal stay as they were.

        Args:
            h: the handle whose record the fork starts from, or its id.
            at: the step (numbered from 1 across ``h``'s turns) asked live; steps before it
                are the recorded ones. Default: past the last recorded step (with
                ``prompt``: the first step of ``h``'s last turn).
            prompt: the input that replaces that of the turn starting at ``at``.
            answer: an Answer to a request ``h``'s own tool asked (answered or still
                pending): the fork goes on from that step with this Answer instead.

        Returns:
            The fork's handle.

        Raises:
            UnknownHandle: ``h`` is not a handle of this tree.
            UnknownRequest: ``answer`` names no request ``h`` asked.
            ReplayError: ``h`` is running or has no journal, ``at`` is outside ``1`` to
                the recorded steps plus one, or (with ``prompt``) does not start a turn; or
                ``answer`` answers a request a teammate of ``h`` asked.
            ConfigError: ``answer`` with ``at`` or ``prompt``.
            SpawnError: ``h``'s agent is no longer in the registry, or a budget refuses it.
        """
        source = self._tree.get(h)
        if source is self.root:
            raise ReplayError("the root handle runs no agent: fork one of its children")
        rows = self._tree.store.journal.rows(source.id)
        point = forking.fork_point(source, rows, at=at, prompt=prompt, answer=answer)
        fork = self._spawner.spawn(self.root, source.record.name, None)
        forking.seed(fork, rows, point)
        self.retry(fork)
        return fork

    def _sources(self) -> Sources:
        tree = self._tree

        def record(handle_id: str) -> Any:
            handle = tree.get(handle_id)
            with handle.lock:
                handle.sync()
                return handle.record

        return Sources(record=record, rows=tree.store.journal.rows, definition=self._spawner.definition,
                       turns=self._turns, nonce=self.root.record.nonce)

    def _tree_view(self, handle: Handle) -> Any:
        with handle.lock:
            handle.sync()
            return handle.view()
